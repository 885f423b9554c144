"""Connected components (large-star / small-star) against a plain union-find."""

from __future__ import annotations

import random

import pytest
from chispa import assert_df_equality
from conftest import spark_conf

from leakcheck_spark.components import connected_components


def union_find(edges: list[tuple[int, int]], nodes: set[int]) -> dict[int, int]:
    """node -> smallest node of its component."""
    parent = {n: n for n in nodes}
    for a, b in edges:
        parent.setdefault(a, a)
        parent.setdefault(b, b)

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {n: root(n) for n in parent}


def expected_df(spark, edges: list[tuple[int, int]], nodes: set[int] = frozenset()):
    comp = union_find(edges, set(nodes))
    return spark.createDataFrame(sorted(comp.items()), "node long, component long")


def components(spark, edges: list[tuple[int, int]], nodes=None, partitions: int = 3):
    df = spark.createDataFrame(edges, "src long, dst long").repartition(partitions)
    vertices = None if nodes is None else spark.createDataFrame([(n,) for n in nodes], "node long")
    return connected_components(df, vertices)


def assert_components(spark, edges, nodes=None, partitions: int = 3) -> None:
    got = components(spark, edges, nodes, partitions)
    assert_df_equality(got, expected_df(spark, edges, nodes or set()), ignore_row_order=True)


def test_a_long_path_is_one_component(spark):
    # The worst case of label propagation (n rounds): the smallest id at one end.
    n = 10_000
    edges = [(i, i + 1) for i in range(n - 1)]
    random.Random(1).shuffle(edges)
    got = components(spark, edges)
    assert got.count() == n
    assert got.where("component != 0").count() == 0


def test_a_path_with_shuffled_labels(spark):
    labels = list(range(2_000))
    random.Random(2).shuffle(labels)
    assert_components(spark, [(labels[i], labels[i + 1]) for i in range(len(labels) - 1)])


def test_stars_with_centres_large_and_small(spark):
    edges = [(1000, leaf) for leaf in range(1, 200)]  # centre above every leaf
    edges += [(5000, leaf) for leaf in range(5001, 5200)]  # centre below every leaf
    edges += [(7000 + i, 7000 + j) for i in range(12) for j in range(i)]  # a clique
    assert_components(spark, edges)


def test_isolated_vertices_self_loops_and_repeats(spark):
    edges = [(1, 2), (2, 1), (1, 2), (3, 3), (10, 11)]
    nodes = {1, 2, 3, 4, 5, 10, 11, 99}
    got = components(spark, edges, nodes)
    want = {1: 1, 2: 1, 3: 3, 4: 4, 5: 5, 10: 10, 11: 10, 99: 99}
    assert {r.node: r.component for r in got.collect()} == want


def test_no_edges(spark):
    assert components(spark, []).count() == 0
    got = components(spark, [], {7, 3})
    assert {r.node: r.component for r in got.collect()} == {7: 7, 3: 3}


def test_many_small_components_and_large_ids(spark):
    rnd = random.Random(3)
    base = 2**62
    edges = []
    for _ in range(500):
        members = [base - rnd.randrange(2**40) for _ in range(rnd.randint(2, 6))]
        edges += [(members[i], members[i + 1]) for i in range(len(members) - 1)]
    assert_components(spark, edges)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_random_graphs_match_union_find(spark, seed):
    rnd = random.Random(seed)
    n = rnd.choice([300, 1_000, 3_000])
    m = int(n * rnd.choice([0.3, 0.7, 1.2]))
    edges = [(rnd.randrange(n), rnd.randrange(n)) for _ in range(m)]
    nodes = set(range(0, n, 7))
    assert_components(spark, edges, nodes, partitions=rnd.choice([1, 4, 7]))


def test_the_same_result_on_any_partitioning(spark):
    rnd = random.Random(8)
    edges = [(rnd.randrange(1500), rnd.randrange(1500)) for _ in range(1200)]
    results = []
    for partitions, shuffle in ((1, 1), (8, 8), (3, 5)):
        with spark_conf(spark, **{"spark.sql.shuffle.partitions": shuffle}):
            results.append(sorted(components(spark, edges, partitions=partitions).collect()))
    assert results[0] == results[1] == results[2]
