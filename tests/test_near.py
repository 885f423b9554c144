"""Verified near-duplicates: exact similarities, nothing below the threshold, recall, skew."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pyarrow as pa
import pyspark.sql.functions as F
import pytest
from chispa import assert_df_equality
from conftest import spark_conf, write_jsonl

from leakcheck_spark import Options, Source, audit, near
from leakcheck_spark import minhash as mh
from leakcheck_spark.near import near_edges
from leakcheck_spark.normalize import tokens, with_keys

WORDS = [f"w{i}" for i in range(400)] + list("(){};=+-*<>")


def variant(rnd: random.Random, toks: list[str], edits: int) -> list[str]:
    out = list(toks)
    for _ in range(edits):
        out[rnd.randrange(len(out))] = rnd.choice(WORDS)
    return out


def jaccard(a: str, b: str, k: int = 5) -> float:
    sa, sb = (set(mh.shingles(tokens(t), k)) for t in (a, b))
    return len(sa & sb) / len(sa | sb)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Group a/train: 40 base texts; b/test: edited copies at many Jaccard levels + unrelated."""
    rnd = random.Random(11)
    d = tmp_path_factory.mktemp("near")
    bases = [[rnd.choice(WORDS) for _ in range(rnd.randint(60, 120))] for _ in range(40)]
    copies = [variant(rnd, b, rnd.choice([0, 1, 1, 2, 3, 5, 8, 15])) for b in bases]
    copies += [[rnd.choice(WORDS) for _ in range(80)] for _ in range(10)]
    a = [" ".join(t) for t in bases]
    b = [" ".join(t) for t in copies]
    write_jsonl(d / "a.jsonl", [{"t": t} for t in a])
    write_jsonl(d / "b.jsonl", [{"t": t} for t in b])
    truth = {(i, j): jaccard(x, y) for (i, x), (j, y) in
             itertools.product(enumerate(a), enumerate(b))}
    srcs = [Source("a", str(d / "a.jsonl"), split="train", text_field="t"),
            Source("b", str(d / "b.jsonl"), split="test", text_field="t")]
    return srcs, truth


def test_near_overlaps_are_exact_and_complete_above_09(spark, planted):
    srcs, truth = planted
    res = audit(srcs, Options(near=True), spark=spark)
    got = {(r.id, r.match_ids[0]): (r.match, r.similarity)
           for r in res.overlaps.where("`from` = 'a/train'").collect()}
    # Precision: every reported pair is at or above 0.8 with its exact Jaccard.
    for (i, j), (kind, sim) in got.items():
        assert sim == pytest.approx(truth[i, j], abs=1e-12) and sim >= 0.8
        assert kind == ("exact" if truth[i, j] == 1.0 else "near")
    # Recall: every pair at J >= 0.9 is found (P(miss) < 1e-4 per pair with 16 x 8 bands).
    strong = {p for p, j in truth.items() if j >= 0.9}
    assert strong and strong <= set(got)
    assert any(0.8 <= j < 0.9 for j in truth.values())   # the data has pairs near the threshold
    assert any(0.5 < j < 0.8 for j in truth.values())    # ... and just below it
    count = res.split_matrix["a/train"]["b/test"]["count"]
    assert count == len({i for i, _ in got})


def test_near_report_is_the_same_on_any_partitioning(spark, planted):
    srcs, _ = planted

    def run():
        res = audit(srcs, Options(near=True, threshold=0.7), spark=spark)
        rep = res.to_dict()
        rep.pop("timings")
        return rep, sorted(tuple(r) for r in res.overlaps.collect())

    with spark_conf(spark, **{"spark.sql.shuffle.partitions": 1}):
        one = run()
    with spark_conf(spark, **{"spark.sql.shuffle.partitions": 8,
                              "spark.sql.files.maxPartitionBytes": 2000,
                              "spark.sql.files.openCostInBytes": 0}):
        eight = run()
    assert one == eight and one[1]


def boilerplate(spark, tmp_path):
    """Records of 300 near-identical boilerplate texts (one token differs): they share almost
    every band bucket, every pair at Jaccard 96 / 98."""
    base = " ".join(f"t{i}" for i in range(100))
    write_jsonl(tmp_path / "a.jsonl", [{"t": base + f" v{i}"} for i in range(300)])
    return spark.read.json(str(tmp_path / "a.jsonl")).selectExpr(
        "'a' as dataset", "0L as row", "t as text").transform(with_keys)


def test_a_large_bucket_is_bounded_but_still_matched(spark, tmp_path):
    edges = near_edges(boilerplate(spark, tmp_path), Options(near=True),
                       full_bucket=10)[0].collect()
    keys = {e.key for e in edges}
    assert len(keys) == 300                                       # everyone has a match
    assert all(e.similarity == pytest.approx(96 / 98) for e in edges)     # 96 shared of 98
    pairs = len(edges) // 2
    assert pairs <= 16 * 300 * 10           # at most bands x keys x window ...
    assert pairs < (300 * 299 // 2) // 5    # ... far from all 44,850 pairs


def test_a_bucket_larger_than_a_part_is_verified_in_parts(spark, tmp_path):
    # With parts of 40 keys no task verifies more than a part of a bucket of the cluster, and
    # every key still finds near copies.
    edges = near_edges(boilerplate(spark, tmp_path), Options(near=True), full_bucket=10,
                       part=40)[0].collect()
    assert len({e.key for e in edges}) == 300
    assert all(e.similarity == pytest.approx(96 / 98) for e in edges)
    one_way = [(e.key, e.other) for e in edges if e.key < e.other]
    assert len(one_way) == len(set(one_way)) == len(edges) // 2          # each pair once
    # The parts: a bucket of 300 keys in ceil(300 / 40) = 8 of about 40, smaller ones whole.
    members = spark.createDataFrame(
        [(b, h, n, f"k{i}".encode()) for b, h, n in ((0, 7, 300), (1, 7, 40), (0, 9, 2))
         for i in range(n)], "band int, h long, n long, key binary")
    sizes = {(r.band, r.h): r["count"] for r in
             near.bucket_parts(members, 40).groupBy("band", "h").count().collect()}
    assert sizes.pop((1, 7)) == 40 and sizes.pop((0, 9)) == 2
    assert len(sizes) == 8 and sum(sizes.values()) == 300 and max(sizes.values()) <= 80
    with pytest.raises(ValueError, match="at least full_bucket"):
        near.verify(members, 0.8, full_bucket=50, part=40)


def test_every_pair_sharing_a_full_bucket_is_verified_once(spark, tmp_path):
    # Three clusters of near-identical texts, of 40, 12 and 5 keys, plus strays.  With buckets of
    # up to 10 keys enumerated in full, the big cluster's buckets are windowed, the others not.
    rnd = random.Random(3)
    texts = []
    for size, edits in ((40, 2), (12, 3), (5, 6)):
        base = [rnd.choice(WORDS) for _ in range(90)]
        texts += [" ".join(variant(rnd, base, edits)) for _ in range(size)]
    texts += [" ".join(rnd.choice(WORDS) for _ in range(60)) for _ in range(20)]
    texts = sorted(set(texts))
    write_jsonl(tmp_path / "a.jsonl", [{"t": t} for t in texts])
    df = spark.read.json(str(tmp_path / "a.jsonl")).selectExpr(
        "'a' as dataset", "0L as row", "t as text").transform(with_keys)
    index = {r.key: texts.index(r.text) for r in df.select("key", "text").collect()}
    opts, full = Options(near=True, threshold=0.7), 10
    got = [(index[e.key], index[e.other], e.similarity)
           for e in near_edges(df, opts, full_bucket=full)[0].collect()]
    one_way = [(i, j) for i, j, _ in got if i < j]
    assert len(one_way) == len(set(one_way)) == len(got) // 2        # each pair once
    for i, j, sim in got:                                            # exact, never below
        assert sim == pytest.approx(jaccard(texts[i], texts[j]), abs=1e-12) and sim >= 0.7
    # Reference buckets from the same band hashes, in plain Python.
    hashes, _ = near.sign_batch(pa.array(texts), opts)
    buckets: dict = {}
    for i, row in enumerate(hashes):
        for b, h in enumerate(row):
            buckets.setdefault((b, h), []).append(i)
    sizes = sorted(len(m) for m in buckets.values() if len(m) > 1)
    assert sizes[0] <= full < sizes[-1]                  # both kinds of bucket are exercised
    must = {(i, j) for m in buckets.values() if len(m) <= full
            for i, j in itertools.combinations(m, 2) if jaccard(texts[i], texts[j]) >= 0.7}
    assert must and must <= set(one_way)


def test_each_key_is_represented_by_its_first_records_text(spark, tmp_path):
    # "a b" and "ab" share a key under the whitespace normaliser but not their tokens, so which
    # record's text is signed matters: the first in (dataset, row) order, on any partitioning,
    # with the sides of all of a key's records.
    rows = [("b", 0, "ab", 1), ("a", 1, "a  b", 2), ("a", 0, "a b", 2), ("a", 2, "c d", 1),
            ("b", 1, "", 1)]
    write_jsonl(tmp_path / "r.jsonl", [dict(zip(("dataset", "row", "text", "s"), r))
                                       for r in rows])
    df = with_keys(spark.read.json(str(tmp_path / "r.jsonl")))
    expected = with_keys(spark.createDataFrame([("a b", 3), ("c d", 1)], "text string, side int"))
    for parts in (1, 7):
        with spark_conf(spark, **{"spark.sql.shuffle.partitions": parts}):
            shuffled = df.repartition(parts)
            assert_df_equality(
                near.representatives(shuffled, F.col("s").cast("int")).select("key", "text", "side"),
                expected.select("key", "text", "side"), ignore_row_order=True, ignore_nullable=True)
            assert_df_equality(near.representatives(shuffled).select("key", "text"),
                               expected.select("key", "text"), ignore_row_order=True,
                               ignore_nullable=True)


def test_each_record_is_near_matched_by_its_own_tokens(spark, cli, tmp_path):
    # "ab c ..." and "a bc ..." share a key under the whitespace normaliser but not a token: a
    # record's near matches and similarities come from its own shingles, whichever record of its
    # key is read first (SPEC 4-5), in audit, clean, check and resplit.
    from leakcheck_spark import check, clean, resplit

    tail = " d e f g h i j k l m n o p q r s t"
    texts = {"a": "ab c" + tail, "b": "a bc" + tail, "c": "a bc" + tail + " u"}
    for name, text in texts.items():
        write_jsonl(tmp_path / f"{name}.jsonl", [{"t": text}])
    assert jaccard(texts["b"], texts["c"]) == 15 / 16 and jaccard(texts["a"], texts["c"]) < 0.8

    def src(name: str, split: str) -> Source:
        return Source(name, str(tmp_path / f"{name}.jsonl"), split=split, text_field="t")

    opts = Options(near=True)
    res = audit([src("a", "train"), src("b", "test"), src("c", "test")], opts, spark=spark)
    assert sorted((r["from"], r["to"], r.match, r.similarity) for r in res.overlaps.collect()) == [
        ("a/train", "b/test", "exact", 1.0), ("b/test", "a/train", "exact", 1.0),
        ("b/test", "c/test", "near", 15 / 16), ("c/test", "b/test", "near", 15 / 16)]
    res.unpersist()
    # Adding a record with a's text to the against side does not hide c's near copy in b.
    cleaned = clean(src("c", "test"), [src("a", "train"), src("b", "train")], opts, spark=spark)
    assert cleaned.counts["against"] == 1
    assert [(r.reason, r.similarity) for r in cleaned.rows.collect()] == [("against", 15 / 16)]
    checked = check([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")],
                    str(tmp_path / "c.jsonl"), n=3, options=opts, spark=spark)
    assert [r.near for r in checked.records.collect()] == [15 / 16]
    checked.unpersist()
    moved = resplit([src("a", "train"), src("c", "test"), src("b", "val")], opts,
                    ["train", "val", "test"], spark=spark)
    assert sorted((r.dataset, r.split) for r in moved.assignment.collect()) == [
        ("a", "train"), ("b", "train"), ("c", "train")]
    moved.unpersist()


def test_reformatted_copies_are_signed_once(spark):
    # 60 copies of one function in 60 spacings (one normalised text): one unit, so no pair is
    # verified and the key's exact edges are one self-edge, not 60 x 60 (SPEC 5: a large
    # duplicate group stays cheap).
    import pandas as pd

    from leakcheck_spark.near import unit_match_edges
    from leakcheck_spark.normalize import key_series, unit_series

    rnd = random.Random(3)
    toks = "int f ( int a , int b ) { return a + b * 2 ; }".split()
    texts = ["".join(t + rnd.choice(["", " "] if t in "(){},;+*" or toks[i + 1] in "(){},;+*"
                                    else [" "]) for i, t in enumerate(toks[:-1])) + toks[-1]
             for _ in range(60)]
    assert len(set(texts)) > 30
    pdf = pd.DataFrame({"text": texts, "dataset": "d", "row": range(60)})
    pdf["key"] = key_series(pdf["text"], "whitespace", "c", None)
    pdf["unit"] = unit_series(pdf["text"], "whitespace", "c", None)
    records = spark.createDataFrame(
        pdf, "text string, dataset string, row long, key binary, unit binary")
    edges, cached = unit_match_edges(records, Options(near=True))
    assert edges.count() == 1
    assert cached[0].count() == 0
    for df in cached:
        df.unpersist()


def test_buckets_are_never_split_across_batches():
    rnd = np.random.default_rng(0)
    sizes = rnd.integers(1, 40, size=60)
    band = np.repeat(np.arange(60) % 3, sizes)
    h = np.repeat(np.arange(60) // 3, sizes)
    rows = pa.RecordBatch.from_arrays([pa.array(band), pa.array(h),
                                       pa.array(np.arange(len(band)))], names=["band", "h", "x"])
    cuts = np.sort(rnd.choice(np.arange(1, len(band)), size=25, replace=False))
    parts = [rows.slice(lo, hi - lo) for lo, hi in zip([0, *cuts], [*cuts, len(band)])]
    out = list(near._whole_buckets(iter(parts)))
    assert [x for rb in out for x in rb.column("x").to_pylist()] == list(range(len(band)))
    def bucket(rb, row):
        return rb.column("band")[row].as_py(), rb.column("h")[row].as_py()

    assert len(out) > 1 and all(bucket(x, x.num_rows - 1) != bucket(y, 0)
                                for x, y in zip(out, out[1:]))


@pytest.mark.parametrize("num_perm", [128, 4096])
def test_band_hashes_do_not_depend_on_how_many_texts_are_signed_at_once(monkeypatch, num_perm):
    rng = random.Random(num_perm)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 60))) for _ in range(50)]
    opts = Options(near=True, num_perm=num_perm)
    whole, _ = near.sign_batch(pa.array(texts), opts)
    monkeypatch.setattr(near, "_SIGNATURE_VALUES", num_perm * 3)  # 3 texts at a time
    parts, _ = near.sign_batch(pa.array(texts), opts)
    bands, rows = near.lsh_layout(0.8, num_perm)
    sig = mh.signatures(mh.shingle_batch(pa.array(texts), 5), num_perm)
    assert np.array_equal(parts, whole) and np.array_equal(whole, near.band_hashes(sig, bands, rows))


def test_intersection_sizes_match_python_sets():
    rnd = np.random.default_rng(1)
    sets = [np.unique(rnd.integers(0, 60, size=rnd.integers(0, 30))) for _ in range(50)]
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in sets])])
    i, j = rnd.integers(0, 50, size=400), rnd.integers(0, 50, size=400)
    got = near.intersection_sizes(np.concatenate(sets), offsets, i, j)
    assert got.tolist() == [len(set(sets[a]) & set(sets[b])) for a, b in zip(i, j)]


def test_bucket_bitsets_count_the_same_intersections_as_the_merge():
    # Three buckets of one block: 40 near-identical sets over a small vocabulary (bitsets), 5 sets
    # (too few keys: merged), 300 sets over a wide vocabulary (bitsets would cost more: merged).
    rnd = np.random.default_rng(2)
    sizes = np.array([40, 5, 300])
    sets = [np.unique(rnd.integers(0, v, size=rnd.integers(1, 60)))
            for n, v in zip(sizes, [40, 50, 10**6]) for _ in range(n)]
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in sets])])
    ranks = np.unique(np.concatenate(sets), return_inverse=True)[1].reshape(-1)
    found = near.Intersections(ranks, offsets, sizes)
    assert sorted(found.bits) == [0]
    bucket = np.repeat(np.arange(3), sizes)
    i, j = np.nonzero(np.triu(bucket[:, None] == bucket[None, :], 1))
    expected = [len(set(sets[a]) & set(sets[b])) for a, b in zip(i, j)]
    assert found(i, j).tolist() == expected
    assert near.intersection_sizes(ranks, offsets, i, j).tolist() == expected
    # Pairs in any order and mix of buckets, as verification's steps cut them.
    order = rnd.permutation(len(i))
    assert found(i[order], j[order]).tolist() == [expected[k] for k in order]


def test_clean_near_drops_near_copies_with_their_similarity(cli, tmp_path):
    rnd = random.Random(5)
    base = [rnd.choice(WORDS) for _ in range(100)]
    far = [rnd.choice(WORDS) for _ in range(100)]
    write_jsonl(tmp_path / "train.jsonl", [{"t": " ".join(base)}])
    write_jsonl(tmp_path / "test.jsonl", [{"t": " ".join(variant(rnd, base, 1))},
                                          {"t": " ".join(far)}])
    out, report = tmp_path / "o.jsonl", tmp_path / "r.json"
    code, stdout, _ = cli("clean", "--test", f"t={tmp_path / 'test.jsonl'}", "--against",
                          f"tr={tmp_path / 'train.jsonl'}", "--text-field", "t", "--near",
                          "--out", out, "--report", report)
    assert code == 0 and "kept 1, dropped 1 (against 1)" in stdout
    (entry,) = json.loads(report.read_text())["dropped"]
    rows = [json.loads(x)["t"] for x in (tmp_path / "test.jsonl").read_text().splitlines()]
    assert entry["id"] == 0 and entry["match_ids"] == [0]
    assert entry["similarity"] == pytest.approx(jaccard(rows[0], " ".join(base)))
    assert json.loads(out.read_text())["t"] == " ".join(far)


def test_clean_dedup_near_keeps_the_first_of_near_copies(cli, tmp_path):
    rnd = random.Random(9)
    base = [rnd.choice(WORDS) for _ in range(100)]
    rows = [" ".join(base), " ".join([rnd.choice(WORDS) for _ in range(100)]),
            " ".join(variant(rnd, base, 1))]
    write_jsonl(tmp_path / "t.jsonl", [{"t": t} for t in rows])
    out, report = tmp_path / "o.jsonl", tmp_path / "r.json"
    code, stdout, _ = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--text-field", "t",
                          "--near", "--dedup", "--out", out, "--report", report)
    assert code == 0 and "kept 2, dropped 1 (duplicate 1)" in stdout
    assert json.loads(report.read_text())["dropped"] == [
        {"id": 2, "reason": "duplicate", "match_ids": [0],
         "similarity": pytest.approx(jaccard(rows[2], rows[0]))}]
    assert [json.loads(x)["t"] for x in out.read_text().splitlines()] == rows[:2]
