"""Matching stages: which records match which groups, and the overlaps and matrices built on that.

Everything here works on *keys* (one per distinct normalised text) rather than on records, so a
text with 100,000 copies is one row per group it occurs in, never 10^10 record pairs:

* :func:`key_groups` -- (key, group, dataset, n): how many records of a group carry a key.
* :func:`exact_edges` -- a self-edge per key: records with equal keys match.  Near matching
  (a later stage) adds verified edges between different keys in the same (key, other, match,
  similarity) form, and everything downstream works unchanged.
* :func:`copied_keys` -- the keys with more than one record, the only self-edges that matter.
* :func:`reach` -- for each (key, group) every group its records match, and through which key.
* :func:`matrix_counts` -- the cells of both matrices in one pass (small; collected by report);
  :func:`split_counts`, :func:`dataset_counts` each matrix's alone.
* :func:`overlaps` -- one row per (record, other group) with the 5 smallest matching ids.
* :func:`label_conflicts` -- keys whose records carry different canonical labels.

All stages are ``DataFrame -> DataFrame``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leakcheck_spark.errors import require_columns

if TYPE_CHECKING:
    from typing import Sequence

    from pyspark.sql import Column, DataFrame

MAX_MATCH_IDS = 5
SAMPLE_TEXT_CHARS = 200  # a label conflict's sample text is truncated to this
OVERLAP_COLUMNS = ("from", "id", "to", "match_ids", "match", "similarity")
# The order overlaps are sampled and written in: by (from, to, id), then by every other column,
# as one group can repeat an id (rows equal in all of them are interchangeable).
OVERLAP_ORDER = ("from", "to", "id", "match", "similarity", "match_ids")


def key_groups(records: DataFrame) -> DataFrame:
    """(key, group, dataset, n) for non-empty records."""
    import pyspark.sql.functions as F

    require_columns(records, "match.key_groups", {"key": None, "group": None, "dataset": None},
                    "records")

    return (
        records.where(F.col("key").isNotNull())
        .groupBy("key", "group", "dataset")
        .agg(F.count(F.lit(1)).alias("n"))
    )


def exact_edges(kg: DataFrame) -> DataFrame:
    """(key, other, match, similarity): every key matches itself exactly."""
    import pyspark.sql.functions as F

    require_columns(kg, "match.exact_edges", {"key": None}, "keys")

    return kg.select("key").distinct().select(
        "key", F.col("key").alias("other"), F.lit("exact").alias("match"),
        F.lit(1.0).alias("similarity"),
    )


def unit_edges(records: DataFrame) -> DataFrame:
    """(key, other, match, similarity): the exact edges between near-matching *units*.

    With near matching the stages work on each record's `unit` (:func:`as_units`): records of
    one unit share their tokens, so a unit's near edges hold for every record of it, while one
    key may hold several units (``"ab c"`` and ``"a bc"``).  Records of one key still match
    exactly: every two units of a key with at least two records are joined by an exact edge,
    each unit to itself too (a unit's lone record never reaches its own group: :func:`reach`).
    One aggregation by key, no join: a key has one unit unless its texts differ in their tokens
    (whitespace splitting a word), so this is one row per copied key in practice (m units give
    m^2).
    """
    import pyspark.sql.functions as F

    require_columns(records, "match.unit_edges", {"key": None, "unit": None}, "records")

    per_key = (records.where(F.col("key").isNotNull()).groupBy("key")
               .agg(F.collect_set("unit").alias("_units"), F.count(F.lit(1)).alias("_n"))
               .where(F.col("_n") >= 2))
    pairs = F.flatten(F.transform("_units", lambda u: F.transform(
        "_units", lambda v: F.struct(u.alias("key"), v.alias("other")))))
    return (per_key.select(F.explode(pairs).alias("_e"))
            .select("_e.key", "_e.other", F.lit("exact").alias("match"),
                    F.lit(1.0).alias("similarity")))


def as_units(records: DataFrame) -> DataFrame:
    """`records` with each record's near-matching `unit` in place of its `key`, for the stages
    that match records (:func:`unit_edges`); label conflicts stay on the key."""
    require_columns(records, "match.as_units", {"unit": None}, "records")
    return records.drop("key").withColumnRenamed("unit", "key")


def copied_keys(kg: DataFrame) -> DataFrame:
    """(key): the keys carried by at least two records of :func:`key_groups`.  Only their
    self-edges can reach anything in :func:`reach` (a key's only record never matches itself),
    so passing these to :func:`exact_edges` keeps most keys out of its joins."""
    import pyspark.sql.functions as F

    require_columns(kg, "match.copied_keys", {"key": None, "n": None}, "key groups")

    return kg.groupBy("key").agg(F.sum("n").alias("_n")).where(F.col("_n") >= 2).select("key")


def reach(kg: DataFrame, edges: DataFrame) -> DataFrame:
    """For each (key, group): the groups reached through each edge.

    Columns: key, group, dataset, n, other, to_group, to_dataset, match, similarity.  A key's
    self-edge reaches its own group only when the group holds another copy (n >= 2).
    """
    import pyspark.sql.functions as F

    require_columns(kg, "match.reach", {"key": None, "group": None, "dataset": None, "n": None},
                    "key groups (match.key_groups)")
    require_columns(edges, "match.reach", {"key": None, "other": None}, "edges")

    target = kg.select(
        F.col("key").alias("other"), F.col("group").alias("to_group"),
        F.col("dataset").alias("to_dataset"), F.col("n").alias("to_n"),
    )
    joined = kg.join(edges, "key").join(target, "other")
    own_copy = (F.col("key") == F.col("other")) & (F.col("group") == F.col("to_group"))
    return joined.where(~own_copy | (F.col("n") >= 2)).drop("to_n")


def matrix_counts(reached: DataFrame) -> DataFrame:
    """(matrix, row, col, count): both matrices' cells in one pass over `reached`.

    ``matrix = "split"``: records of group `row` matching at least one record of group `col`;
    ``"dataset"``: records of dataset `row` matching a record of dataset `col` (on the diagonal
    only matches in a different split of the same dataset count).  Each reached row stands for
    a split cell and (off the group's own diagonal) a dataset cell; a (key, group) counts its
    `n` records once per distinct cell.
    """
    import pyspark.sql.functions as F

    require_columns(reached, "match.matrix_counts",
                    {"key": None, "group": None, "dataset": None, "n": None, "to_group": None,
                     "to_dataset": None}, "reached groups (match.reach)")

    def cell(matrix: str, row: str, col: str) -> Column:
        return F.struct(F.lit(matrix).alias("matrix"), F.col(row).alias("row"),
                        F.col(col).alias("col"))

    cross = (F.col("dataset") != F.col("to_dataset")) | (F.col("group") != F.col("to_group"))
    cells = F.array(cell("split", "group", "to_group"),
                    F.when(cross, cell("dataset", "dataset", "to_dataset")))
    return (
        reached.select("key", "group", "n", F.explode(cells).alias("cell"))
        .where(F.col("cell").isNotNull()).distinct()  # n: one per (key, group)
        .groupBy("cell.matrix", "cell.row", "cell.col").agg(F.sum("n").alias("count"))
    )


def split_counts(reached: DataFrame) -> DataFrame:
    """(group, to_group, count): records of `group` matching at least one record of `to_group`
    (the split cells of :func:`matrix_counts`)."""
    return _cells(reached, "split", "group", "to_group")


def dataset_counts(reached: DataFrame) -> DataFrame:
    """(dataset, to_dataset, count): records of `dataset` matching a record of `to_dataset`;
    on the diagonal only matches in a different split of the same dataset count (the dataset
    cells of :func:`matrix_counts`)."""
    return _cells(reached, "dataset", "dataset", "to_dataset")


def _cells(reached: DataFrame, matrix: str, row: str, col: str) -> DataFrame:
    import pyspark.sql.functions as F

    return (matrix_counts(reached).where(F.col("matrix") == matrix)
            .select(F.col("row").alias(row), F.col("col").alias(col), "count"))


def smallest_ids(records: DataFrame, by: tuple[str, ...] = ("key", "group"),
                 k: int = MAX_MATCH_IDS) -> DataFrame:
    """(*by, ids): the k smallest ids of the non-empty records of each `by` cell, ascending.

    `ids` holds (id_num, id) structs, so integer ids sort numerically (:func:`ranked_ids`).
    """
    import pyspark.sql.functions as F

    require_columns(records, "match.smallest_ids",
                    dict.fromkeys((*by, "key", "id_num", "id")), "records")
    return ranked_ids(records.where(F.col("key").isNotNull()), by, k)


def ranked_ids(rows: DataFrame, by: Sequence[str], k: int = MAX_MATCH_IDS,
               kind: str | None = None) -> DataFrame:
    """(*by, [kind,] ids): the k smallest distinct (id_num, id) of `rows` in each `by` cell, as
    an ascending array of structs; with `kind` (a column ranked before the id), only the ids of
    the cell's smallest kind, and that kind.

    A dense rank in a window keeps k ids a cell: Spark limits each cell to its first k before
    the shuffle (a partial window group limit), so a cell reached by thousands of rows (a cluster
    of near-identical texts) moves and sorts k rows, never one array of all of them.  An id
    repeated in a cell (a dataset may repeat ids; a record reached through two edges) counts
    once: dense ranks, collected as a set (at most k values).
    """
    import pyspark.sql.functions as F
    from pyspark.sql import Window

    first = [kind] if kind else []
    # Where a cell mixes datasets of integer and of string ids (clean's --against ids), the
    # integer ids (an id_num) come first, numerically, then the string ids (none), as text.
    w = Window.partitionBy(*by).orderBy(*first, F.col("id_num").asc_nulls_last(), "id")
    top = (rows.select(*by, *first, "id_num", "id").withColumn("_rank", F.dense_rank().over(w))
           .where(F.col("_rank") <= k))
    ranked = F.struct(*first, F.col("id_num").isNull().alias("_text"), "id_num", "id")
    cells = top.groupBy(*by).agg(*[F.min(c).alias(c) for c in first],
                                 F.collect_set(ranked).alias("_ids"))
    own = F.filter("_ids", lambda x: x[kind] == F.col(kind)) if kind else F.col("_ids")
    return cells.select(*by, *first, F.transform(
        F.array_sort(own), lambda x: F.struct(x["id_num"].alias("id_num"), x["id"].alias("id"))
    ).alias("ids"))


def id_rows(ids: DataFrame) -> DataFrame:
    """The rows of :func:`smallest_ids`' arrays: one (..., id_num, id) per id, for
    :func:`ranked_ids` to rank again in other cells."""
    import pyspark.sql.functions as F

    rest = [c for c in ids.columns if c != "ids"]
    return (ids.select(*rest, F.explode("ids").alias("_id"))
            .select(*rest, "_id.id_num", "_id.id"))


def plain_ids(ids: Column) -> Column:
    """The ids of an `ids` array of :func:`ranked_ids`, as they are."""
    import pyspark.sql.functions as F

    return F.transform(ids, lambda x: x["id"])


def overlaps(records: DataFrame, reached: DataFrame) -> DataFrame:
    """One row per (record, other group) it matches: OVERLAP_COLUMNS (SPEC section 5).

    `match` is ``exact`` when the record's own text occurs in `to` (exact wins), else ``near``;
    `similarity` is 1.0 for exact, else the best verified similarity; `match_ids` are the ids
    of the row's kind of match: for an exact row the records of `to` with the same normalised
    text (not those only near it), for a near row its near matches.
    """
    import pyspark.sql.functions as F

    require_columns(records, "match.overlaps",
                    {"key": None, "group": None, "id": None, "id_num": None}, "records")
    require_columns(reached, "match.overlaps",
                    {"key": None, "group": None, "other": None, "to_group": None, "match": None,
                     "similarity": None}, "reached groups (match.reach)")

    ids = id_rows(smallest_ids(records).select(
        F.col("key").alias("other"), F.col("group").alias("to_group"), "ids"))
    cell = ("key", "group", "to_group")
    cross = reached.where(F.col("group") != F.col("to_group"))
    # Exact edges rank first: a cell with one lists its exact matches only.
    near = (F.col("match") != "exact").cast("int").alias("_near")
    listed = ranked_ids(cross.select(*cell, "other", near).join(ids, ["other", "to_group"]),
                        cell, kind="_near")
    best = cross.groupBy(*cell).agg(
        F.max(F.when(F.col("match") != "exact", F.col("similarity"))).alias("near_similarity"))
    per_key = listed.join(best, list(cell)).select(
        *cell, (F.col("_near") == 0).alias("exact"), "near_similarity",
        plain_ids(F.col("ids")).alias("match_ids"))
    return (
        records.where(F.col("key").isNotNull()).select("key", "group", "id")
        .join(per_key, ["key", "group"])
        .select(
            F.col("group").alias("from"), "id", F.col("to_group").alias("to"), "match_ids",
            F.when(F.col("exact"), F.lit("exact")).otherwise(F.lit("near")).alias("match"),
            F.when(F.col("exact"), F.lit(1.0)).otherwise(F.col("near_similarity"))
            .alias("similarity"),
        )
    )


def label_conflicts(records: DataFrame) -> DataFrame:
    """Keys whose records carry more than one canonical label (exact key only).

    Columns: key (hex of the normalised-text hash), text (one sample, the first member's text
    -- of tied members the one read first -- truncated to 200 characters), labels (the distinct
    canonical labels), n_members, members (array of (group, id, label), sorted by group, then
    by id in its dataset's own order -- numerically for integer ids -- then by label).
    """
    import pyspark.sql.functions as F

    require_columns(records, "match.label_conflicts",
                    {"key": None, "group": None, "id": None, "id_num": None, "row": None,
                     "text": None, "label": None, "label_canon": None}, "records")

    labelled = records.where(F.col("key").isNotNull() & F.col("label_canon").isNotNull())
    conflicting = (
        labelled.groupBy("key").agg(F.count_distinct("label_canon").alias("_k"))
        .where(F.col("_k") > 1).select("key")
    )
    # When datasets mix id types the shared `id` column is a string, where "10" sorts before
    # "9": members sort by `id_num` first (a group is one dataset, so its ids are all integers
    # or all not), as overlaps' match_ids do (smallest_ids), and it is dropped afterwards.
    member = F.struct("group", "id_num", "id", "label")
    # Members can tie (an id repeated in a group) while their texts differ (same normalised
    # text, other whitespace): of tied members the one read first gives the text (`row` is
    # unique within a group's dataset), so the sample does not depend on partitioning.
    first = F.struct("group", "id_num", "id", "label", "row")
    return (
        labelled.join(conflicting, "key")
        .groupBy("key")
        .agg(
            F.min_by("text", first).alias("text"),
            F.array_sort(F.collect_set("label_canon")).alias("labels"),
            F.transform(F.array_sort(F.collect_list(member)),
                        lambda m: F.struct(m["group"].alias("group"), m["id"].alias("id"),
                                           m["label"].alias("label"))).alias("members"),
        )
        .select(F.lower(F.hex("key")).alias("key"),
                F.substring("text", 1, SAMPLE_TEXT_CHARS).alias("text"),
                "labels", F.size("members").alias("n_members"), "members")
    )
