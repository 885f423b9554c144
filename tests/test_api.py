"""The library API as a notebook user calls it: argument checks, and what a call leaves behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from chispa import assert_df_equality
from conftest import write_jsonl

import leakcheck_spark as L
from leakcheck_spark.errors import BAD_SPEC, USAGE


@pytest.mark.parametrize("kwargs", [
    {"threshold": "0.8"}, {"threshold": None}, {"threshold": True},
    {"num_perm": 128.5}, {"num_perm": "128"}, {"shingle": 2.5}, {"shingle": True},
    {"max_chars": 10.5}, {"max_chars": "10"}, {"max_rows": None}, {"max_rows": 2.5},
    {"near": "no"}, {"near": 1}, {"near": None},
])
def test_options_refuse_values_of_the_wrong_type(kwargs):
    # Before: a TypeError from a comparison, a float accepted and failing later inside a Python
    # worker, or near="no" (truthy) silently switching near matching on.
    with pytest.raises(L.LeakcheckError) as info:
        L.Options(**kwargs)
    assert info.value.code == USAGE
    assert repr(next(iter(kwargs.values()))) in info.value.message


def test_options_take_numpy_numbers_as_plain_ones():
    opts = L.Options(threshold=np.float32(0.5), shingle=np.int64(3), num_perm=np.int32(64),
                     max_chars=np.int64(100), max_rows=np.int64(0), near=True)
    assert opts.to_dict() == {"normalizer": "whitespace", "lang": "c", "max_chars": 100,
                              "near": True, "threshold": 0.5, "shingle": 3, "num_perm": 64,
                              "max_rows": 0, "format": "parquet"}
    assert [type(v) for v in (opts.threshold, opts.shingle, opts.num_perm)] == [float, int, int]


def test_a_bad_split_is_named_with_the_source_as_typed():
    with pytest.raises(L.LeakcheckError) as info:
        L.Source("a", "a.jsonl", split="x/y")
    assert info.value.message == "bad split 'x/y' in source a:x/y=a.jsonl"


def test_a_source_is_reported_with_the_fields_it_reads():
    # Before: every source given a split (and every hf: source) listed the global
    # split_field, which it never reads.
    fields = {"text_field": "t", "split_field": "part"}
    assert L.Source("a", "a.jsonl", **fields).to_dict() == {"name": "a", "path": "a.jsonl",
                                                            **fields}
    for given in ({"path": "a.jsonl", "split": "test"}, {"path": "hf:org/a"}):
        reported = L.Source("a", **given, **fields).to_dict()
        assert reported == {"name": "a", **given, "text_field": "t"}


@pytest.mark.parametrize("kwargs", [
    {"name": None, "path": "a.jsonl"}, {"name": "a", "path": 123},
    {"name": "a", "path": "a.jsonl", "text_field": 5},
    {"name": "a", "path": "a.jsonl", "split": ["train"]},
])
def test_sources_refuse_values_of_the_wrong_type(kwargs):
    with pytest.raises(L.LeakcheckError) as info:
        L.Source(**kwargs)
    assert info.value.code == BAD_SPEC


@pytest.fixture
def two(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"func": "int f(){return 1;}", "label": 0},
                                           {"func": "int g(){return 2;}", "label": 0}])
    write_jsonl(tmp_path / "test.jsonl", [{"func": "int f() { return 1; }", "label": 1},
                                          {"func": "int h(){return 3;}", "label": 0}])
    return (L.Source("d", str(tmp_path / "train.jsonl"), split="train", text_field="func",
                     label_field="label"),
            L.Source("d", str(tmp_path / "test.jsonl"), split="test", text_field="func",
                     label_field="label"))


def test_a_source_path_may_be_a_pathlib_path(spark, two):
    # Before: AttributeError: 'PosixPath' object has no attribute 'startswith'.
    train, test = two
    as_path = L.Source("d", Path(train.path), split="train", text_field="func")
    assert as_path.path == train.path
    res = L.audit([as_path, test], spark=spark)
    assert res.split_matrix["d/test"]["d/train"] == {"count": 1, "fraction": 0.5}
    res.unpersist()


@pytest.mark.parametrize("call", [
    lambda spark, train, test: L.audit(train.path, spark=spark),
    lambda spark, train, test: L.audit([train, train.path], spark=spark),
    lambda spark, train, test: L.audit([train, test], {"near": True}, spark=spark),
    lambda spark, train, test: L.audit([train, test], spark="local[2]"),
    lambda spark, train, test: L.clean([test], [train], spark=spark),
    lambda spark, train, test: L.clean(test, [{"path": train.path}], spark=spark),
    lambda spark, train, test: L.resplit([train, test], priority="", spark=spark),
    lambda spark, train, test: L.resplit([train, test], priority=("train", "train"),
                                         spark=spark),
    lambda spark, train, test: L.resplit([train, test], priority=["train", 5], spark=spark),
    lambda spark, train, test: L.check([train], 42, spark=spark),
    lambda spark, train, test: L.fingerprint_sources([train, "x.jsonl"], spark=spark),
])
def test_arguments_of_the_wrong_kind_are_usage_errors(spark, two, call):
    # Before: AttributeError / TypeError from deep inside, or (priority) a silent wrong answer.
    with pytest.raises(L.LeakcheckError) as info:
        call(spark, *two)
    assert info.value.code == USAGE


def test_one_source_for_a_list_of_them(spark, two):
    train, test = two
    one, listed = L.clean(test, train, spark=spark), L.clean(test, [train], spark=spark)
    assert one.counts == listed.counts == {"kept": 1, "dropped": 1, "against": 1,
                                           "duplicate": 0, "conflict": 0}
    one.unpersist()
    listed.unpersist()


def test_resplit_priority_as_a_string_is_read_like_the_flag(spark, two):
    # Before: tuple("train,test") was its characters, none a split, so every split ranked
    # alphabetically and the shared record moved to test instead of train.
    by_string = L.resplit(list(two), priority="train,test", spark=spark)
    by_tuple = L.resplit(list(two), priority=("train", "test"), spark=spark)
    assert by_string.priority == ("train", "test")
    assert by_string.summary["moved"] == [{"from": "test", "to": "train", "records": 1}]
    assert_df_equality(by_string.assignment, by_tuple.assignment, ignore_row_order=True)
    by_string.unpersist()
    by_tuple.unpersist()


def _cached_ids(spark) -> set:
    return set(spark.sparkContext._jsc.getPersistentRDDs().keySet())


def test_a_failed_call_leaves_nothing_cached(spark, two, tmp_path):
    # Before: the sources read before the bad row stayed persisted (nothing could release
    # them but spark.catalog.clearCache(), which drops the user's own caches too).
    train, test = two
    write_jsonl(tmp_path / "bad.jsonl", [{"code": "x"}])
    bad = L.Source("b", str(tmp_path / "bad.jsonl"), split="test", text_field="func")
    before = _cached_ids(spark)
    for call in (lambda: L.audit([train, test, bad], spark=spark),
                 lambda: L.audit([train, test, bad], L.Options(near=True), spark=spark),
                 lambda: L.clean(test, [train, bad], spark=spark),
                 lambda: L.resplit([train, bad], spark=spark),
                 lambda: L.check([train], bad, n=3, spark=spark),
                 lambda: L.fingerprint_sources([train, bad], spark=spark)):
        with pytest.raises(L.LeakcheckError):
            call()
        assert _cached_ids(spark) == before


def test_clean_releases_what_it_cached(spark, two, tmp_path):
    # Before: CleanResult had no unpersist(): the test rows and the decisions of every clean
    # stayed cached for the rest of the session.
    train, test = two
    before = _cached_ids(spark)
    res = L.clean(test, [train], L.Options(near=True), dedup=True, drop_conflicts=True,
                  spark=spark)
    res.write(str(tmp_path / "kept.jsonl"))
    res.unpersist()
    assert _cached_ids(spark) == before
    # Still usable, recomputed.
    assert (tmp_path / "kept.jsonl").read_text() == '{"func": "int h(){return 3;}", "label": 0}\n'
    assert [r.id for r in res.kept.collect()] == [1]


def test_a_stopped_session_is_one_usage_error_and_unpersist_after_it_is_quiet(two, tmp_path):
    # Before: a result written after spark.stop() failed with AttributeError: 'NoneType' object
    # has no attribute 'addJobTag' (audit), a bare AssertionError (clean, and a resplit written
    # to one file), a Java NullPointerException trace (unpersist), and a stopped session passed
    # in with PySpark's SESSION_OR_CONTEXT_NOT_EXISTS.  Its own process, as the tests' session
    # must stay up; the results are built directly on a small cached frame (a real run there
    # costs ~20 s more, and the writes check the session before they touch their frames).
    import subprocess
    import sys

    train, test = two
    script = f"""
import leakcheck_spark as L
from leakcheck_spark.audit import AuditResult
from leakcheck_spark.clean import CleanResult
from leakcheck_spark.resplit import ResplitResult
from leakcheck_spark.session import get_session
spark = get_session("local[1]", conf=[("spark.sql.shuffle.partitions", "1")])
train = L.Source("d", {train.path!r}, split="train", text_field="func")
test = L.Source("d", {test.path!r}, split="test", text_field="func")
df = spark.range(3).cache()
df.count()
opts = L.Options()
results = [AuditResult([train, test], opts, {{}}, {{}}, {{}}, df, df, 0, [], 0, [], {{}},
                       _cached=[df]),
           CleanResult(test, opts, "jsonl", df, [], {{}}, _cached=[df]),
           ResplitResult([train, test], opts, ("train",), df, {{}})]
spark.stop()
calls = [lambda: results[0].write("{tmp_path}/report"), lambda: results[1].write("{tmp_path}/k.jsonl"),
         lambda: results[1].write_report("{tmp_path}/r.json"),
         lambda: results[2].write("{tmp_path}/s.csv"), lambda: L.audit([train, test], spark=spark)]
for call in calls:
    try:
        call()
    except L.LeakcheckError as exc:
        print(exc.code, exc.message)
for res in results:
    res.unpersist()
print("released")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "LC_E_USAGE the Spark session has been stopped (spark.stop()), so its DataFrames cannot "
        "run"] * 5 + ["released"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.jsonl", "train.jsonl"]


def test_write_refuses_an_unknown_format_and_reports_the_one_used(spark, two, tmp_path):
    # Before: write(dir, fmt="xml") wrote Parquet without a word, and write(dir, fmt="csv")
    # wrote CSV lists beside a report.json whose options said "parquet".
    res = L.audit(list(two), spark=spark)
    rs = L.resplit(list(two), spark=spark)
    for write in (lambda: res.write(str(tmp_path / "r"), fmt="xml"),
                  lambda: rs.write(str(tmp_path / "r"), fmt="CSV")):
        with pytest.raises(L.LeakcheckError) as info:
            write()
        assert info.value.code == USAGE
        assert not (tmp_path / "r").exists()
    res.write(str(tmp_path / "r"), fmt="csv")
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["options"]["format"] == "csv"
    assert res.options.format == "parquet"
    overlaps = spark.read.option("header", True).csv(str(tmp_path / "r" / "overlaps"))
    assert_df_equality(overlaps, spark.createDataFrame(
        [("d/test", "2", "d/train", "[0]", "exact", "1.0"),     # ids: rows of dataset d
         ("d/train", "0", "d/test", "[2]", "exact", "1.0")],
        "from string, id string, to string, match_ids string, match string, "
        "similarity string"), ignore_row_order=True)
    res.unpersist()
    rs.unpersist()


def test_write_never_replaces_a_users_directory_nor_an_input_and_takes_paths_as_the_cli(
        spark, two, tmp_path, monkeypatch):
    # Before: every write replaced whatever directory was at its path: res.write("~/projects")
    # deleted the user's files.
    train, test = two
    res, rs = L.audit(list(two), spark=spark), L.resplit(list(two), spark=spark)
    cl, ch = L.clean(test, [train], spark=spark), L.check([train], test, 3, spark=spark)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    as_file = tmp_path / "mine.jsonl"  # a directory where one file goes
    as_file.mkdir()
    (as_file / "notes.txt").write_text("mine")
    before = sorted(p.name for p in tmp_path.iterdir())
    for write in (lambda: res.write(str(mine)), lambda: ch.write(str(mine)),
                  lambda: cl.write(str(mine)), lambda: rs.write(str(mine)),
                  lambda: cl.write(str(as_file)), lambda: rs.write(str(as_file)),
                  lambda: cl.write_report(str(mine))):
        with pytest.raises(L.LeakcheckError) as info:
            write()
        assert info.value.code == USAGE, info.value.message
        assert "exists and is not a leakcheck-spark output (it holds notes.txt)" in (
            info.value.message)
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # no staging left either
        assert [p.name for p in mine.iterdir()] == ["notes.txt"]
        assert [p.name for p in as_file.iterdir()] == ["notes.txt"]
    # A file where a directory goes: it was replaced by the output, silently.
    notes = tmp_path / "notes"
    notes.write_text("mine")
    for write in (res.write, ch.write, cl.write, rs.write):
        with pytest.raises(L.LeakcheckError) as info:
            write(str(notes))
        assert info.value.code == USAGE and "notes is a file, and this output is a directory" in (
            info.value.message)
        assert notes.read_text() == "mine"
    # An earlier output of the same kind is replaced.
    for write, out in ((res.write, "a"), (ch.write, "c"), (cl.write, "k"), (rs.write, "r")):
        write(str(tmp_path / out))
        write(str(tmp_path / out))
        assert (tmp_path / out / ("report.json" if out in "ac" else "_SUCCESS")).exists()
    # And before: rs.write("train.jsonl") replaced the input with the assignment rows,
    # silently (the CLI refused it); write("") failed after the Spark write (LC_E_IO "cannot
    # move ... to :"); write(Path(...)), write(None) raised AttributeError: ... has no attribute
    # 'lower'; and "~/out" (like Source("d", "~/x.jsonl")) named a folder "~" in the working
    # directory.
    inputs = {p: p.read_bytes() for p in (tmp_path / "train.jsonl", tmp_path / "test.jsonl")}
    bad = [(w, str(tmp_path / "train.jsonl"), "is the input") for w in
           (res.write, ch.write, cl.write, rs.write, cl.write_report)]
    bad += [(w, str(tmp_path), "holds the input") for w in (res.write, rs.write)]
    bad += [(cl.write, str(tmp_path / "train.jsonl" / "x.jsonl"), "lies inside the input"),
            (cl.write_report, str(tmp_path / "test.jsonl"), "is the input")]
    bad += [(w, arg, "") for w in (res.write, cl.write, rs.write, cl.write_report)
            for arg in ("", "  ", None, 5)]
    for write, arg, what in bad:
        with pytest.raises(L.LeakcheckError) as info:
            write(arg)
        assert info.value.code == USAGE and what in info.value.message, (arg, info.value.message)
    assert {p: p.read_bytes() for p in inputs} == inputs
    # A clean may write its own test file (as clean --out may); a pathlib.Path is a path; and
    # ~ is the home folder, for a Source's path as for an output.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    home = L.Source("d", "~/test.jsonl", split="test", text_field="func")
    assert home.path == str(tmp_path / "test.jsonl")
    rs.write(tmp_path / "rows.csv")
    res.write("~/report")
    cl.write(test.path)
    assert (tmp_path / "rows.csv").is_file() and not (tmp_path / "~").exists()
    assert (tmp_path / "test.jsonl").read_text() == '{"func": "int h(){return 3;}", "label": 0}\n'
    assert (tmp_path / "report" / "report.json").exists()
    for r in (res, rs, cl, ch):
        r.unpersist()


RECORDS_DDL = ("dataset string, split string, group string, id string, row long, text string, "
               "label string, label_canon string, id_num long")


def test_stages_compose_and_name_the_columns_they_miss(spark):
    # SPEC 10: stages are DataFrame -> DataFrame a user composes.  Composed in order they give
    # the audit's overlaps; given a frame without a column they read, they used to fail with
    # Spark's AnalysisException from somewhere inside; now with the stage and what it needs.
    import pyspark.sql.functions as F

    from leakcheck_spark import match, near
    from leakcheck_spark.errors import BAD_VALUE, MISSING_FIELD
    from leakcheck_spark.normalize import with_keys

    records = spark.createDataFrame([
        ("a", "train", "a/train", "0", 0, "x = 1", None, None, 0),
        ("b", "test", "b/test", "k", 0, "x=1", None, None, None),
        ("b", "test", "b/test", "m", 1, "y", None, None, None),
    ], RECORDS_DDL).transform(with_keys)
    kg = match.key_groups(records)
    reached = match.reach(kg, match.exact_edges(match.copied_keys(kg)))
    assert_df_equality(
        match.overlaps(records, reached),
        spark.createDataFrame([("a/train", "0", "b/test", ["k"], "exact", 1.0),
                               ("b/test", "k", "a/train", ["0"], "exact", 1.0)],
                              "from string, id string, to string, match_ids array<string>, "
                              "match string, similarity double"),
        ignore_row_order=True, ignore_nullable=True)

    def fails(call, code, *words):
        with pytest.raises(L.LeakcheckError) as info:
            call()
        assert info.value.code == code
        for w in words:
            assert w in info.value.message
        return info.value

    err = fails(lambda: match.key_groups(records.drop("key")), MISSING_FIELD,
                "stage match.key_groups needs column(s) key in records",
                "columns present: dataset, split, group, id, row, text")
    assert "key, group, dataset" in err.hint
    fails(lambda: match.overlaps(records.drop("id_num"), reached), MISSING_FIELD,
          "match.overlaps", "id_num")
    fails(lambda: match.reach(kg, kg), MISSING_FIELD, "match.reach", "other in edges")
    fails(lambda: match.label_conflicts(records.drop("label_canon", "row")), MISSING_FIELD,
          "row, label_canon")
    fails(lambda: with_keys(records.withColumn("text", F.lit(1))), BAD_VALUE,
          "stage normalize.with_keys needs column text of records to be string, not int")
    fails(lambda: near.near_edges(records.withColumn("key", F.hex("key")), L.Options(near=True)),
          BAD_VALUE, "near.near_edges", "key", "binary, not string")


def test_no_sources_is_a_usage_error_and_the_calls_keep_their_signatures():
    import inspect

    for call in (L.audit, L.resplit, L.fingerprint_sources):
        with pytest.raises(L.LeakcheckError) as info:
            call([])
        assert (info.value.code, info.value.message) == (USAGE, "no datasets given"), call
    # help() and IDEs see the parameters through the wrapper that translates Spark's errors.
    assert list(inspect.signature(L.audit).parameters) == ["sources", "options", "spark"]
    assert "dedup" in inspect.signature(L.clean).parameters


def test_write_refuses_the_cwd_and_a_table_input_as_the_cli(
        spark, two, tmp_path, monkeypatch):
    # Before: rs.write(os.getcwd()) of an empty working directory replaced it (os.getcwd() then
    # failed), where the CLI refuses it; rs.write(<location of a table: input>) replaced the
    # table's files (the CLI's check_table_outputs refuses it).
    train, test = two
    rs = L.resplit(list(two), spark=spark)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for arg in (".", str(cwd), str(tmp_path / "x") + "/../cwd"):
        with pytest.raises(L.LeakcheckError) as info:
            rs.write(arg)
        assert info.value.code == USAGE and "working directory" in info.value.message
    assert os.getcwd() == str(cwd) and not any(cwd.iterdir())
    spark.read.json(train.path).write.mode("overwrite").saveAsTable("lc_paths_t")
    try:
        loc = [r.data_type for r in spark.sql("DESCRIBE TABLE EXTENDED lc_paths_t").collect()
               if r.col_name == "Location"][0]
        rt = L.resplit([L.Source("t", "table:lc_paths_t", split="train", text_field="func"),
                        test], spark=spark)
        with pytest.raises(L.LeakcheckError) as info:
            rt.write(loc)
        assert info.value.code == USAGE and "table:lc_paths_t" in info.value.message
        assert spark.table("lc_paths_t").count() == spark.read.json(train.path).count()
        rt.unpersist()
    finally:
        spark.sql("DROP TABLE IF EXISTS lc_paths_t")
    rs.unpersist()
