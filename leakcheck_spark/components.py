"""Connected components of an undirected graph, in the DataFrame API.

The algorithm is the alternating *large-star* / *small-star* of R. Kiveris, S. Lattanzi,
V. Mirrokni, V. Rastogi and S. Vassilvitskii, "Connected Components in MapReduce and Beyond",
ACM SoCC 2014, which converges in O(log^2 n) rounds of two shuffles each (a path of n nodes, the
worst case of plain label propagation with its n rounds, takes a handful).  With ``m(u)`` the
smallest of `u` and its neighbours:

* large-star(u): every neighbour ``v > u`` is linked to ``m(u)`` instead of to `u`;
* small-star(u): `u` and every neighbour ``v < u`` are linked to ``m(u)``.

Both keep the components and, at the fixed point, leave a forest of stars whose centres are the
components' smallest nodes: the component id of a node is the smallest node id of its component,
whatever the partitioning, the master or the order of the edges.

Edges are kept as ``(hi, lo)`` pairs, ``hi > lo``, deduplicated; each step reads the previous
one's output from a local checkpoint, so the plan (and the lineage) stays one step deep however
many rounds a graph needs.  No RDD or SparkContext API is used: this runs over Spark Connect too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# O(log^2 n) rounds: 64-bit node ids need fewer than this; more means a bug, not a big graph.
MAX_ROUNDS = 4096


def connected_components(edges: DataFrame, vertices: DataFrame | None = None,
                         src: str = "src", dst: str = "dst", node: str = "node") -> DataFrame:
    """(node, component) for every node of `edges` (and of `vertices`, if given: isolated nodes
    are their own component).

    Args:
        edges: undirected edges, columns `src` and `dst` (integers); self-loops and repeats are
            allowed and ignored.
        vertices: optional nodes (column `node`) that may have no edge.
        src, dst, node: the column names.

    Returns:
        columns ``node`` and ``component`` (longs); ``component`` is the smallest node of the
        component.  The result is checkpointed (cheap to reuse, nothing left to recompute).
    """
    import pyspark.sql.functions as F

    from leakcheck_spark.errors import require_columns

    require_columns(edges, "components.connected_components", {src: None, dst: None}, "edges")
    if vertices is not None:
        require_columns(vertices, "components.connected_components", {node: None}, "vertices")
    pairs = (edges.select(F.col(src).cast("long").alias("a"), F.col(dst).cast("long").alias("b"))
             .where(F.col("a").isNotNull() & F.col("b").isNotNull() & (F.col("a") != F.col("b")))
             .select(F.greatest("a", "b").alias("hi"), F.least("a", "b").alias("lo"))
             .distinct())
    stars = _stars(pairs.localCheckpoint(eager=True))
    # A star's leaves point at its centre; the centres (never a leaf) are their own component.
    found = stars.select(F.col("hi").alias("node"), F.col("lo").alias("component")).unionByName(
        stars.select(F.col("lo").alias("node"), F.col("lo").alias("component")))
    if vertices is not None:
        alone = vertices.select(F.col(node).cast("long").alias("node")).where(
            F.col("node").isNotNull())
        found = found.unionByName(alone.select("node", F.col("node").alias("component")))
        found = found.groupBy("node").agg(F.min("component").alias("component"))
    else:
        found = found.distinct()
    out = found.localCheckpoint(eager=True)
    return out if node == "node" else out.withColumnRenamed("node", node)


def _stars(pairs: DataFrame) -> DataFrame:
    """Alternate large-star and small-star from `pairs` (checkpointed ``(hi, lo)`` edges) until
    the edges form stars around their components' smallest nodes."""
    for _ in range(MAX_ROUNDS):
        pairs = _small_star(_large_star(pairs).localCheckpoint(eager=True)).localCheckpoint(
            eager=True)
        if _is_star_forest(pairs):
            return pairs
    raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds")


def _smallest_below(pairs: DataFrame) -> DataFrame:
    """(node, m): for every node with a smaller neighbour, the smallest of them."""
    import pyspark.sql.functions as F

    return pairs.groupBy(F.col("hi").alias("node")).agg(F.min("lo").alias("m"))


def _large_star(pairs: DataFrame) -> DataFrame:
    """Each edge (v, u), v > u, becomes (v, m(u)): u's larger neighbours move to u's minimum."""
    import pyspark.sql.functions as F

    m = _smallest_below(pairs)
    return (pairs.join(m, pairs["lo"] == m["node"], "left")
            .select("hi", F.coalesce("m", "lo").alias("lo")).distinct())


def _small_star(pairs: DataFrame) -> DataFrame:
    """Each edge (u, v), u > v, becomes (v, m(u)) and (u, m(u)): u and its smaller neighbours
    attach to their minimum."""
    import pyspark.sql.functions as F

    m = _smallest_below(pairs)
    joined = pairs.join(m, pairs["hi"] == m["node"])
    return (joined.select(F.col("lo").alias("hi"), F.col("m").alias("lo"))
            .unionByName(joined.select("hi", F.col("m").alias("lo")))
            .where(F.col("hi") != F.col("lo")).distinct())


def _is_star_forest(pairs: DataFrame) -> bool:
    """True when every node has at most one smaller neighbour and that neighbour has none: the
    fixed point of both steps."""
    import pyspark.sql.functions as F

    leaves = pairs.groupBy("hi").agg(F.count(F.lit(1)).alias("n"))
    two_parents = leaves.where(F.col("n") > 1).limit(1)
    centre_is_leaf = pairs.select(F.col("lo").alias("hi")).join(leaves.select("hi"), "hi",
                                                                 "left_semi").limit(1)
    return two_parents.unionByName(centre_is_leaf.select("hi", F.lit(0).cast("long").alias("n"))
                                   ).isEmpty()
