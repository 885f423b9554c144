"""clean: kept rows as read (byte-identical JSONL), reasons, --dedup, --drop-conflicts, report."""

from __future__ import annotations

import csv
import datetime
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import spark_conf, write_csv_endings, write_jsonl


def test_clean_jsonl_byte_identical_with_every_reason(cli, tmp_path):
    test_lines = [
        '{"id": 1, "func": "int a(){}", "label": 0}',            # against (in train)
        '{"func": "int b(){}",   "id": 2, "label": 1}',           # kept
        '{"id": 3, "func": "int  b() {}", "label": 1}\r',        # duplicate of 2 (CRLF line)
        '{"id": 4, "func": "int c(){}", "label": "1"}',           # conflict: 7 says 0
        '{"id": 5, "func": "int e(){}", "label": true}',          # kept
        '{"id": 6, "func": "", "label": 0}',                      # empty: kept
        '{"id": 7, "func": "int c(){}", "label": 0}',             # duplicate of 4
    ]
    (tmp_path / "test.jsonl").write_text("\n".join(test_lines) + "\n", encoding="utf-8")
    write_jsonl(tmp_path / "train.jsonl", [
        {"id": 10, "func": "int a() {}", "label": 0}, {"id": 11, "func": "int d(){}", "label": 0},
        {"id": 12, "func": "int z(){}", "label": " 1"}])
    out = tmp_path / "clean.jsonl"
    report = tmp_path / "dropped.json"
    code, stdout, _ = cli("clean", "--test", f"t:test={tmp_path / 'test.jsonl'}",
                          "--against", f"tr:train={tmp_path / 'train.jsonl'}",
                          "--text-field", "func", "--label-field", "label", "--id-field", "id",
                          "--dedup", "--drop-conflicts", "--out", out, "--report", report)
    assert code == 0
    assert "kept 3, dropped 4 (against 1, duplicate 2, conflict 1)" in stdout
    kept = out.read_bytes().decode("utf-8").split("\n")
    assert kept == [test_lines[1], test_lines[4], test_lines[5], ""]
    rep = json.loads(report.read_text())
    assert rep["counts"] == {"kept": 3, "dropped": 4, "against": 1, "duplicate": 2, "conflict": 1}
    assert rep["dropped"] == [
        {"id": 1, "reason": "against", "match_ids": [10], "similarity": 1.0},
        {"id": 3, "reason": "duplicate", "match_ids": [2], "similarity": 1.0},
        {"id": 4, "reason": "conflict", "match_ids": [7]},
        {"id": 7, "reason": "duplicate", "match_ids": [4], "similarity": 1.0},
    ]


def test_clean_without_dedup_keeps_repeats(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [{"f": "x"}, {"f": "x"}, {"f": "y"}])
    write_jsonl(tmp_path / "a.jsonl", [{"f": "y"}])
    out = tmp_path / "o.jsonl"
    code, stdout, _ = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                          f"a={tmp_path / 'a.jsonl'}", "--text-field", "f", "--out", out)
    assert code == 0 and "kept 2, dropped 1 (against 1)" in stdout
    assert out.read_text() == '{"f": "x"}\n{"f": "x"}\n'


def test_clean_of_jsonl_with_a_bom_keeps_its_first_line_without_the_bom(cli, tmp_path):
    # The BOM marks the start of the file, not of the record: a kept line is the line as written
    # after it, so the output never holds a BOM in the middle (the first kept line need not be
    # the first input line) and stays plain UTF-8 like every other output.
    lines = ['{"id": "k1", "t": "int z;"}', '{"id": "k2", "t": "int  z;"}', '{"id": "k3", "t": "a"}']
    (tmp_path / "t.jsonl").write_bytes(("\ufeff" + "\n".join(lines) + "\n").encode("utf-8"))
    (tmp_path / "a.txt").write_text("a\n", encoding="utf-8")
    out, report = tmp_path / "o.jsonl", tmp_path / "r.json"
    code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                     f"a={tmp_path / 'a.txt'}", "--text-field", "t", "--id-field", "id",
                     "-o", "a.id=", "--dedup", "--out", out, "--report", report)
    assert code == 0 and out.read_bytes() == (lines[0] + "\n").encode("utf-8")
    assert json.loads(report.read_text())["dropped"] == [  # k1 read with its key and id
        {"id": "k2", "reason": "duplicate", "match_ids": ["k1"], "similarity": 1.0},
        {"id": "k3", "reason": "against", "match_ids": [0], "similarity": 1.0}]


def test_clean_report_gives_each_matching_id_the_type_its_dataset_has(cli, tmp_path):
    # Integer ids beside string ids share a column of strings; the report still gives 4 for the
    # dataset of integer ids and "4" for the other (before: "4" twice), integer ids first, and
    # a duplicate's id as the test split has it.
    write_jsonl(tmp_path / "t.jsonl", [{"id": 1, "f": "int a;"}, {"id": 2, "f": "int c;"},
                                       {"id": 3, "f": "int c;"}])
    write_jsonl(tmp_path / "n.jsonl", [{"id": 4, "f": "int a;"}])
    write_jsonl(tmp_path / "s.jsonl", [{"id": "4", "f": "int a;"}])
    report = tmp_path / "r.json"
    code, _, err = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}",
                       "--against", f"n={tmp_path / 'n.jsonl'}",
                       "--against", f"s={tmp_path / 's.jsonl'}", "--text-field", "f",
                       "--id-field", "id", "--dedup", "--out", tmp_path / "o.jsonl",
                       "--report", report)
    assert code == 0, err
    assert json.loads(report.read_text())["dropped"] == [
        {"id": 1, "reason": "against", "match_ids": [4, "4"], "similarity": 1.0},
        {"id": 3, "reason": "duplicate", "match_ids": [2], "similarity": 1.0}]


def test_clean_csv_keeps_columns_and_values(cli, tmp_path):
    rows = [["id", "text", "note"], ["1", 'say "hi"\nthere', "a,b"], ["2", "leak", ""],
            ["3", "fine", "z"]]
    with open(tmp_path / "t.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    out = tmp_path / "o.csv"
    code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.csv'}", "--against",
                     f"a={tmp_path / 'a.txt'}", "--text-field", "text", "--out", out)
    assert code == 0
    with open(out, newline="", encoding="utf-8") as fh:
        assert list(csv.reader(fh)) == [rows[0], rows[1], rows[3]]


def test_clean_parquet_keeps_schema_and_order(spark, cli, tmp_path):
    # Timestamps keep their microseconds and their type, with a time zone or without.
    when = [datetime.datetime(2024, 1, 2, 3, 4, 5, 123456 + i) for i in range(5)]
    table = pa.table({"k": pa.array([5, 4, 3, 2, 1], pa.int32()),
                      "src": ["a", "b", "leak", "c", "d"], "y": [True, False, True, None, False],
                      "ts": pa.array(when, pa.timestamp("us")),
                      "tz": pa.array(when, pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, tmp_path / "t.parquet")
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    kept = [r for r in table.to_pylist() if r["src"] != "leak"]
    for name in ("o.parquet", "o.csv", "o.jsonl"):
        out = tmp_path / name
        code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.parquet'}", "--against",
                         f"a={tmp_path / 'a.txt'}", "--text-field", "src", "--out", out)
        assert code == 0
        if name == "o.parquet":
            got = pq.read_table(out)
            assert got.schema.names == table.schema.names
            assert [f.type for f in got.schema] == [f.type for f in table.schema]
            assert got.to_pylist() == kept
            continue
        with open(out, newline="", encoding="utf-8") as fh:
            rows = (list(csv.DictReader(fh)) if name == "o.csv"
                    else [json.loads(line) for line in fh])
        assert [(datetime.datetime.fromisoformat(r["ts"]), datetime.datetime.fromisoformat(r["tz"]))
                for r in rows] == [(r["ts"], r["tz"]) for r in kept], name
    # A session that sets how Parquet stores timestamps (an old reader's INT96) keeps its choice.
    with spark_conf(spark, **{"spark.sql.parquet.outputTimestampType": "INT96"}):
        code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.parquet'}", "--against",
                         f"a={tmp_path / 'a.txt'}", "--text-field", "src", "--out",
                         tmp_path / "old.parquet")
    assert code == 0 and pq.read_table(tmp_path / "old.parquet").schema.field("tz").type == (
        pa.timestamp("ns"))


def test_clean_writes_nulls_as_json_so_that_its_output_reads_back(spark, cli, tmp_path):
    # Spark's JSON writer leaves a null field out: a kept row with a null text came back without
    # its text field, which a source refuses (LC_E_MISSING_FIELD).  Nulls are written, unless the
    # session asks Spark to leave them out.
    pq.write_table(pa.table({"id": [1, 2, 3], "t": ["a", None, "leak"], "y": [None, 1, 0]}),
                   tmp_path / "t.parquet")
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")

    def clean(test: Path, out: Path) -> list[dict]:
        code, _, err = cli("clean", "--test", f"t={test}", "--against", f"a={tmp_path / 'a.txt'}",
                           "--text-field", "t", "--format", "json", "--out", out)
        assert code == 0, err
        files = sorted(out.glob("part-*.json")) if out.is_dir() else [out]
        return [json.loads(line) for f in files for line in f.read_text("utf-8").splitlines()]

    for out in (tmp_path / "o.jsonl", tmp_path / "dir"):
        want = [{"id": 1, "t": "a", "y": None}, {"id": 2, "t": None, "y": 1}]
        assert clean(tmp_path / "t.parquet", out) == want
        assert clean(out, tmp_path / f"again-{out.name}.jsonl") == want
    with spark_conf(spark, **{"spark.sql.jsonGenerator.ignoreNullFields": "true"}):
        assert clean(tmp_path / "t.parquet", tmp_path / "s.jsonl") == [{"id": 1, "t": "a"},
                                                                        {"id": 2, "y": 1}]


def test_clean_to_a_directory_in_format(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [{"f": "x", "n": 1}, {"f": "y", "n": 2}])
    write_jsonl(tmp_path / "a.jsonl", [{"f": "y"}])
    out = tmp_path / "outdir"
    code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                     f"a={tmp_path / 'a.jsonl'}", "--text-field", "f", "--out", out)
    assert code == 0
    assert pq.read_table(out).to_pylist() == [{"f": "x", "n": 1}]


def test_an_out_named_like_a_file_that_is_written_as_a_directory_says_so(cli, tmp_path):
    # `--out X.json` is a directory of Parquet part files (SPEC: only some endings are one
    # file), which nothing said; .ndjson.gz is one file, as .ndjson and .jsonl.gz are.
    write_jsonl(tmp_path / "t.jsonl", [{"f": "x"}, {"f": "y"}])
    write_jsonl(tmp_path / "a.jsonl", [{"f": "y"}])
    for name, one_file in (("o.json", False), ("o.ndjson.gz", True), ("rows", False)):
        code, _, err = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                           f"a={tmp_path / 'a.jsonl'}", "--text-field", "f", "--quiet",
                           "--out", tmp_path / name)
        assert code == 0 and (tmp_path / name).is_file() == one_file, err
        said = (f"leakcheck-spark: --out {tmp_path / name} will be a directory of parquet part "
                "files: a name ending in .jsonl, .jsonl.gz, .ndjson, .ndjson.gz, .csv, .csv.gz, "
                ".parquet is one file\n")
        assert err == (said if name == "o.json" else ""), err
    assert gzip.decompress((tmp_path / "o.ndjson.gz").read_bytes()) == b'{"f": "x"}\n'


def test_clean_of_json_lines_to_a_table_at_a_path_with_glob_characters(cli, tmp_path):
    # Kept JSON lines become a table through a staging folder beside --out, read back for its
    # columns: a path with [ or { was taken for a glob there, and the run failed naming the
    # staging folder.
    write_jsonl(tmp_path / "t.jsonl", [{"f": "x", "n": 1}, {"f": "y", "n": 2}])
    write_jsonl(tmp_path / "a.jsonl", [{"f": "y"}])
    for out in (tmp_path / "o[1]", tmp_path / "g{a}" / "o", tmp_path / "o[2].parquet"):
        code, _, err = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                           f"a={tmp_path / 'a.jsonl'}", "--text-field", "f", "--out", out)
        assert code == 0, err
        assert pq.read_table(out).to_pylist() == [{"f": "x", "n": 1}]


def test_clean_to_a_json_directory_writes_json_part_files_it_can_read_back(cli, tmp_path):
    # The kept JSON lines are written as they are, in part files named .json (not Spark's text
    # writer's .txt: a .txt line is plain text, so reading the output back would take each whole
    # JSON line for the text).
    lines = ['{"f": "x",  "n": 1}', '{"f": "y", "n": 2}', '{"f": "z", "n": 3}']
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_jsonl(tmp_path / "a.jsonl", [{"f": "y"}])
    out = tmp_path / "outdir"
    code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                     f"a={tmp_path / 'a.jsonl'}", "--text-field", "f", "--format", "json",
                     "--out", out)
    assert code == 0
    parts = sorted(out.glob("part-*"))
    assert parts and all(p.suffix == ".json" for p in parts)
    # No stale checksum file of a .txt part that is not there any more.
    assert not [p.name for p in out.iterdir() if ".txt" in p.name]
    assert "".join(p.read_text(encoding="utf-8") for p in parts).splitlines() == [lines[0],
                                                                                   lines[2]]
    again = tmp_path / "again.jsonl"
    code, _, err = cli("clean", "--test", f"t={out}", "--against", f"a={tmp_path / 'a.jsonl'}",
                       "--text-field", "f", "-o", "t.id=n", "--out", again)
    assert code == 0, err
    assert again.read_text(encoding="utf-8").splitlines() == [lines[0], lines[2]]


def test_clean_of_json_lines_to_a_directory_keeps_input_order(spark, cli, tmp_path):
    # Kept JSON lines become columns through Spark's JSON reader, which reads a directory of part
    # files largest first: the rows of a directory output must still come in input order, on
    # every partitioning (AQE would coalesce this small input into one partition, one file).
    rows = [{"f": f"text {i}", "n": i, "pad": "x" * (i * 7 % 23)} for i in range(40)]
    write_jsonl(tmp_path / "t.jsonl", rows)
    write_jsonl(tmp_path / "a.jsonl", [{"f": "text 3"}, {"f": "text 17"}])
    expected = [r for r in rows if r["n"] not in (3, 17)]
    for fmt, partitions in (("parquet", 5), ("csv", 7), ("parquet", 1)):
        out = tmp_path / f"out-{fmt}-{partitions}"
        with spark_conf(spark, **{"spark.sql.shuffle.partitions": partitions,
                                  "spark.sql.adaptive.coalescePartitions.enabled": False}):
            code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                             f"a={tmp_path / 'a.jsonl'}", "--text-field", "f", "--format", fmt,
                             "--out", out)
        assert code == 0
        parts = sorted(out.glob("part-*"))
        if fmt == "csv":
            got = [{"f": r["f"], "n": int(r["n"]), "pad": r["pad"]} for part in parts
                   for r in csv.DictReader(open(part, newline="", encoding="utf-8"))]
        else:
            got = [r for part in parts for r in pq.read_table(part).to_pylist()]
        assert got == expected, (fmt, partitions)


def test_clean_gzipped_jsonl_and_json_list_inputs(cli, tmp_path):
    import gzip

    lines = ['{"f": "keep me", "n": 1}', '{"f": "drop", "n": 2}', '{"f": "also kept", "n": 3}']
    with gzip.open(tmp_path / "t.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    (tmp_path / "a.txt").write_text("drop\n", encoding="utf-8")
    out = tmp_path / "o.jsonl.gz"
    code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.jsonl.gz'}", "--against",
                     f"a={tmp_path / 'a.txt'}", "--text-field", "f", "--out", out)
    assert code == 0
    with gzip.open(out, "rt", encoding="utf-8") as fh:
        assert fh.read() == lines[0] + "\n" + lines[2] + "\n"
    # A .json list: kept objects come back one per line, with their fields and values.
    (tmp_path / "t.json").write_text(json.dumps([json.loads(x) for x in lines]), encoding="utf-8")
    out2 = tmp_path / "o2.jsonl"
    code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.json'}", "--against",
                     f"a={tmp_path / 'a.txt'}", "--text-field", "f", "--out", out2)
    assert code == 0
    assert [json.loads(x) for x in out2.read_text().splitlines()] == [
        {"f": "keep me", "n": 1}, {"f": "also kept", "n": 3}]


def test_clean_failure_leaves_no_output(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [{"f": "x"}])
    (tmp_path / "a.jsonl").write_text('{"f": "y"}\n{"f": \n', encoding="utf-8")
    out = tmp_path / "o.jsonl"
    code, _, stderr = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                          f"a={tmp_path / 'a.jsonl'}", "--text-field", "f", "--out", out,
                          "--report", tmp_path / "r.json")
    assert code == 2 and "LC_E_BAD_FORMAT" in stderr and "line 2 of" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "t.jsonl"]


def test_clean_of_a_fully_leaked_jsonl_split_writes_its_columns(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [{"f": "x", "n": 1}, {"f": "y", "n": 2}])
    write_jsonl(tmp_path / "a.jsonl", [{"f": "x"}, {"f": "y"}])
    for name in ("o.csv", "o.parquet", "outdir"):
        out = tmp_path / name
        code, stdout, stderr = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                                   f"a={tmp_path / 'a.jsonl'}", "--text-field", "f",
                                   "--out", out)
        assert (code, stderr.count("error")) == (0, 0)
        assert "kept 0, dropped 2 (against 2)" in stdout
    assert (tmp_path / "o.csv").read_text() == "f,n\n"
    for name in ("o.parquet", "outdir"):
        got = pq.read_table(tmp_path / name)
        assert (got.schema.names, got.num_rows) == (["f", "n"], 0)


def test_clean_jsonl_with_nested_values_to_one_csv_file(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [{"f": "x", "m": {"a": 1}, "l": [1, 2]},
                                       {"f": "y", "m": {"a": 2}, "l": [3]}])
    write_jsonl(tmp_path / "a.jsonl", [{"f": "y"}])
    out = tmp_path / "o.csv"
    code, _, stderr = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                          f"a={tmp_path / 'a.jsonl'}", "--text-field", "f", "--out", out)
    assert (code, stderr.count("error")) == (0, 0)
    with open(out, newline="", encoding="utf-8") as fh:  # as a directory --format csv has them
        assert list(csv.reader(fh)) == [["f", "m", "l"], ["x", '{"a":1}', "[1,2]"]]


def test_clean_jsonl_to_columns_keeps_the_order_keys_first_appear_in(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [
        {"id": 1, "text": "a", "label": 0}, {"id": 2, "text": "leak", "label": 1, "src": "x"},
        {"zz": True, "id": 3, "label": 1, "text": "b"}, {"id": 4, "text": "c", "label": 0}])
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    for name in ("o.csv", "o.parquet", "odir"):
        out = tmp_path / name
        code, _, stderr = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                              f"a={tmp_path / 'a.txt'}", "--text-field", "text", "--out", out,
                              "--format", "parquet")
        assert (code, stderr.count("error")) == (0, 0), stderr
        # `src` only came with a dropped row; `zz` first appears after the others.
        names = (next(csv.reader(out.open(encoding="utf-8"))) if name == "o.csv"
                 else pq.read_table(out).schema.names)
        assert names == ["id", "text", "label", "zz"]


def test_clean_to_csv_of_odd_column_names_nested_and_binary_values(cli, tmp_path):
    # A column "a.b" was taken for field b of a, and "c`d" for a broken name ("unexpected
    # failure"); a nested value came out of Spark's inferred struct (keys sorted, [1, "x"] as
    # strings) instead of its JSON; bytes came out as "[00 FF]" (JSON outputs write base64).
    write_jsonl(tmp_path / "t.jsonl", [
        {"id": 1, "text": "x", "a.b": "y", "c`d": 1, "m": {"z": 1, "a": [1, "x"]}},
        {"id": 2, "text": "leak", "a.b": "q", "c`d": 2, "m": None}])
    pq.write_table(pa.table({"text": ["x", "leak"], "a.b": ["y", "q"],
                             "bin": [b"\x00\xff", b"\x01"]}), tmp_path / "t.parquet")
    write_jsonl(tmp_path / "a.jsonl", [{"text": "leak"}])
    for test, want in (
            ("t.jsonl", {"id": "1", "text": "x", "a.b": "y", "c`d": "1",
                         "m": '{"z":1,"a":[1,"x"]}'}),
            ("t.parquet", {"text": "x", "a.b": "y", "bin": "AP8="})):
        out = tmp_path / f"{test}.csv"
        code, _, err = cli("clean", "--test", f"t={tmp_path / test}", "--against",
                           f"a={tmp_path / 'a.jsonl'}", "--text-field", "text", "--out", out)
        assert code == 0, err
        with open(out, newline="", encoding="utf-8") as fh:
            assert list(csv.DictReader(fh)) == [want]


def test_clean_to_csv_keeps_whitespace_around_values(cli, tmp_path):
    rows = [["id", "text"], ["1", "  lead and trail  "], ["2", "\tint f() {}\n"], ["3", "   "],
            ["4", "leak"]]
    with open(tmp_path / "t.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    for out in (tmp_path / "o.csv", tmp_path / "odir"):
        code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.csv'}", "--against",
                         f"a={tmp_path / 'a.txt'}", "--text-field", "text", "--out", out,
                         "--format", "csv")
        assert code == 0
        path = out if out.suffix else next(out.glob("part-*.csv"))
        with open(path, newline="", encoding="utf-8") as fh:
            assert list(csv.reader(fh)) == rows[:4]


def test_clean_of_crlf_txt_lines_writes_their_text(cli, tmp_path):
    (tmp_path / "t.txt").write_bytes(b"keep one\r\nleak\r\nkeep two \r\n")
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    code, _, _ = cli("clean", "--test", f"t={tmp_path / 't.txt'}", "--against",
                     f"a={tmp_path / 'a.txt'}", "--out", out)
    assert code == 0
    assert [json.loads(x) for x in out.read_text().splitlines()] == [
        {"text": "keep one"}, {"text": "keep two "}]


def test_clean_jsonl_keys_that_differ_in_case_are_two_columns(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [{"t": "x", "T": "upper"}, {"t": "leak", "T": "u"}])
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    out = tmp_path / "o.parquet"
    code, _, stderr = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                          f"a={tmp_path / 'a.txt'}", "--text-field", "t", "--out", out)
    assert (code, stderr.count("error")) == (0, 0), stderr
    assert pq.read_table(out).to_pylist() == [{"t": "x", "T": "upper"}]
    assert pq.read_table(out).schema.names == ["t", "T"]
    # Read back only when told that case matters: said, for a table (a JSON line keeps both).
    assert ("leakcheck-spark: columns 't' and 'T' differ only in case: Spark reads this output "
            "back only with --conf spark.sql.caseSensitive=true\n") in stderr
    code, _, stderr = cli("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
                          f"a={tmp_path / 'a.txt'}", "--text-field", "t", "--out",
                          tmp_path / "o.jsonl")
    assert code == 0 and "differ only in case" not in stderr, stderr


def test_drop_conflicts_without_any_label_field_is_a_usage_error(cli, tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [{"f": "x", "label": 1}])
    write_jsonl(tmp_path / "a.jsonl", [{"f": "x", "label": 0}])
    out = tmp_path / "o.jsonl"
    argv = ("clean", "--test", f"t={tmp_path / 't.jsonl'}", "--against",
            f"a={tmp_path / 'a.jsonl'}", "--text-field", "f", "--drop-conflicts", "--out", out)
    code, _, stderr = cli(*argv)
    assert code == 2 and "error [LC_E_USAGE]: --drop-conflicts compares labels" in stderr
    assert not out.exists()
    # A label on either side is enough: the test record's text carries another label.
    code, stdout, _ = cli(*argv, "-o", "a.label=label")
    assert code == 0 and "kept 0, dropped 1 (against 1)" in stdout


def test_clean_of_csv_files_keeps_quoted_line_breaks_whatever_their_line_endings(cli, tmp_path):
    # Each file read with its own line ending: CRLF rows (with a BOM), gzipped CRLF rows, LF rows
    # and CR rows, each with CRLF, LF and CR inside quoted values.  Spark's detection turned a
    # quoted CRLF of a CRLF file into LF, and clean wrote the changed value.
    d = tmp_path / "t"
    expected = write_csv_endings(d)
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    out = tmp_path / "o.csv"
    code, _, _ = cli("clean", "--test", f"t={d}", "--against", f"a={tmp_path / 'a.txt'}",
                     "--text-field", "text", "--out", out)
    assert code == 0
    with open(out, newline="", encoding="utf-8") as fh:
        assert list(csv.reader(fh)) == expected
