"""The audit end to end on planted leaks: report, overlaps, conflicts, determinism."""

from __future__ import annotations

import csv
import itertools
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from conftest import spark_conf, write_jsonl

from leakcheck_spark import Options, Source, audit


@pytest.fixture
def planted(tmp_path):
    """a/train, a/test (row-index ids) and b/test (string ids, parquet), with known leaks."""
    write_jsonl(tmp_path / "a_train.jsonl", [
        {"func": "int f(){return 1;}", "target": 1},          # 0  f
        {"func": "int g(){return 2;}", "target": 0},          # 1  g
        {"func": "int  f() {\n return 1; }", "target": 0},   # 2  f again, other label
        {"func": "   ", "target": 1},                         # 3  empty after normalising
        {"func": None, "target": 0},                          # 4  null: empty
    ])
    write_jsonl(tmp_path / "a_test.jsonl", [
        {"func": "int g() {return 2;}", "target": 0},         # 5  g
        {"func": "int h(){return 3;}", "target": 1},          # 6  h
    ])
    pq.write_table(pa.table({
        "uid": ["x1", "x2", "x3"],
        "code": ["int h(){ return 3; }", "int k(){return 4;}", "int g(){return 2;}"],
        "lab": ["true", "no", " 0 "],   # canonically 1, "no", 0: agree with a's labels
    }), tmp_path / "b_test.parquet")
    return [
        Source("a", str(tmp_path / "a_train.jsonl"), split="train", text_field="func",
               label_field="target"),
        Source("a", str(tmp_path / "a_test.jsonl"), split="test", text_field="func",
               label_field="target"),
        Source("b", str(tmp_path / "b_test.parquet"), split="test", text_field="code",
               id_field="uid", label_field="lab"),
    ]


def c(count, total):
    return {"count": count, "fraction": count / total}


def test_planted_report(spark, planted):
    res = audit(planted, Options(), spark=spark)
    report = res.to_dict()
    assert report["schema"] == "leakcheck-spark/report/v1"
    assert report["groups"] == {"a/test": {"records": 2, "empty": 0},
                                "a/train": {"records": 5, "empty": 2},
                                "b/test": {"records": 3, "empty": 0}}
    assert report["split_matrix"] == {
        "a/test": {"a/test": c(0, 2), "a/train": c(1, 2), "b/test": c(2, 2)},
        "a/train": {"a/test": c(1, 5), "a/train": c(2, 5), "b/test": c(1, 5)},
        "b/test": {"a/test": c(2, 3), "a/train": c(1, 3), "b/test": c(0, 3)},
    }
    assert report["dataset_matrix"] == {
        "a": {"a": c(2, 7), "b": c(3, 7)},
        "b": {"a": c(2, 3), "b": c(0, 3)},
    }
    schema = ("from string, id string, to string, match_ids array<string>, match string, "
              "similarity double")
    expected = spark.createDataFrame([
        ("a/train", "1", "a/test", ["5"], "exact", 1.0),
        ("a/train", "1", "b/test", ["x3"], "exact", 1.0),
        ("a/test", "5", "a/train", ["1"], "exact", 1.0),
        ("a/test", "5", "b/test", ["x3"], "exact", 1.0),
        ("a/test", "6", "b/test", ["x1"], "exact", 1.0),
        ("b/test", "x1", "a/test", ["6"], "exact", 1.0),
        ("b/test", "x3", "a/train", ["1"], "exact", 1.0),
        ("b/test", "x3", "a/test", ["5"], "exact", 1.0),
    ], schema)
    assert_df_equality(res.overlaps, expected, ignore_row_order=True, ignore_nullable=True)
    assert report["overlaps"]["count"] == 8
    # In JSON, ids keep their dataset's own type: a's row indexes are integers, b's are strings
    # (the shared DataFrame column above is a string because the datasets mix id types).
    assert report["overlaps"]["sample"][:2] == [
        {"from": "a/test", "id": 5, "to": "a/train", "match_ids": [1], "match": "exact",
         "similarity": 1.0},
        {"from": "a/test", "id": 5, "to": "b/test", "match_ids": ["x3"], "match": "exact",
         "similarity": 1.0}]
    assert report["label_conflicts"]["sample"][0]["members"] == [
        {"group": "a/train", "id": 0, "label": "1"}, {"group": "a/train", "id": 2, "label": "0"}]
    # Only f conflicts (1 vs 0 in a/train); g is 0 / 0 / " 0 ", h is 1 / "true".
    conflicts = [r.asDict(recursive=True) for r in res.label_conflicts.collect()]
    assert [(x["text"], x["labels"], x["members"]) for x in conflicts] == [
        ("int f(){return 1;}", ["0", "1"], [
            {"group": "a/train", "id": "0", "label": "1"},
            {"group": "a/train", "id": "2", "label": "0"}])]
    assert len(conflicts[0]["key"]) == 32


def test_match_ids_are_the_five_smallest_and_ids_stay_integers(spark, tmp_path):
    write_jsonl(tmp_path / "tr.jsonl", [{"t": "same", "i": i} for i in (9, 3, 12, 7, 1, 5, 30)])
    write_jsonl(tmp_path / "te.jsonl", [{"t": "s a m e", "i": 100}])
    srcs = [Source("d", str(tmp_path / "tr.jsonl"), split="train", text_field="t", id_field="i"),
            Source("d", str(tmp_path / "te.jsonl"), split="test", text_field="t", id_field="i")]
    res = audit(srcs, Options(), spark=spark)
    row = res.overlaps.where("id = 100").collect()
    assert [(r.to, r.match_ids) for r in row] == [("d/train", [1, 3, 5, 7, 9])]
    assert res.split_matrix["d/train"]["d/train"] == c(7, 7)
    assert res.dataset_matrix["d"]["d"] == c(8, 8)


def test_a_missing_label_takes_part_in_no_conflict(spark, tmp_path):
    # README: absent, null, NaN (pandas' missing value) and an empty CSV field are no label;
    # an empty JSON string is one.  Each text is labelled 1 in train.
    texts = ["absent", "null", "nan", "csv empty", "csv quoted empty", "json empty"]
    write_jsonl(tmp_path / "tr.jsonl", [{"t": t, "y": 1} for t in texts])
    (tmp_path / "te.jsonl").write_text(
        '{"t": "absent"}\n{"t": "null", "y": null}\n{"t": "nan", "y": NaN}\n'
        '{"t": "json empty", "y": ""}\n', encoding="utf-8")
    (tmp_path / "te.csv").write_text('t,y\ncsv empty,\ncsv quoted empty,""\nother,0\n',
                                     encoding="utf-8")
    srcs = [Source("a", str(tmp_path / "tr.jsonl"), split="train", text_field="t",
                   label_field="y"),
            Source("b", str(tmp_path / "te.jsonl"), split="test", text_field="t",
                   label_field="y"),
            Source("c", str(tmp_path / "te.csv"), split="test", text_field="t", label_field="y")]
    res = audit(srcs, Options(), spark=spark)
    assert [(r.text, r.labels) for r in res.label_conflicts.collect()] == [("json empty", ["", "1"])]
    assert res.split_matrix["b/test"]["a/train"] == c(4, 4)
    assert res.split_matrix["c/test"]["a/train"] == c(2, 3)


@pytest.mark.parametrize("normalizer,lang,expected", [
    ("exact", "c", 0), ("whitespace", "c", 0), ("code", "c", 2), ("code", "auto", 2)])
def test_normalizers_decide_what_matches(spark, tmp_path, normalizer, lang, expected):
    write_jsonl(tmp_path / "a.jsonl", [{"t": "int x = 1; // one"},
                                        {"t": "def f():\n    return 'a#b'  # note"}])
    write_jsonl(tmp_path / "b.jsonl", [{"t": "int x=1;"}, {"t": "def f(): return 'a#b'"}])
    srcs = [Source("a", str(tmp_path / "a.jsonl"), text_field="t"),
            Source("b", str(tmp_path / "b.jsonl"), text_field="t")]
    res = audit(srcs, Options(normalizer=normalizer, lang=lang), spark=spark)
    # auto picks python for the second text (a '#' comment), c for the first.
    got = res.split_matrix["a/all"]["b/all"]["count"]
    if (normalizer, lang) == ("code", "c"):
        expected = 1   # '#' is not a C comment
    assert got == expected


def test_max_chars_truncates_before_normalising(spark, tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"t": "abc def XYZ"}])
    write_jsonl(tmp_path / "b.jsonl", [{"t": "abcdef QRS"}])
    srcs = [Source("a", str(tmp_path / "a.jsonl"), text_field="t"),
            Source("b", str(tmp_path / "b.jsonl"), text_field="t")]
    assert audit(srcs, Options(max_chars=7), spark=spark).overlap_count == 2
    assert audit(srcs, Options(), spark=spark).overlap_count == 0


def test_same_report_on_any_partitioning(spark, tmp_path):
    rnd = random.Random(7)
    pool = [f"int f{i}(int x) {{ return x * {i}; }}" for i in range(40)]
    for name in ("p1", "p2", "p3"):
        write_jsonl(tmp_path / "tr" / f"{name}.jsonl",
                    [{"f": rnd.choice(pool), "y": rnd.randint(0, 1)} for _ in range(60)])
    write_jsonl(tmp_path / "te.jsonl", [{"f": rnd.choice(pool) + " ", "y": rnd.randint(0, 1)}
                                        for _ in range(50)])
    srcs = [Source("d", str(tmp_path / "tr" / "*.jsonl"), split="train", text_field="f",
                   label_field="y"),
            Source("d", str(tmp_path / "te.jsonl"), split="test", text_field="f",
                   label_field="y")]

    def run():
        res = audit(srcs, Options(), spark=spark)
        rep = res.to_dict()
        rep.pop("timings")
        overlaps = sorted(tuple(r) for r in res.overlaps.collect())
        conflicts = sorted(str(r) for r in res.label_conflicts.collect())
        return rep, overlaps, conflicts

    with spark_conf(spark, **{"spark.sql.shuffle.partitions": 1}):
        one = run()
    with spark_conf(spark, **{"spark.sql.shuffle.partitions": 8,
                              "spark.sql.files.maxPartitionBytes": 500,
                              "spark.sql.files.openCostInBytes": 0,
                              "spark.sql.adaptive.enabled": "false"}):
        eight = run()
    assert one == eight
    assert one[0]["overlaps"]["count"] > 0 and one[2]


def test_samples_with_repeated_ids_are_the_same_on_any_partitioning(spark, tmp_path):
    # Every record of a/x has the id "dup": its overlaps tie on (from, to, id) and its conflict
    # members on (group, id, label), while their texts (same key, other whitespace) and their
    # match_ids differ.  report.json's samples must not depend on which tied row comes first.
    rnd = random.Random(1)
    texts = [f"shared text {k}" for k in range(30)]
    a_rows = [{"id": "dup", "y": rnd.choice("pq"),
               "t": texts[i % 30] if i < 30 else " " + texts[i % 30].replace(" ", "   ")}
              for i in range(60)]
    write_jsonl(tmp_path / "a.jsonl", a_rows)
    # A conflict's text is its first member's, (group, id, label), ties in read order.
    first_text = {}
    for r in sorted(a_rows, key=lambda r: r["y"]):  # stable: ties stay in read order
        first_text.setdefault("".join(r["t"].split()), r["t"])
    write_jsonl(tmp_path / "b.jsonl", [{"id": f"m{i}", "t": rnd.choice(texts), "y": "p"}
                                       for i in range(90)])
    srcs = [Source("a", str(tmp_path / "a.jsonl"), split="x", text_field="t", id_field="id",
                   label_field="y"),
            Source("b", str(tmp_path / "b.jsonl"), split="y", text_field="t", id_field="id",
                   label_field="y")]
    reports = []
    for conf in ({"spark.sql.shuffle.partitions": 1}, {"spark.sql.shuffle.partitions": 37},
                 {"spark.sql.shuffle.partitions": 5, "spark.sql.adaptive.enabled": "false",
                  "spark.sql.files.maxPartitionBytes": 700, "spark.sql.files.openCostInBytes": 0}):
        with spark_conf(spark, **conf):
            res = audit(srcs, Options(), spark=spark)
            rep = res.to_dict()
            rows = [r.asDict() for r in res.overlaps.collect()]
            res.unpersist()
        rep.pop("timings")
        reports.append(rep)
        # The sample is the first rows of the whole list in its full order (ties broken by
        # the remaining columns).
        rows.sort(key=lambda r: (r["from"], r["to"], r["id"], r["match"], r["similarity"],
                                 r["match_ids"]))
        assert rep["overlaps"]["sample"] == rows[:20]
        assert [c["text"] for c in rep["label_conflicts"]["sample"]] == [
            first_text["".join(c["text"].split())] for c in rep["label_conflicts"]["sample"]]
    assert reports[0] == reports[1] == reports[2]


def test_match_ids_are_the_five_smallest_distinct_ids(spark, tmp_path):
    # b repeats ids: the 5 smallest ids are 5 distinct ones, not 4 and a repeat.
    write_jsonl(tmp_path / "a.jsonl", [{"id": 9, "t": "int x;"}])
    write_jsonl(tmp_path / "b.jsonl", [{"id": i, "t": "int  x;"} for i in (7, 1, 1, 3, 2, 2, 5, 4)])
    res = audit([Source("a", str(tmp_path / "a.jsonl"), split="test", text_field="t", id_field="id"),
                 Source("b", str(tmp_path / "b.jsonl"), split="train", text_field="t",
                        id_field="id")], Options(), spark=spark)
    rows = {(r["from"], r["id"]): r["match_ids"] for r in res.overlaps.collect()}
    res.unpersist()
    assert rows[("a/test", 9)] == [1, 2, 3, 4, 5]
    assert rows[("b/train", 1)] == [9]


def test_a_cell_reached_by_a_cluster_lists_its_five_smallest_ids_without_collecting_all(spark):
    # A record near 40 texts of another group (a cluster of near copies): its row lists the 5
    # smallest of their ids, exact ones first.  Before, each such cell collected every reached
    # id into one array and sorted it: a 3,000-copy cluster spent ~50 s there; now Spark keeps
    # 5 ids a cell before the shuffle (a window group limit).
    import pyspark.sql.functions as F

    from leakcheck_spark import match

    keys = [bytes([k]) * 16 for k in range(42)]
    df = spark.createDataFrame(
        [(keys[0], "a/test", "a", "r0", 0)]
        + [(keys[k], "b/train", "b", f"b{k}", 100 - k) for k in range(1, 41)]
        + [(keys[41], "b/train", "b", "far", 999), (keys[0], "b/train", "b", "same", 500)],
        "key binary, group string, dataset string, id string, id_num long")
    near = spark.createDataFrame([(keys[0], keys[k], "near", (800 + k) / 1000) for k in range(1, 42)],
                                 "key binary, other binary, match string, similarity double")
    kg = match.key_groups(df)
    reached = match.reach(kg, match.exact_edges(match.copied_keys(kg)).unionByName(near))
    rows = match.overlaps(df, reached.where(F.col("other") != keys[0]))
    assert [tuple(r) for r in rows.where(F.col("id") == "r0").collect()] == [
        ("a/test", "r0", "b/train", ["b40", "b39", "b38", "b37", "b36"], "near", 0.841)]
    both = match.overlaps(df, reached)  # with the exact copy: that one alone
    assert [tuple(r) for r in both.where(F.col("id") == "r0").collect()] == [
        ("a/test", "r0", "b/train", ["same"], "exact", 1.0)]
    # A window group limit for each record's own ids, and one for the ids a cell reaches; no
    # list of every reached id.
    plan = both._jdf.queryExecution().executedPlan().toString()
    assert plan.count("WindowGroupLimit") == 4 and "collect_list" not in plan, plan


def test_ids_sort_as_their_datasets_type_when_datasets_mix_id_types(spark, tmp_path):
    # a's ids are row indexes, b's strings, so the shared id column is a string.  Members and
    # match_ids list a's ids as numbers (9 before 10), as they do when every id is an integer;
    # before, label conflict members sorted "10" before "9".
    from leakcheck_spark.normalize import text_key

    write_jsonl(tmp_path / "a.jsonl", [{"t": f"t{i}", "l": 0} for i in range(9)]
                + [{"t": "dup", "l": 1}, {"t": "d u p", "l": 0}])
    write_jsonl(tmp_path / "b.jsonl", [{"t": "dup", "l": True, "u": "z"}])
    res = audit([Source("a", str(tmp_path / "a.jsonl"), split="train", text_field="t",
                        label_field="l"),
                 Source("b", str(tmp_path / "b.jsonl"), split="test", text_field="t",
                        label_field="l", id_field="u")], Options(), spark=spark)
    assert_df_equality(res.label_conflicts, spark.createDataFrame(
        [(text_key("dup").hex(), "dup", ["0", "1"], 3,
          [("a/train", "9", "1"), ("a/train", "10", "0"), ("b/test", "z", "true")])],
        "key string, text string, labels array<string>, n_members int, "
        "members array<struct<group string, id string, label string>>"), ignore_nullable=True)
    assert [m["id"] for m in res.conflict_sample[0]["members"]] == [9, 10, "z"]
    assert_df_equality(res.overlaps, spark.createDataFrame(
        [("a/train", "9", "b/test", ["z"], "exact", 1.0),
         ("a/train", "10", "b/test", ["z"], "exact", 1.0),
         ("b/test", "z", "a/train", ["9", "10"], "exact", 1.0)],
        "from string, id string, to string, match_ids array<string>, match string, "
        "similarity double"), ignore_row_order=True, ignore_nullable=True)
    res.unpersist()


def test_an_exact_rows_match_ids_are_its_exact_matches(spark, tmp_path):
    # x's record is copied in y (id 1) and near-copied there too (id 0, one token more): its
    # overlap row is exact, and lists the copy only; before, it listed [0, 1].
    base = " ".join(f"w{i}" for i in range(40))
    write_jsonl(tmp_path / "x.jsonl", [{"t": base}])
    write_jsonl(tmp_path / "y.jsonl", [{"t": base + " extra"}, {"t": base}])
    res = audit([Source("x", str(tmp_path / "x.jsonl"), split="test", text_field="t"),
                 Source("y", str(tmp_path / "y.jsonl"), split="train", text_field="t")],
                Options(near=True), spark=spark)
    assert_df_equality(res.overlaps, spark.createDataFrame(
        [("x/test", 0, "y/train", [1], "exact", 1.0),
         ("y/train", 1, "x/test", [0], "exact", 1.0),
         ("y/train", 0, "x/test", [0], "near", 36 / 37)],   # 36 shingles shared of 37
        "from string, id long, to string, match_ids array<bigint>, match string, "
        "similarity double"), ignore_row_order=True, ignore_nullable=True)
    res.unpersist()


def test_a_text_with_thousands_of_copies(spark, tmp_path):
    n = 3000
    write_jsonl(tmp_path / "a.jsonl", [{"t": "int boiler(void) { return 0; }", "y": i % 2}
                                       for i in range(n)])
    write_jsonl(tmp_path / "b.jsonl", [{"t": "int boiler(void){return 0;}", "y": 1}] * n)
    srcs = [Source("a", str(tmp_path / "a.jsonl"), split="train", text_field="t", label_field="y"),
            Source("b", str(tmp_path / "b.jsonl"), split="test", text_field="t", label_field="y")]
    res = audit(srcs, Options(), spark=spark)
    rep = res.to_dict()
    assert rep["split_matrix"]["b/test"] == {"a/train": c(n, n), "b/test": c(n, n)}
    assert rep["overlaps"]["count"] == 2 * n
    assert rep["overlaps"]["sample"][0]["match_ids"] == [0, 1, 2, 3, 4]
    (conflict,) = rep["label_conflicts"]["sample"]
    assert conflict["n_members"] == 2 * n and len(conflict["members"]) == 20
    assert conflict["labels"] == ["0", "1"]


@pytest.mark.parametrize("units", [False, True])
def test_matrices_and_overlaps_agree_with_brute_force_over_records(spark, units):
    # 60 random records over 40 keys in three groups of two datasets, and 25 random near edges
    # between keys (exact and near matches, a key's lone record in a group, records matching
    # both ways): every matrix cell and overlap row against a record-by-record definition of
    # SPEC section 5.  With `units`, near matching's model: a key holds up to three units (its
    # records tokenised differently), near edges join units, and records of a key still match
    # exactly whatever their units.
    from leakcheck_spark import match
    from leakcheck_spark.audit import matrices

    rnd = random.Random(5)
    groups = {"x/train": "x", "x/test": "x", "y/test": "y"}
    keys = [bytes([k]) * 16 for k in range(40)]
    unit_of = {k: [k[:15] + bytes([100 + u]) for u in range(rnd.choice([1, 1, 2, 3]))]
               if units else [k] for k in keys}
    records = [(k, rnd.choice(unit_of[k]), g, groups[g], f"r{i}", i % 7 * 100 + i)
               for i, (k, g) in enumerate(zip(rnd.choices(keys, k=60),
                                              rnd.choices(list(groups), k=60)))]
    nodes = sorted({r[1] for r in records})
    sims = {}
    for a, b in rnd.sample(list(itertools.combinations(nodes, 2)), 25):
        sims[a, b] = sims[b, a] = rnd.choice([0.8, 0.85, 0.9, 0.97])
    for u in unit_of.values():  # near edges between units of one key: the records match exactly
        if len(u) > 1:
            sims[u[0], u[1]] = sims[u[1], u[0]] = 0.9
    df = spark.createDataFrame(
        records, "key binary, unit binary, group string, dataset string, id string, id_num long")
    near = spark.createDataFrame([(a, b, "near", s) for (a, b), s in sims.items()],
                                 "key binary, other binary, match string, similarity double")
    if units:
        assert any(len(u) > 1 for u in unit_of.values())
        same_key = match.unit_edges(df)
        df = match.as_units(df)
    else:
        df = df.drop("unit")
    kg = match.key_groups(df)
    edges = (same_key if units else match.exact_edges(match.copied_keys(kg))).unionByName(near)
    reached = match.reach(kg, edges)

    def matches(r, s):  # (exact, similarity) of record r matching record s, else None
        if r is s:
            return None
        if r[0] == s[0]:
            return True, 1.0
        return (False, sims[r[1], s[1]]) if (r[1], s[1]) in sims else None

    expected, cells = [], {}
    for r in records:
        for g in groups:
            found = [(s, m) for s in records if s[2] == g and (m := matches(r, s))]
            if not found:
                continue
            cells.setdefault((r[2], g), set()).add(r[4])
            if g != r[2]:
                exact = any(m[0] for _, m in found)
                # An exact row lists its exact matches only (records of g with its key).
                kind = [(s, m) for s, m in found if m[0] == exact]
                ids = [s[4] for s, _ in sorted(kind, key=lambda x: (x[0][5], x[0][4]))][:5]
                expected.append((r[2], r[4], g, ids, "exact" if exact else "near",
                                 1.0 if exact else max(m[1] for _, m in found)))
    got = sorted(tuple(x) for x in match.overlaps(df, reached).collect())
    assert got == sorted(expected) and {e[4] for e in expected} == {"exact", "near"}

    totals = {g: sum(r[2] == g for r in records) for g in groups}
    split_m, dataset_m = matrices({g: {"records": n} for g, n in totals.items()}, groups, reached)
    assert {(a, b): v["count"] for a, row in split_m.items() for b, v in row.items() if v["count"]} \
        == {cell: len(ids) for cell, ids in cells.items()}
    for x in ("x", "y"):
        for y in ("x", "y"):
            want = {r for (a, b), ids in cells.items() for r in ids
                    if groups[a] == x and groups[b] == y and (x != y or a != b)}
            assert dataset_m[x][y]["count"] == len(want)
    # The stage functions give each matrix's cells alone (the audit collects both in one pass).
    for counts, m in ((match.split_counts, split_m), (match.dataset_counts, dataset_m)):
        assert sorted(map(tuple, counts(reached).collect())) == sorted(
            (a, b, v["count"]) for a, row in m.items() for b, v in row.items() if v["count"])


def test_exact_csv_texts_with_crlf_inside_quotes_match_the_same_jsonl_texts(spark, tmp_path):
    # A CRLF file with CRLF (and a lone LF, a lone CR) inside quoted values: Spark's own line
    # ending detection turned the quoted CRLF into LF, so under --normalizer exact the CSV rows
    # no longer matched the same texts from JSONL.
    texts = ["al\r\npha", "be\r\n\r\nta", "gam\nma", "del\rta", "end\r\n"]
    with open(tmp_path / "tr.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\r\n").writerows([["t"], *[[t] for t in texts]])
    write_jsonl(tmp_path / "te.jsonl", [{"t": t} for t in texts])
    res = audit([Source("a", str(tmp_path / "tr.csv"), split="train", text_field="t"),
                 Source("b", str(tmp_path / "te.jsonl"), split="test", text_field="t")],
                Options(normalizer="exact"), spark=spark)
    assert_df_equality(res.overlaps.where("from = 'b/test'").select("id", "match_ids"),
                       spark.createDataFrame([(i, [i]) for i in range(len(texts))],
                                             "id long, match_ids array<bigint>"),
                       ignore_row_order=True, ignore_nullable=True)
    res.unpersist()
