"""Reading sources into records: every format, ids, splits, overrides (real files, real Spark)."""

from __future__ import annotations

import bz2
import decimal
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from conftest import spark_conf, write_jsonl

from leakcheck_spark import LeakcheckError, Options, Source
from leakcheck_spark.errors import TYPE_CLASH_HINT
from leakcheck_spark.sources import (
    check_text_fields,
    file_format,
    line_ending,
    read_csv,
    read_records,
)

COLS = ["dataset", "split", "group", "id", "row", "text", "label", "label_canon"]
SCHEMA_INT = ("dataset string, split string, group string, id long, row long, text string, "
              "label string, label_canon string")
SCHEMA_STR = SCHEMA_INT.replace("id long", "id string")


def records(spark, sources, **opts):
    df, _, _ = read_records(spark, sources, Options(**opts))
    return df.select(*COLS)


def test_file_format():
    assert file_format("x/a.ndjson.GZ") == "jsonl"
    assert file_format("a.json") == "json"
    assert file_format("a.csv.gz") == "csv"
    assert file_format("a.txt") == "txt"
    assert file_format("a.parquet.gz") is None
    assert file_format("a.jsonl.bz2") == "jsonl"
    assert file_format("a.CSV.zst") == "csv"
    assert file_format("a.json.zst") is None  # a .json list is decompressed in Python: no zstd
    assert file_format("a.xml") is None


def test_jsonl_row_index_ids_over_glob_in_path_order(spark, tmp_path):
    # Files are read in path order (b before c), whatever order the glob lists them in; blank
    # lines are not rows; the row index runs on across the files of the dataset.
    write_jsonl(tmp_path / "c.jsonl", [{"t": "c0"}, {"t": "c1"}])
    (tmp_path / "b.jsonl").write_text('{"t": "b0"}\n\n{"t": "b1"}\r\n', encoding="utf-8")
    src = Source("d", str(tmp_path / "*.jsonl"), split="train", text_field="t")
    expected = spark.createDataFrame(
        [("d", "train", "d/train", i, i, t, None, None)
         for i, t in enumerate(["b0", "b1", "c0", "c1"])], SCHEMA_INT)
    with spark_conf(spark, **{"spark.sql.files.maxPartitionBytes": "8",
                              "spark.sql.files.openCostInBytes": "0"}):
        assert_df_equality(records(spark, [src]), expected, ignore_row_order=True, ignore_nullable=True)


def test_files_with_names_a_uri_escapes_are_read_in_path_order(spark, tmp_path):
    # Spark names files by URI, where "é" is "%C3%A9" and sorts before "a": the row ids must
    # follow the paths themselves (a, z, é; "b c" and "b-c" as written).
    for name in ("é", "z", "a", "b c", "b-c", "b#c"):
        write_jsonl(tmp_path / "in" / f"{name}.jsonl", [{"t": name}])
    src = Source("d", str(tmp_path / "in"), split="train", text_field="t")
    names = sorted(["é", "z", "a", "b c", "b-c", "b#c"])
    expected = spark.createDataFrame(
        [("d", "train", "d/train", i, i, t, None, None) for i, t in enumerate(names)], SCHEMA_INT)
    assert_df_equality(records(spark, [src]), expected, ignore_row_order=True,
                       ignore_nullable=True)


def test_row_index_continues_across_sources_of_one_dataset(spark, tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"t": "x"}, {"t": "y"}])
    write_jsonl(tmp_path / "test.jsonl", [{"t": "z"}])
    srcs = [Source("d", str(tmp_path / "train.jsonl"), split="train", text_field="t"),
            Source("d", str(tmp_path / "test.jsonl"), split="test", text_field="t"),
            Source("e", str(tmp_path / "test.jsonl"), split="test", text_field="t")]
    expected = spark.createDataFrame([
        ("d", "train", "d/train", 0, 0, "x", None, None),
        ("d", "train", "d/train", 1, 1, "y", None, None),
        ("d", "test", "d/test", 2, 2, "z", None, None),
        ("e", "test", "e/test", 0, 0, "z", None, None),
    ], SCHEMA_INT)
    assert_df_equality(records(spark, srcs), expected, ignore_row_order=True, ignore_nullable=True)


def test_every_format_gives_the_same_records(spark, tmp_path):
    rows = [{"id": "r1", "func": "int a;", "target": 1, "split": "train"},
            {"id": "r2", "func": None, "target": False, "split": "test"},
            {"id": "r3", "func": "x\ny, \"q\"", "target": "yes", "split": "train"}]
    write_jsonl(tmp_path / "a.jsonl", rows)
    with gzip.open(tmp_path / "a.ndjson.gz", "wt", encoding="utf-8") as fh:
        fh.write("\ufeff" + "".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "a.json").write_text(json.dumps(rows), encoding="utf-8")
    header = "id,func,target,split\n"
    (tmp_path / "a.csv").write_text(
        header + 'r1,int a;,1,train\nr2,,false,test\nr3,"x\ny, ""q""",yes,train\n', encoding="utf-8")
    pq.write_table(pa.table({"id": ["r1", "r2", "r3"], "func": ["int a;", None, 'x\ny, "q"'],
                             "target": ["1", "false", "yes"],
                             "split": ["train", "test", "train"]}), tmp_path / "a.parquet")
    expected = spark.createDataFrame([
        ("d", "train", "d/train", "r1", 0, "int a;", "1", "1"),
        ("d", "test", "d/test", "r2", 1, None, "false", "0"),
        ("d", "train", "d/train", "r3", 2, 'x\ny, "q"', "yes", "yes"),
    ], SCHEMA_STR)
    for name in ("a.jsonl", "a.ndjson.gz", "a.json", "a.csv", "a.parquet"):
        src = Source("d", str(tmp_path / name), text_field="func", label_field="target",
                     split_field="split", id_field="id")
        got = records(spark, [src])
        if name in ("a.csv", "a.parquet"):  # typed as strings there: displayed as written
            got = got.replace({"false": "false"}, subset=["label"])
        else:  # JSON labels: 1 and false are shown as JSON
            expected_json = expected.replace({"false": "false"}, subset=["label"])
            assert_df_equality(got, expected_json, ignore_row_order=True, ignore_nullable=True)
            continue
        assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_txt_lines_and_max_rows(spark, tmp_path):
    (tmp_path / "a.txt").write_text("one\n\ntwo\r\nthree\nfour\n", encoding="utf-8")
    src = Source("t", str(tmp_path / "a.txt"))
    expected = spark.createDataFrame(
        [("t", "all", "t/all", i, i, s, None, None) for i, s in enumerate(["one", "two", "three"])],
        SCHEMA_INT)
    assert_df_equality(records(spark, [src], max_rows=3), expected, ignore_row_order=True, ignore_nullable=True)


def test_integer_ids_stay_integers_and_typed_labels_canonicalise(spark, tmp_path):
    pq.write_table(pa.table({"idx": pa.array([7, 3], pa.int64()), "code": ["a", "b"],
                             "ok": pa.array([True, False])}), tmp_path / "p.parquet")
    src = Source("p", str(tmp_path / "p.parquet"), split="s", text_field="code", id_field="idx",
                 label_field="ok")
    expected = spark.createDataFrame([("p", "s", "p/s", 7, 0, "a", "true", "1"),
                                      ("p", "s", "p/s", 3, 1, "b", "false", "0")], SCHEMA_INT)
    assert_df_equality(records(spark, [src]), expected, ignore_row_order=True, ignore_nullable=True)


def test_a_json_integer_id_beyond_a_long_makes_the_ids_text(spark, tmp_path):
    # JSON numbers have no range: 10**20 cannot be a long, so the dataset's ids are texts (as
    # written), not a cast that fails the run.
    write_jsonl(tmp_path / "a.jsonl", [{"t": "a", "i": 10**20}, {"t": "b", "i": 9}])
    src = Source("d", str(tmp_path / "a.jsonl"), split="s", text_field="t", id_field="i")
    expected = spark.createDataFrame([("d", "s", "d/s", str(10**20), 0, "a", None, None),
                                      ("d", "s", "d/s", "9", 1, "b", None, None)], SCHEMA_STR)
    assert_df_equality(records(spark, [src]), expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("big", [False, True])
def test_parquet_uint64_ids_are_integers_where_they_fit_a_long(spark, tmp_path, big):
    # Spark reads uint64 as decimal(20,0): ids that all fit a long stay integers (10 after 9,
    # not "10" before "2"); one beyond makes the dataset's ids texts, as a JSON number does.
    ids = [10, 2, 2**64 - 1 if big else 9]
    pq.write_table(pa.table({"i": pa.array(ids, pa.uint64()), "t": ["a", "b", "c"]}),
                   tmp_path / "u.parquet")
    src = Source("d", str(tmp_path / "u.parquet"), split="s", text_field="t", id_field="i")
    expected = spark.createDataFrame(
        [("d", "s", "d/s", str(i) if big else i, n, t, None, None)
         for n, (i, t) in enumerate(zip(ids, "abc"))], SCHEMA_STR if big else SCHEMA_INT)
    assert_df_equality(records(spark, [src]), expected, ignore_row_order=True,
                       ignore_nullable=True)


def test_a_json_file_of_json_lines_reads_as_jsonl(spark, tmp_path):
    # Spark's and pandas' JSON writers (and many Hugging Face datasets) put JSON Lines in .json
    # files: each line is a record, as in a .jsonl file, and an error names the line.
    rows = [{"i": 4, "t": "a"}, {"i": 2, "t": "b"}, {"i": 9, "t": None}]
    write_jsonl(tmp_path / "a.jsonl", rows)
    (tmp_path / "a.json").write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n"
                                     + json.dumps(rows[2]) + "\n", encoding="utf-8")
    got = [records(spark, [Source("d", str(tmp_path / name), split="s", text_field="t",
                                  id_field="i")]) for name in ("a.json", "a.jsonl")]
    assert_df_equality(got[0], got[1], ignore_row_order=True, ignore_nullable=True)
    (tmp_path / "b.json").write_text('{"t": "a"}\n{"u": 1}\n', encoding="utf-8")
    with pytest.raises(LeakcheckError, match=r"field 't' not in line 2 of .*b\.json; fields "):
        records(spark, [Source("d", str(tmp_path / "b.json"), split="s", text_field="t")])
    # One object on one line is one record (a part file of one row, as `clean --format json`
    # writes one); a pretty-printed object is a metadata file, not records.
    (tmp_path / "one.json").write_text('{"i": 7, "t": "x"}\n', encoding="utf-8")
    one = records(spark, [Source("d", str(tmp_path / "one.json"), split="s", text_field="t",
                                 id_field="i")])
    assert [(r.id, r.text) for r in one.collect()] == [(7, "x")]
    (tmp_path / "info.json").write_text(json.dumps({"t": "x", "n": 1}, indent=2), encoding="utf-8")
    with pytest.raises(LeakcheckError, match=r"expected a JSON list of objects, got dict"):
        records(spark, [Source("d", str(tmp_path / "info.json"), split="s", text_field="t")])


@pytest.mark.parametrize("codec", ["bz2", "zst"])
def test_bz2_and_zstd_compressed_text_formats_read_as_plain(spark, tmp_path, codec):
    # One codec a case: bzip2 needs no extra module, so a missing zstandard skips only .zst.
    compress = bz2.compress if codec == "bz2" else (
        pytest.importorskip("zstandard").ZstdCompressor().compress)
    rows = [{"i": 4, "t": "a"}, {"i": 2, "t": "b, \"c\""}]
    jsonl = "".join(json.dumps(r) + "\n" for r in rows).encode()
    csv_text = 'i,t\n4,a\n2,"b, ""c"""\n'.encode()
    write_jsonl(tmp_path / "a.jsonl", rows)
    names = [f"a.jsonl.{codec}", f"a.csv.{codec}"]
    (tmp_path / names[0]).write_bytes(compress(jsonl))
    (tmp_path / names[1]).write_bytes(compress(csv_text))
    if codec == "bz2":  # a .json list is decompressed in Python, which has no zstd
        names.append("a.json.bz2")
        (tmp_path / "a.json.bz2").write_bytes(bz2.compress(json.dumps(rows).encode()))
    expected = records(spark, [Source("d", str(tmp_path / "a.jsonl"), split="s", text_field="t",
                                      id_field="i")])
    for name in names:
        got = records(spark, [Source("d", str(tmp_path / name), split="s", text_field="t",
                                     id_field="i")])
        if name.startswith("a.csv"):  # CSV ids are strings
            got = got.withColumn("id", got["id"].cast("long"))
        assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_dotted_field_into_a_nested_one_says_fields_are_top_level(spark, tmp_path):
    # HF-style rows nest their text: --text-field meta.text is not a path into `meta`, and the
    # error says so, for JSON objects and for a Parquet struct column alike.
    write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "meta": {"text": "a"}}])
    pq.write_table(pa.table({"id": [1], "meta": [{"text": "a"}]}), tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.parquet"):
        src = Source("d", str(tmp_path / name), split="s", text_field="meta.text")
        with pytest.raises(LeakcheckError) as info:
            records(spark, [src])
        assert "'meta.text' is not read inside 'meta'" in info.value.line(), name


def test_directory_reads_supported_files_below_it(spark, tmp_path):
    write_jsonl(tmp_path / "d" / "x" / "1.jsonl", [{"t": "a"}])
    write_jsonl(tmp_path / "d" / "2.jsonl", [{"t": "b"}])
    (tmp_path / "d" / "notes.md").write_text("ignored")
    src = Source("d", str(tmp_path / "d"), split="s", text_field="t")
    got = sorted((r.id, r.text) for r in records(spark, [src]).collect())
    assert got == [(0, "b"), (1, "a")]  # "2.jsonl" sorts before "x/1.jsonl"


@pytest.mark.parametrize("label,expect", [("target", ["1", "0"]), (None, [None, None])])
def test_label_field_can_be_switched_off(spark, tmp_path, label, expect):
    write_jsonl(tmp_path / "a.jsonl", [{"t": "a", "target": True}, {"t": "b", "target": 0}])
    src = Source("d", str(tmp_path / "a.jsonl"), text_field="t", label_field=label)
    assert [r.label_canon for r in records(spark, [src]).orderBy("row").collect()] == expect


def test_catalog_table_reads_like_its_files(spark, tmp_path):
    rows = [(f"r{i}", f"text {i % 7}", i % 2) for i in range(40)]
    df = spark.createDataFrame(rows, "uid string, code string, y long").repartition(3)
    df.write.mode("overwrite").saveAsTable("lc_test_table")
    location = spark.sql("DESCRIBE FORMATTED lc_test_table").where("col_name = 'Location'")
    files = location.first().data_type
    opts = {"split": "train", "text_field": "code", "label_field": "y"}
    got = records(spark, [Source("d", "table:lc_test_table", **opts)])
    want = records(spark, [Source("d", files, **opts)])
    assert got.count() == 40
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_catalog_table_errors(spark, cli):
    code, _, err = cli("audit", "-d", "d:train=table:no_such_table_here", "--text-field", "t")
    assert code == 2 and err.startswith("leakcheck-spark: error [LC_E_IO]: no such table")
    spark.createDataFrame([("a",)], "t string").createOrReplaceTempView("lc_mem_view")
    code, _, err = cli("audit", "-d", "d:train=table:lc_mem_view", "--text-field", "t")
    assert code == 2 and "[LC_E_USAGE]" in err and "not backed by files" in err
    assert len(err.strip().splitlines()) == 1
    for name in ("", "a b", "x.", "a.b.c.d"):  # was "unexpected failure: ParseException ..."
        code, _, err = cli("audit", "-d", f"d:train=table:{name}", "--text-field", "t")
        assert code == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_SPEC]: bad table "
                                            f"name {name!r} (d:train=table:{name})"), err


def test_derived_columns_are_the_same_on_every_read_path(spark, tmp_path):
    # JSON lines and lists compute keys and digests in the pass that parses them; Parquet gets
    # them as pandas UDFs.  The exact audit keeps 200 characters of a text (characters, not
    # bytes: the long text is 2- and 4-byte UTF-8); --near keeps whole texts, or with
    # --max-chars that many characters (at least the 200 of a conflict's sample).
    import pandas as pd

    from leakcheck_spark.audit import keyed
    from leakcheck_spark.fingerprint import digest_series
    from leakcheck_spark.normalize import key_series

    long = "é" * 150 + "\U0001f600" * 60
    texts = [long, "x" * 200, None, "", " \t ", "int  a ;"]
    rows = [{"id": f"r{i}", "func": t} for i, t in enumerate(texts)]
    write_jsonl(tmp_path / "a.jsonl", rows)
    (tmp_path / "a.json").write_text(json.dumps(rows), encoding="utf-8")
    pq.write_table(pa.table({"id": [r["id"] for r in rows], "func": texts}),
                   tmp_path / "a.parquet")
    digests = digest_series(pd.Series(texts))
    schema = "id string, text string, key binary, fp binary"
    for opts, chars in ((Options(), 200), (Options(near=True), None),
                        (Options(near=True, max_chars=205), 205),
                        (Options(near=True, max_chars=50), 200)):
        keys = key_series(pd.Series(texts), "whitespace", "c", opts.max_chars)
        assert keys[0] is not None and keys[2] is None and keys[4] is None
        kept = [t if chars is None or t is None else t[:chars] for t in texts]
        expected = spark.createDataFrame(
            [(f"r{i}", t, k, d) for i, (t, k, d) in enumerate(zip(kept, keys, digests))], schema)
        for name in ("a.jsonl", "a.json", "a.parquet"):
            src = Source("d", str(tmp_path / name), text_field="func", id_field="id")
            df, _, _ = read_records(spark, [src], opts, derived=keyed(opts))
            assert_df_equality(df.select("id", "text", "key", "fp"), expected,
                               ignore_row_order=True, ignore_nullable=True)


def test_csv_files_whose_headers_differ_are_an_error_naming_the_file(cli, tmp_path):
    # Spark applies the first file's column names to every file by position: b.csv's ids would
    # be read as texts.
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.csv").write_text("id,text\n1,alpha\n", encoding="utf-8")
    (tmp_path / "d" / "b.csv").write_text("text,id\nalpha,2\n", encoding="utf-8")
    rc, _, err = cli("audit", "-d", f"a={tmp_path / 'd'}", "--text-field", "text",
                     "--id-field", "id", "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: cannot read "
                                      f"{tmp_path / 'd' / 'b.csv'}"), err
    assert len(err.strip().splitlines()) == 1


def test_an_id_field_for_txt_lines_is_a_missing_field(cli, tmp_path):
    # A .txt line has no fields: its id would be null.
    (tmp_path / "a.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    write_jsonl(tmp_path / "b.jsonl", [{"t": "alpha", "id": "x"}])
    rc, _, err = cli("audit", "-d", f"a={tmp_path / 'a.txt'}", "-d", f"b={tmp_path / 'b.jsonl'}",
                     "--text-field", "t", "--id-field", "id", "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_MISSING_FIELD]: id field "
                                      "'id' given for a="), err
    assert "-o a.id=" in err
    # Read as noleak reads them (check), a line that is not JSON has no id either.
    rc, _, err = cli("check", "--train", tmp_path / "a.txt", "--eval", tmp_path / "a.txt",
                     "--id-field", "id", "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_MISSING_FIELD]: id field "
                                      f"'id' not in line 1 of {tmp_path / 'a.txt'}"), err


def test_a_parquet_file_without_the_text_column_is_an_error_naming_it(spark, cli, tmp_path):
    # Spark reads every file with one file's columns: b.parquet's rows would be null texts.
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"func": ["alpha", "beta"]}), tmp_path / "d" / "a.parquet")
    pq.write_table(pa.table({"code": ["gamma"]}), tmp_path / "d" / "b.parquet")
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 'd'}", "--text-field", "func", "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_MISSING_FIELD]: text field "
                                      f"'func' not in {tmp_path / 'd' / 'b.parquet'} (columns: "
                                      "code)"), err
    # A file that has the column, all of it null, is a file of empty records.
    pq.write_table(pa.table({"func": pa.array([None], pa.string())}), tmp_path / "d" / "b.parquet")
    df = records(spark, [Source("x", str(tmp_path / "d"), text_field="func")])
    assert sorted(r.text or "" for r in df.collect()) == ["", "alpha", "beta"]


MALFORMED_HINT = ("(hint: every row has a value for each column of the header: quote a value "
                  'that holds a comma or a line break ("a,b"), doubling each quote in it)\n')


def test_a_csv_row_with_fewer_values_than_the_header_names_its_line(cli, tmp_path):
    # Spark's FAILFAST message quoted the row's text ("Malformed CSV record: 2"), which names no
    # row: the line is counted across quoted line breaks in the rows before it.
    write_jsonl(tmp_path / "a.jsonl", [{"text": "other"}])
    for name, data, line in (("short.csv", b"id,text\n1,hello\n2\n3,bye\n", 3),
                             ("q.csv", b'id,text\n1,"a\nb\r\nc"\n2\n3,bye\n', 5),
                             ("crlf.csv", b'id,text\r\n1,"a\r\nb\nc"\r\n2\r\n3,bye\r\n', 4),
                             # Empty lines between rows leave no trace in the rows Spark
                             # reads; those in a quoted value are no such lines.
                             ("blank.csv", b'id,text\n\n1,"a\n\n2\n"\n\n\n2\n3,bye\n', 9),
                             ("same.csv", b'id,text\n\n\n\n1,"x\n2\n"\n2\n', 8),
                             ("head.csv", b'\nid,text\n1,"\n\n\n"\n\n2\n', 8),
                             ("blank.csv.gz", gzip.compress(b"id,text\r\n\r\n1,a\r\n\r\n2\r\n"),
                              5)):
        (tmp_path / name).write_bytes(data)
        want = (f"leakcheck-spark: error [LC_E_BAD_FORMAT]: line {line} of {tmp_path / name} "
                f"has 1 field, its header has 2 {MALFORMED_HINT}")
        for argv in (("fingerprint", "-d", f"x={tmp_path / name}"),
                     ("clean", "--test", f"x={tmp_path / name}", "--against",
                      f"a={tmp_path / 'a.jsonl'}", "--out", tmp_path / "out.csv")):
            rc, _, err = cli(*argv, "--text-field", "text", "--quiet")
            assert (rc, err) == (2, want), (name, argv[0])
        assert not (tmp_path / "out.csv").exists()


def test_a_csv_row_with_more_values_than_the_header_names_its_line(cli, tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"text": "other"}])
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.csv").write_text("id,text\n1,alpha\n", encoding="utf-8")
    (d / "b.csv").write_text('id,text\n1,"x\ny"\n2,beta,"p,\nq",r\n3,c\n', encoding="utf-8")
    want = (f"leakcheck-spark: error [LC_E_BAD_FORMAT]: line 4 of {d / 'b.csv'} has 4 "
            f"fields, its header has 2 {MALFORMED_HINT}")
    for argv in (("audit", "-d", f"x={d}/*.csv", "-d", f"a={tmp_path / 'a.jsonl'}",
                  "--text-field", "text"),
                 ("resplit", "-d", f"x={d}/*.csv", "--text-field", "text", "--out",
                  tmp_path / "r.jsonl"),
                 ("check", "--train", f"{d}/*.csv", "--eval", tmp_path / "a.jsonl",
                  "--field", "text")):
        rc, _, err = cli(*argv, "--quiet")
        assert (rc, err) == (2, want), argv[0]


def test_a_bad_csv_row_is_reported_in_read_order_and_within_max_rows(cli, tmp_path):
    def run(data: str, *flags: str) -> tuple[int, str]:
        (tmp_path / "t.csv").write_text("id,text\n" + data, encoding="utf-8")
        rc, _, err = cli("audit", "-d", f"x={tmp_path / 't.csv'}", "--text-field", "text",
                         "--id-field", "id", *flags, "--quiet")
        return rc, err

    # An empty id in an earlier row comes first; in a later row, the short row does.
    rc, err = run(",alpha\n2\n3,gamma\n")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_MISSING_FIELD]: id field "
                                      f"'id' is empty in row 1 of {tmp_path / 't.csv'}"), err
    rc, err = run("1,alpha\n2\n,gamma\n")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: line 3 of "
                                      f"{tmp_path / 't.csv'} has 1 field"), err
    # Past --max-rows a bad row is not read; at it, it is reported.
    rc, err = run('1,"al\npha"\n2,beta\n3,x,y\n', "--max-rows", "2")
    assert rc == 0, err
    rc, err = run('1,"al\npha"\n2,beta\n3,x,y\n', "--max-rows", "3")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: line 5 of "
                                      f"{tmp_path / 't.csv'} has 3 fields, its header has 2"), err


def test_a_bad_csv_row_before_an_invalid_utf8_one_is_the_error_reported(cli, tmp_path):
    (tmp_path / "t.csv").write_bytes(b"id,text\n1,alpha,x\n2,ab\xffc\n")
    rc, _, err = cli("fingerprint", "-d", f"x={tmp_path / 't.csv'}", "--text-field", "text",
                     "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: line 2 of "
                                      f"{tmp_path / 't.csv'} has 3 fields"), err
    (tmp_path / "t.csv").write_bytes(b"id,text\n1,ab\xffc\n2,alpha,x\n")
    rc, _, err = cli("fingerprint", "-d", f"x={tmp_path / 't.csv'}", "--text-field", "text",
                     "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: invalid UTF-8 "
                                      f"in line 2 of {tmp_path / 't.csv'}"), err


def test_a_missing_text_field_is_found_from_the_path_before_spark_when_it_can_be():
    # One file, hf: and table: say their format by name: the CLI refuses them before it starts
    # Spark (~9 s); a directory or glob is listed first.
    for path in ("a.jsonl.gz", "hf:org/x", "table:db.t"):
        with pytest.raises(LeakcheckError, match=f"no text field given for a={path}"):
            check_text_fields([Source("a", "b.txt"), Source("a", path)])
    check_text_fields([Source("a", "b.txt"), Source("a", "dir"), Source("a", "*.jsonl"),
                       Source("a", "x.jsonl", text_field="t"),
                       Source("a", "x.jsonl", noleak=True)])


def test_a_line_that_is_not_json_is_named_with_what_to_do(cli, tmp_path):
    (tmp_path / "a.jsonl").write_text('{"t": "x"}\n\n{t: 1}\n')
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 'a.jsonl'}", "--text-field", "t", "--quiet")
    assert rc == 2 and err == (
        f"leakcheck-spark: error [LC_E_BAD_FORMAT]: invalid JSON in line 3 of "
        f"{tmp_path / 'a.jsonl'}: Expecting property name enclosed in double quotes: line 1 "
        "column 2 (char 1) (hint: each line of a JSON Lines file is one JSON object: fix that "
        "line (a blank line is allowed))\n"), err


def test_a_split_value_that_cannot_name_a_group_is_a_bad_value(cli, tmp_path):
    # -d x:a/b=... and -d x:=... are refused; the same splits from a split column made the groups
    # "x/a/b" and "x/" (read back as dataset x, split a, ...).
    write_jsonl(tmp_path / "s.jsonl", [{"t": "alpha", "s": "train"}, {"t": "beta", "s": "a/b"}])
    pq.write_table(pa.table({"t": ["alpha", "beta"], "s": ["train", ""]}), tmp_path / "s.parquet")
    for name, where, value in (("s.jsonl", "line 2", "'a/b'"), ("s.parquet", "row 2", "''")):
        rc, _, err = cli("audit", "-d", f"x={tmp_path / name}", "--text-field", "t",
                         "--split-field", "s", "--quiet")
        assert rc == 2 and err.startswith(
            f"leakcheck-spark: error [LC_E_BAD_VALUE]: split field 's' in {where} of "
            f"{tmp_path / name} is {value}, not a valid split (hint: a split is non-empty and "
            "has no '/'"), err


def test_a_csv_header_that_repeats_a_field_is_bad_format_naming_the_file(cli, tmp_path):
    # Spark renames repeated header names by position: "field 'func' not in (columns: func0,
    # func1)" did not say what was wrong.
    (tmp_path / "r.csv").write_text("\ufeffid,func,Func\n1,a,b\n", encoding="utf-8")
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 'r.csv'}", "--text-field", "func", "--quiet")
    assert rc == 2 and err == (
        f"leakcheck-spark: error [LC_E_BAD_FORMAT]: the header of {tmp_path / 'r.csv'} repeats "
        "the column 'func' (func, Func): its columns cannot be told apart (hint: give each "
        "column of the header its own name)\n"), err


def test_a_part_file_changed_after_spark_wrote_it_names_its_stale_checksum(spark, cli, tmp_path):
    # Hadoop's local filesystem checks every read against the .NAME.crc Spark wrote beside the
    # file; a user who appends to a part file of an earlier output gets a ChecksumException.
    spark.createDataFrame([("alpha beta",)], "text string").coalesce(1).write.json(
        str(tmp_path / "d"))
    part = next((tmp_path / "d").glob("part-*.json"))
    with open(part, "a", encoding="utf-8") as fh:
        fh.write('{"text": "gamma"}\n')
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 'd'}", "--text-field", "text", "--quiet")
    assert rc == 2 and err.startswith(
        f"leakcheck-spark: error [LC_E_BAD_FORMAT]: cannot read {part}: it changed after Spark "
        f"wrote it (it no longer matches the checksum file {tmp_path / 'd'}/.{part.name}.crc "
        f"beside it) (hint: if the change was meant, delete .{part.name}.crc;"), err
    (tmp_path / "d" / f".{part.name}.crc").unlink()
    rc, stdout, err = cli("audit", "-d", f"x={tmp_path / 'd'}", "--text-field", "text", "--quiet")
    assert rc == 0, err


def test_a_lone_surrogate_escape_is_bad_format_naming_the_line(cli, tmp_path):
    # JSON may spell a lone UTF-16 surrogate ("\ud800"); Python decodes it into a string with no
    # UTF-8 form, and Arrow's conversion failed the run as an "unexpected failure".
    (tmp_path / "s.jsonl").write_text('{"t": "ok"}\n{"t": "a\\ud800b"}\n', encoding="utf-8")
    (tmp_path / "x.txt").write_text("ok\n", encoding="utf-8")
    src = tmp_path / "s.jsonl"
    for argv in (("fingerprint", "-d", f"x={src}", "--text-field", "t"),
                 ("check", "--train", src, "--eval", tmp_path / "x.txt", "--field", "t")):
        rc, _, err = cli(*argv, "--quiet")
        assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: the text "
                                          f"of line 2 of {src} holds a lone"), err
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 's.jsonl'}", "--text-field", "t", "--quiet")
    assert rc == 2 and err == (
        f"leakcheck-spark: error [LC_E_BAD_FORMAT]: the text of line 2 of {tmp_path / 's.jsonl'} "
        "holds a lone UTF-16 surrogate (\\ud800 at character 1): not valid Unicode (hint: a "
        "\\uD800-\\uDFFF escape in JSON must be one of a high+low pair; fix or drop the "
        "record)\n"), err
    # A pair is one character; a lone surrogate in a field that is not read is left alone, and a
    # kept .json list element keeps it as the escape it was written as.
    (tmp_path / "p.json").write_text('[{"t": "\\ud83d\\ude00", "m": "x\\udfffy"}]',
                                     encoding="utf-8")
    (tmp_path / "a.jsonl").write_text('{"t": "other"}\n', encoding="utf-8")
    rc, out, err = cli("clean", "--test", f"p={tmp_path / 'p.json'}", "--against",
                       f"a={tmp_path / 'a.jsonl'}", "--text-field", "t", "--out",
                       tmp_path / "kept.jsonl", "--quiet")
    assert rc == 0, err
    assert (tmp_path / "kept.jsonl").read_text(encoding="utf-8") == (
        '{"t": "\U0001f600", "m": "x\\udfffy"}\n')


def test_parquet_files_that_type_a_column_differently_say_so_in_the_hint(cli, tmp_path):
    # The hint was the default one of LC_E_BAD_FORMAT, the list of supported file types.  The
    # columns are merged now, and Spark's merge error named no file: the message names the first
    # file (by path) that clashes.
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"id": [1, 2], "t": ["alpha", "beta"]}), tmp_path / "d" / "a.parquet")
    pq.write_table(pa.table({"t": ["delta"], "more": [1]}), tmp_path / "d" / "b.parquet")
    for name in ("c", "d"):
        pq.write_table(pa.table({"id": [name], "t": ["gamma"]}), tmp_path / "d" / f"{name}.parquet")
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 'd'}", "--text-field", "t", "--id-field", "id",
                     "--quiet")
    assert rc == 2 and err == (
        f"leakcheck-spark: error [LC_E_BAD_FORMAT]: cannot read {tmp_path / 'd' / 'c.parquet'}: "
        "its column 'id' is string, but bigint in the files of the source before it (by path) "
        "(hint: give "
        "the column one type in every file of the source, or give the files as separate "
        "sources)\n"), err


def test_the_columns_of_parquet_files_are_their_union_in_path_order(spark, cli, tmp_path):
    # Spark read every file with the first one's columns (spark.sql.parquet.mergeSchema=false,
    # its default): kept rows lost the columns only b and c have, and a label only b has was
    # "not in" the source.  Now: a's columns, then b's new one, then c's; null where a file has
    # none; the same whatever the session's setting.
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"t": ["alpha one", "beta two"], "id": [1, 2]}),
                   tmp_path / "d" / "a.parquet")
    pq.write_table(pa.table({"t": ["gamma three", "leak"], "id": [3, 4], "lab": ["x", "y"]}),
                   tmp_path / "d" / "b.parquet")
    pq.write_table(pa.table({"id": [5], "extra": [1.5], "t": ["delta"], "lab": ["z"]}),
                   tmp_path / "d" / "c.parquet")
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    expected = spark.createDataFrame(
        [("alpha one", 1, None, None), ("beta two", 2, None, None), ("gamma three", 3, "x", None),
         ("delta", 5, "z", 1.5)], "t string, id long, lab string, extra double")
    for merge in ("false", "true"):
        out = tmp_path / f"kept-{merge}.parquet"
        with spark_conf(spark, **{"spark.sql.parquet.mergeSchema": merge}):
            rc, _, err = cli("clean", "--test", f"t={tmp_path / 'd'}", "--against",
                             f"a={tmp_path / 'a.txt'}", "--text-field", "t", "-o", "t.id=id",
                             "--out", out, "--quiet")
        assert rc == 0, err
        assert pq.read_table(out).schema.names == ["t", "id", "lab", "extra"]
        assert_df_equality(spark.read.parquet(str(out)), expected, ignore_row_order=True,
                           ignore_nullable=True)
    got = records(spark, [Source("x", str(tmp_path / "d"), split="train", text_field="t",
                                 label_field="lab")]).select("text", "label")
    assert_df_equality(got, spark.createDataFrame(
        [("alpha one", None), ("beta two", None), ("gamma three", "x"), ("leak", "y"),
         ("delta", "z")], "text string, label string"), ignore_row_order=True,
        ignore_nullable=True)


def test_parquet_integer_columns_of_several_widths_are_read_as_the_widest(spark, tmp_path):
    # Spark's reader reads an int column as bigint, but its schema merge refuses the two.
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"t": ["alpha"], "id": pa.array([7], pa.int32())}),
                   tmp_path / "d" / "a.parquet")
    pq.write_table(pa.table({"t": ["beta"], "id": pa.array([1 << 40], pa.int64()),
                             "s": ["test"]}), tmp_path / "d" / "b.parquet")
    got = records(spark, [Source("x", str(tmp_path / "d"), text_field="t", id_field="id",
                                 split_field="s")]).select("split", "id", "text")
    assert_df_equality(got, spark.createDataFrame(
        [("all", 7, "alpha"), ("test", 1 << 40, "beta")], "split string, id long, text string"),
        ignore_row_order=True, ignore_nullable=True)


def test_a_csv_header_that_repeats_any_column_is_bad_format_naming_it(cli, tmp_path):
    # A repeat of a column no flag names (or two empty names) failed the read with Spark's "CSV
    # header does not conform to the schema" and the hint listing the supported file types.
    write_jsonl(tmp_path / "a.jsonl", [{"func": "alpha"}])
    for header, repeat in (("id,func,x,X", "'x' (x, X)"), ("id,func,,", "''")):
        (tmp_path / "r.csv").write_text(header + "\n1,alpha,p,q\n2,beta,r,s\n", encoding="utf-8")
        rc, _, err = cli("clean", "--test", f"x={tmp_path / 'r.csv'}", "--against",
                         f"a={tmp_path / 'a.jsonl'}", "--text-field", "func", "--out",
                         tmp_path / "out.csv", "--quiet")
        assert rc == 2 and err == (
            f"leakcheck-spark: error [LC_E_BAD_FORMAT]: the header of {tmp_path / 'r.csv'} "
            f"repeats the column {repeat}: its columns cannot be told apart (hint: give each "
            "column of the header its own name)\n"), err
    # A name that ends in its position is no repeat; one empty name (pandas' to_csv writes the
    # index's so) is read, as _cI (Spark's own header check refused it).
    (tmp_path / "r.csv").write_text("id,func,x2,\n1,alpha,p,q\n2,beta,r,s\n", encoding="utf-8")
    rc, _, err = cli("clean", "--test", f"x={tmp_path / 'r.csv'}", "--against",
                     f"a={tmp_path / 'a.jsonl'}", "--text-field", "func", "--out",
                     tmp_path / "out.csv", "--quiet")
    assert rc == 0, err
    assert (tmp_path / "out.csv").read_text(encoding="utf-8") == "id,func,x2,_c3\n2,beta,r,s\n"
    (tmp_path / "p.csv").write_text(",func\n0,alpha\n1,beta\n", encoding="utf-8")
    rc, out, err = cli("audit", "-d", f"x={tmp_path / 'p.csv'}", "-d", f"a={tmp_path / 'a.jsonl'}",
                       "--text-field", "func", "--quiet", "--json", "-")
    assert rc == 0, err
    assert json.loads(out)["split_matrix"]["x/all"]["a/all"] == {"count": 1, "fraction": 0.5}


def test_files_of_a_directory_whose_headers_or_columns_clash_have_a_hint_saying_so(cli, tmp_path):
    # A repeat (or a column differing only in case) in a file other than the one Spark takes the
    # columns from fails in the scan, not where the source is opened: the hint was the list of
    # supported file types.
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.csv").write_text("id,func,x\n1,alpha,p\n", encoding="utf-8")
    (tmp_path / "c" / "b.csv").write_text("id,func,func\n2,beta,q\n", encoding="utf-8")
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"text": ["alpha"]}), tmp_path / "p" / "a.parquet")
    pq.write_table(pa.table({"text": ["beta"], "Text": ["B"]}), tmp_path / "p" / "b.parquet")
    for src, field, hint in (
            ("c", "func", "(hint: every CSV file of a source needs the same header: the same "
                          "names, in the same order, none repeated; give a file with another "
                          "header as a source of its own)\n"),
            ("p", "text", "(hint: read them as two columns with --conf "
                          "spark.sql.caseSensitive=true)\n")):
        rc, _, err = cli("audit", "-d", f"x={tmp_path / src}", "--text-field", field, "--quiet")
        assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: cannot read "
                                          f"{tmp_path / src}/"), err
        assert err.endswith(hint) and len(err.splitlines()) == 1, err


def test_csv_line_endings_are_found_per_file_and_keep_quoted_values(spark, tmp_path):
    # zstd, a header-only file, one without any line break, and a lone CR line ending: each file
    # is read with its own ending, and a quoted CRLF stays CRLF.
    zstd = pytest.importorskip("zstandard")
    files = {"a.csv.zst": zstd.ZstdCompressor().compress(b'i,t\r\n1,"x\r\ny"\r\n'),
             "b.csv": b"i,t\r\n", "c.csv": b"i,t", "d.csv": b'i,t\r2,"p\r\nq\nr"\r'}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = [str(tmp_path / n) for n in files]
    assert [line_ending(spark, p) for p in paths] == ["\r\n", "\r\n", None, "\r"]
    assert_df_equality(read_csv(spark, paths),
                       spark.createDataFrame([("1", "x\r\ny"), ("2", "p\r\nq\nr")],
                                             "i string, t string"),
                       ignore_row_order=True, ignore_nullable=True)


def test_invalid_utf8_in_a_csv_file_is_bad_format_naming_the_line(cli, tmp_path):
    # Spark's CSV reader put U+FFFD in place of invalid bytes, silently: audit hashed altered
    # texts and clean wrote altered rows.  A column that is not read counts (clean writes it),
    # and so do compressed files, CR line endings and the header.
    write_jsonl(tmp_path / "a.jsonl", [{"func": "other"}])
    (tmp_path / "z.csv.gz").write_bytes(gzip.compress(b"id,func,x\n1,ab\xffc,p\n2,beta,q\n"))
    files = {
        "t.csv": (b"id,func,x\n1,alpha,p\n2,ab\xffc,q\n", "line 3", "invalid start byte at "
                  "byte 5 of the line"),
        "u.csv": (b'id,func,x\r1,alpha,"p\rq"\r2,beta,\xc3(\r', "line 4", "invalid continuation "
                  "byte at byte 8 of the line"),
        "h.csv": (b"id,func,x\xe9y\n1,alpha,p\n", "line 1", "invalid continuation byte at byte 10 "
                  "of the line"),
        # A genuine U+FFFD before the invalid byte (the invalid one is still found).
        "g.csv": ("id,func,x\n1,\ufffd,p\n".encode() + b"2,beta,\xed\xa0\x80\n", "line 3",
                  "invalid continuation byte at byte 8 of the line"),
        "z.csv.gz": (None, "line 2", "invalid start byte at byte 5 of the line"),
    }
    hint = ("(hint: CSV files are read as UTF-8: convert the file (e.g. iconv -f ITS-ENCODING -t "
            "UTF-8) or fix the line)\n")
    for name, (data, where, reason) in files.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        src = tmp_path / name
        want = (f"leakcheck-spark: error [LC_E_BAD_FORMAT]: invalid UTF-8 in {where} of {src} "
                f"({reason}) {hint}")
        for argv in (("fingerprint", "-d", f"x={src}"),
                     ("audit", "-d", f"x={src}", "-d", f"a={tmp_path / 'a.jsonl'}"),
                     ("clean", "--test", f"x={src}", "--against", f"a={tmp_path / 'a.jsonl'}",
                      "--out", tmp_path / "out.csv")):
            rc, _, err = cli(*argv, "--text-field", "func", "--quiet")
            assert (rc, err) == (2, want), (name, argv[0])
        assert not (tmp_path / "out.csv").exists()


def test_invalid_utf8_after_a_genuine_one_keeps_read_order_and_max_rows(cli, tmp_path):
    # A genuine U+FFFD in row 1 makes the file a suspect; the invalid byte comes later.  The
    # first problem in the file wins either way, and bytes past --max-rows are not read.
    def run(data: bytes, *flags: str) -> tuple[int, str]:
        (tmp_path / "t.csv").write_bytes("id,func\n1,\ufffd\n".encode() + data)
        rc, _, err = cli("audit", "-d", f"x={tmp_path / 't.csv'}", "--text-field", "func",
                         "--id-field", "id", *flags, "--quiet")
        return rc, err

    rc, err = run(b",beta\n3,ab\xffc\n")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_MISSING_FIELD]: id field "
                                      f"'id' is empty in row 2 of {tmp_path / 't.csv'}"), err
    # Before the bad row (a quoted line break in row 2: the bytes are in row 3, line 5).
    rc, err = run(b'2,"x\ny"\n3,ab\xffc\n,beta\n')
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: invalid UTF-8 "
                                      f"in line 5 of {tmp_path / 't.csv'}"), err
    rc, err = run(b'2,"x\ny"\n3,ab\xffc\n', "--max-rows", "2")
    assert rc == 0, err
    rc, err = run(b'2,"x\ny"\n3,ab\xffc\n', "--max-rows", "3")
    assert rc == 2 and "invalid UTF-8 in line 5 of" in err, err


def test_invalid_utf8_lines_are_counted_as_the_csv_read_splits_them(cli, tmp_path):
    # A lone CR in an LF file, and a lone LF in a CRLF file, are no line breaks to the CSV read.
    write_jsonl(tmp_path / "a.jsonl", [{"func": "other"}])
    for name, data in (("lf.csv", b'id,func\n1,"a\rb\rc"\n2,ab\xffc\n'),
                       ("crlf.csv", b'id,func\r\n1,"a\nb\nc"\r\n2,ab\xffc\r\n')):
        (tmp_path / name).write_bytes(data)
        rc, _, err = cli("audit", "-d", f"x={tmp_path / name}", "-d", f"a={tmp_path / 'a.jsonl'}",
                         "--text-field", "func", "--quiet")
        assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: invalid "
                                          f"UTF-8 in line 3 of {tmp_path / name}"), (name, err)


def test_a_genuine_replacement_character_in_a_csv_file_reads_as_it_is(spark, cli, tmp_path):
    # U+FFFD is valid UTF-8 (EF BF BD): the check for replaced bytes must not refuse it.
    data = "id,func,x\n1,a\ufffdb,p\ufffd\n2,beta,q\n".encode()
    (tmp_path / "g.csv").write_bytes(data)
    write_jsonl(tmp_path / "a.jsonl", [{"func": "beta"}])
    rc, out, err = cli("clean", "--test", f"x={tmp_path / 'g.csv'}", "--against",
                       f"a={tmp_path / 'a.jsonl'}", "--text-field", "func", "--out",
                       tmp_path / "out.csv", "--quiet")
    assert rc == 0, err
    assert (tmp_path / "out.csv").read_bytes() == "id,func,x\n1,a\ufffdb,p\ufffd\n".encode()
    df = records(spark, [Source("x", str(tmp_path / "g.csv"), text_field="func", id_field="id")])
    assert_df_equality(df, spark.createDataFrame(
        [("x", "all", "x/all", "1", 0, "a\ufffdb", None, None),
         ("x", "all", "x/all", "2", 1, "beta", None, None)], SCHEMA_STR),
        ignore_row_order=True, ignore_nullable=True)


def test_a_bad_csv_row_before_invalid_utf8_is_the_error_reported(cli, tmp_path):
    # Errors are reported in read order: an empty id in row 1 comes before the bytes of row 2,
    # and a U+FFFD past --max-rows is not read.
    (tmp_path / "t.csv").write_bytes(b"id,func\n,alpha\n2,ab\xffc\n")
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 't.csv'}", "--text-field", "func",
                     "--id-field", "id", "--quiet")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_MISSING_FIELD]: id field "
                                      f"'id' is empty in row 1 of {tmp_path / 't.csv'}"), err
    (tmp_path / "t.csv").write_bytes(b"id,func\n1,alpha\n2,ab\xffc\n")
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 't.csv'}", "--text-field", "func",
                     "--max-rows", "1", "--quiet")
    assert rc == 0, err


def _write_decimal_files(d) -> None:
    # a stores its decimals as int64 / int32, b as fixed-length bytes (pyarrow's default).
    d.mkdir()
    dec = decimal.Decimal
    pq.write_table(pa.table({
        "t": ["same", "alpha"], "s": ["train", "train"],
        "id": pa.array([dec("12345678.91"), dec("-0.01")], pa.decimal128(10, 2)),
        "lab": pa.array([dec("1.50"), dec("-123.45")], pa.decimal128(5, 2))}),
        d / "a.parquet", store_decimal_as_integer=True)
    pq.write_table(pa.table({
        "t": ["same", "leak"], "s": ["test", "test"],
        "id": pa.array([dec("123456.12345"), dec("-0.00001")], pa.decimal128(11, 5)),
        "lab": pa.array([dec("2.125"), dec("0.001")], pa.decimal128(4, 3))}), d / "b.parquet")


def test_parquet_decimals_of_several_precisions_are_read_as_one_that_holds_both(
        spark, cli, tmp_path):
    # decimal(10,2) in one file and decimal(11,5) in another were LC_E_BAD_FORMAT.  Spark's reader
    # reads either (stored as int32, int64 or bytes) as decimal(13,5): 8 digits before the point,
    # 5 after.  clean writes the values back; audit reports them as ids and labels.
    _write_decimal_files(tmp_path / "d")
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    out = tmp_path / "kept.parquet"
    rc, _, err = cli("clean", "--test", f"t={tmp_path / 'd'}", "--against",
                     f"a={tmp_path / 'a.txt'}", "--text-field", "t", "-o", "t.id=id", "--out", out,
                     "--quiet")
    assert rc == 0, err
    dec = decimal.Decimal
    assert_df_equality(spark.read.parquet(str(out)), spark.createDataFrame(
        [("same", "train", dec("12345678.91"), dec("1.5")),
         ("alpha", "train", dec("-0.01"), dec("-123.45")),
         ("same", "test", dec("123456.12345"), dec("2.125"))],
        "t string, s string, id decimal(13,5), lab decimal(6,3)"), ignore_row_order=True,
        ignore_nullable=True)
    rc, got, err = cli("audit", "-d", f"x={tmp_path / 'd'}", "--text-field", "t", "--id-field",
                       "id", "--label-field", "lab", "--split-field", "s", "--quiet", "--json", "-")
    assert rc == 0, err
    report = json.loads(got)
    assert sorted((o["id"], o["match_ids"]) for o in report["overlaps"]["sample"]) == [
        ("123456.12345", ["12345678.91000"]), ("12345678.91000", ["123456.12345"])]
    assert report["label_conflicts"]["sample"][0]["members"] == [
        {"group": "x/test", "id": "123456.12345", "label": "2.125"},
        {"group": "x/train", "id": "12345678.91000", "label": "1.500"}]


@pytest.mark.parametrize("a, b, was, got", [
    # No decimal holds 38 digits before the point and 10 after.
    (pa.array([1], pa.decimal128(38, 0)), pa.array([0], pa.decimal128(12, 10)), "decimal(38,0)",
     "decimal(12,10)"),
    # Spark reads either as the other, but as its UTC wall clock, not in the session's time zone
    # (a cast's rule): one file's values would shift.
    (pa.array([0], pa.timestamp("us", tz="UTC")), pa.array([0], pa.timestamp("us")),
     "timestamp", "timestamp_ntz"),
])
def test_parquet_decimals_or_timestamps_no_type_holds_are_bad_format(cli, tmp_path, a, b, was,
                                                                      got):
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"t": ["alpha"], "c": a}), tmp_path / "d" / "a.parquet")
    pq.write_table(pa.table({"t": ["beta"], "c": b}), tmp_path / "d" / "b.parquet")
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 'd'}", "--text-field", "t", "--quiet")
    assert rc == 2 and err == (
        f"leakcheck-spark: error [LC_E_BAD_FORMAT]: cannot read {tmp_path / 'd' / 'b.parquet'}: "
        f"its column 'c' is {got}, but {was} in the files of the source before it (by path) "
        f"(hint: {TYPE_CLASH_HINT})\n"), err


def test_parquet_struct_fields_are_matched_by_name_by_sparks_case_rule(spark, cli, tmp_path):
    # Nested names were told apart by case, while Spark's reader matches them as top-level ones
    # (by case only under spark.sql.caseSensitive): s.A and s.a of two files read as two fields,
    # which failed as "two columns named 'a' but for case".
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"t": ["alpha"], "s": pa.array([{"A": 1, "u": "x"}], pa.struct(
        [("A", pa.int32()), ("u", pa.string())]))}), tmp_path / "d" / "a.parquet")
    pq.write_table(pa.table({"t": ["beta"], "s": pa.array([{"a": 1 << 40}], pa.struct(
        [("a", pa.int64())]))}), tmp_path / "d" / "b.parquet")
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    for case, schema, rows in (
            ("false", "t string, s struct<A:bigint, u:string>",
             [("alpha", (1, "x")), ("beta", (1 << 40, None))]),
            ("true", "t string, s struct<A:int, u:string, a:bigint>",
             [("alpha", (1, "x", None)), ("beta", (None, None, 1 << 40))])):
        out = tmp_path / f"kept-{case}.parquet"
        with spark_conf(spark, **{"spark.sql.caseSensitive": case}):
            rc, _, err = cli("clean", "--test", f"t={tmp_path / 'd'}", "--against",
                             f"a={tmp_path / 'a.txt'}", "--text-field", "t", "--out", out,
                             "--quiet")
            assert rc == 0, err
            # (Spark reads s.A and s.a of the output as two fields only under this setting.)
            assert_df_equality(spark.read.parquet(str(out)), spark.createDataFrame(rows, schema),
                               ignore_row_order=True, ignore_nullable=True)


def test_a_parquet_file_without_the_id_column_is_an_error_naming_it(spark, cli, tmp_path):
    # Its rows read null ids, reported as "id field 'id' is empty in row 1 of b.parquet": a value
    # to look for in a row, where the file lacks the column.
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"t": ["alpha"], "id": [1]}), tmp_path / "d" / "a.parquet")
    pq.write_table(pa.table({"t": ["beta", "gamma"], "k": [2, 3]}), tmp_path / "d" / "b.parquet")
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 'd'}", "--text-field", "t", "--id-field", "id",
                     "--quiet")
    assert rc == 2 and err == (
        "leakcheck-spark: error [LC_E_MISSING_FIELD]: id field 'id' not in "
        f"{tmp_path / 'd' / 'b.parquet'} (columns: t, k), one of the files of "
        f"x={tmp_path / 'd'} (hint: give every file of a source the same columns)\n"), err
    # A file with the column (by Spark's case rule), a value of it null: that row's id is empty.
    pq.write_table(pa.table({"t": ["beta", "gamma"], "ID": pa.array([2, None], pa.int64())}),
                   tmp_path / "d" / "b.parquet")
    rc, _, err = cli("audit", "-d", f"x={tmp_path / 'd'}", "--text-field", "t", "--id-field", "id",
                     "--quiet")
    assert rc == 2 and err.startswith(
        "leakcheck-spark: error [LC_E_MISSING_FIELD]: id field 'id' is empty in row 2 of "
        f"{tmp_path / 'd' / 'b.parquet'}"), err


def test_many_files_are_looked_up_by_a_few_tasks_and_a_sessions_own_setting_is_kept(spark,
                                                                                    tmp_path):
    # Spark looks up more than 32 given paths in a job of one task per path (up to 10,000);
    # the read spreads them over two tasks per core (at least 8), unless the session says.
    from leakcheck_spark.sources import _LISTING, read_source

    for i in range(40):
        write_jsonl(tmp_path / f"f{i:02d}.jsonl", [{"t": f"text {i}"}])
    src = Source("d", str(tmp_path), text_field="t")
    tracker = spark.sparkContext.statusTracker()

    def listing_tasks() -> list[int]:
        before = set(tracker.getJobIdsForGroup())
        read_source(spark, src, 0).unpersist()
        stages = [tracker.getStageInfo(s) for j in sorted(set(tracker.getJobIdsForGroup()) - before)
                  for s in tracker.getJobInfo(j).stageIds]
        # The lookup job is the one the reader's call starts (the listing before it collects).
        return [s.numTasks for s in stages if s.name.startswith("text at ")]

    assert listing_tasks() == [max(8, 2 * spark.sparkContext.defaultParallelism)]
    assert spark.conf.get(_LISTING, None) is None  # set for the read only
    with spark_conf(spark, **{_LISTING: "3"}):
        assert listing_tasks() == [3]


def test_the_records_of_many_sources_are_numbered_by_one_join(spark, tmp_path):
    # A table of blocks per source made every query over the records broadcast each apart
    # (a job per source and query: ~20 s a query with 64 sources).
    from leakcheck_spark.audit import keyed

    srcs = []
    for i in range(4):
        write_jsonl(tmp_path / f"s{i}.jsonl", [{"t": f"text {i}", "id": i}, {"t": "same"}][:2 - i % 2])
        srcs.append(Source(f"d{i % 2}", str(tmp_path / f"s{i}.jsonl"), split=f"s{i}", text_field="t",
                           id_field="id" if i % 2 else None))
    records, frames, _ = read_records(spark, srcs, Options(), derived=keyed(Options()))
    try:
        plan = records._jdf.queryExecution().executedPlan().toString()
        assert plan.count("BroadcastExchange") == 1, plan
        got = sorted((r.group, r.id, r.row, r.id_num) for r in records.collect())
        assert got == [("d0/s0", 0, 0, 0), ("d0/s0", 1, 1, 1), ("d0/s2", 2, 2, 2),
                       ("d0/s2", 3, 3, 3), ("d1/s1", 1, 0, 1), ("d1/s3", 3, 1, 3)]
    finally:
        for frame in frames:
            frame.unpersist()


def test_errors_about_a_file_in_a_folder_with_a_space_name_it_and_find_what_is_wrong(cli,
                                                                                       tmp_path):
    # Spark names a row's file URL-encoded ("in%20put"): the messages showed that name, and the
    # checks that read the file again (its invalid bytes, its bad row's line, its line ending)
    # found no such file and said so instead of what is wrong with it.
    d = tmp_path / "in put+%41"
    d.mkdir()
    files = {
        "bad.csv": (b"id,func\n1,ab\xffc\n2,ok\n", "LC_E_BAD_FORMAT",
                    "invalid UTF-8 in line 2 of {p} (invalid start byte at byte 5 of the line)"),
        "mal.csv": (b"id,func\n1,abc\n2,ok,extra\n", "LC_E_BAD_FORMAT",
                    "line 3 of {p} has 3 fields, its header has 2"),
        "cr.jsonl": (b'{"func": "a"}\r{"func": "b"}\r', "LC_E_BAD_FORMAT",
                     "the lines of {p} end with a lone CR"),
        "t.jsonl.gz": (gzip.compress(b'{"func": "a"}\n' * 50)[:30], "LC_E_BAD_FORMAT",
                       "cannot read {p}: EOFException"),
        "missing.jsonl": (None, "LC_E_IO", "no such file or directory: {p} (hint"),
    }
    for name, (data, code, needle) in files.items():
        path = d / name
        if data is not None:
            path.write_bytes(data)
        rc, _, err = cli("audit", "-d", f"x={path}", "--text-field", "func", "--quiet")
        assert rc == 2 and f"[{code}]" in err and needle.format(p=path) in err, err
    (d / "ok.jsonl").write_text('{"func": "a"}\n')
    rc, _, err = cli("clean", "--test", f"x={d / 'bad.csv'}", "--against", f"y={d / 'ok.jsonl'}",
                     "--text-field", "func", "--out", tmp_path / "o.csv")
    assert rc == 2 and f"in line 2 of {d / 'bad.csv'} (invalid start" in err, err
    assert f"gzip -t '{d / 't.jsonl.gz'}'" in cli("audit", "-d", f"x={d / 't.jsonl.gz'}",
                                                  "--text-field", "func")[2]
    for bad in ("bad.csv", "mal.csv", "t.jsonl.gz", "cr.jsonl"):
        (d / bad).unlink()
    rc, _, err = cli("audit", "-d", f"x={d / 'ok.jsonl'}", "-d", f"x={d}", "--text-field", "func")
    assert rc == 2 and f"both read {d / 'ok.jsonl'}: its records" in err, err


def test_listed_files_named_like_a_glob_are_read_as_themselves(cli, tmp_path):
    # Spark takes a path with [, {, * ... for a glob pattern: the listed a[1].jsonl was read as
    # a1.jsonl (twice over, and its own records never), silently.  Each file here holds its own
    # text, so any file read in another's place shows as a copy.
    d = tmp_path / "in"
    d.mkdir()
    for name in ("a[1].jsonl", "a1.jsonl", "b{1}.json", "b1.json"):
        row = {"func": f"text of {name}"}
        (d / name).write_text(json.dumps([row] if name.endswith(".json") else row) + "\n")
    for name in ("c[1].parquet", "c1.parquet"):
        pq.write_table(pa.table({"func": [f"text of {name}"], name[:2]: [1]}), d / name)
    # CSV too, though Spark's multi-line CSV reader finds such a file only when given its
    # columns (its inference globs the path again, escaped or not).
    for name, ending in (("e{1}.csv", "\r\n"), ("e1.csv", "\n"), ("f[1].csv", "\n")):
        (d / name).write_bytes(f'func,n{ending}"text of{ending}{name}",1{ending}'.encode())
    out = tmp_path / "out"
    rc, _, err = cli("audit", "-d", f"x={d}", "--text-field", "func", "--out-dir", out,
                     "--quiet")
    assert rc == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["groups"]["x/all"]["records"] == 9
    assert report["split_matrix"]["x/all"]["x/all"]["count"] == 0
    # (A path given with them is a glob, as documented: clean reads the folder.)
    t = tmp_path / "t"
    t.mkdir()
    (d / "a[1].jsonl").rename(t / "a[1].jsonl")
    (t / "a1.jsonl").write_text('{"func": "text of b1.json"}\n')
    rc, _, _ = cli("clean", "--test", f"x={t}", "--against", f"y={d}", "--text-field", "func",
                   "--out", tmp_path / "o.jsonl")
    assert rc == 0 and (tmp_path / "o.jsonl").read_text() == '{"func": "text of a[1].jsonl"}\n'
    # The CSV rows as read, each value as in its file (a quoted CRLF kept), in path order.
    rc, _, err = cli("clean", "--test", f"x={d}/e*.csv", "--against", f"y={t}", "--text-field",
                     "func", "--out", tmp_path / "o.csv")
    assert rc == 0, err
    assert (tmp_path / "o.csv").read_bytes() == (
        b'func,n\n"text of\ne1.csv",1\n"text of\r\ne{1}.csv",1\n')
    # A SOURCE holding them is a pattern (as documented): one that matches nothing, beside a
    # file of that very name, says how to name the file itself, and that way reads it.
    z = tmp_path / "z"
    z.mkdir()
    write_jsonl(z / "z[9].jsonl", [{"func": "zed"}])
    rc, _, err = cli("audit", "-d", f"x={z / 'z[9].jsonl'}", "--text-field", "func",
                     "--out-dir", out)
    assert rc == 2 and "so it is a pattern: to name a file whose name holds them, put a " \
        "backslash before each" in err, err
    rc, _, err = cli("audit", "-d", f"x={z}/z\\[9\\].jsonl", "--text-field", "func",
                     "--out-dir", tmp_path / "out2", "--quiet")
    assert rc == 0, err
