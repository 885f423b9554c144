"""Results under Spark settings a user's session may carry (a notebook's, a cluster's,
``--conf``): the same outputs as with Spark's defaults."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import spark_conf, write_jsonl


def test_single_file_outputs_under_max_records_per_file(spark, cli, tmp_path):
    # spark.sql.files.maxRecordsPerFile splits a task's output into several files; an output
    # named as one file (.jsonl, .parquet, .csv) is still that one file.
    rows = [{"id": i, "f": f"text number {i}"} for i in range(4)]
    test = write_jsonl(tmp_path / "t.jsonl", rows)
    against = write_jsonl(tmp_path / "a.jsonl", [{"id": 9, "f": "text number 0"}])
    with spark_conf(spark, **{"spark.sql.files.maxRecordsPerFile": 1}):
        for out in ("clean.jsonl", "clean.parquet", "clean.csv"):
            code, stdout, err = cli("clean", "--test", f"t={test}", "--against", f"a={against}",
                                    "--text-field", "f", "--id-field", "id",
                                    "--out", tmp_path / out)
            assert code == 0, err
            assert "kept 3, dropped 1" in stdout
        code, _, err = cli("resplit", "-d", f"t:test={test}", "-d", f"a:train={against}",
                           "--text-field", "f", "--id-field", "id",
                           "--out", tmp_path / "resplit.csv")
        assert code == 0, err
    assert (tmp_path / "clean.jsonl").read_text().splitlines() == [
        '{"id": 1, "f": "text number 1"}', '{"id": 2, "f": "text number 2"}',
        '{"id": 3, "f": "text number 3"}']
    assert pq.read_table(tmp_path / "clean.parquet").column("id").to_pylist() == [1, 2, 3]
    assert (tmp_path / "clean.csv").read_text().splitlines() == [
        "id,f", "1,text number 1", "2,text number 2", "3,text number 3"]
    assert len((tmp_path / "resplit.csv").read_text().splitlines()) == 6


def test_a_truncated_gzip_input_is_an_error_under_ignore_corrupt_files(spark, cli, tmp_path):
    # With spark.sql.files.ignoreCorruptFiles a session skips what it cannot read: the first
    # half of a truncated .jsonl.gz would be audited as if it were the whole file.
    import gzip

    data = gzip.compress("".join(f'{{"t": "line {i} {"x" * 50}"}}\n'
                                 for i in range(3000)).encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(data[:len(data) // 2])
    with spark_conf(spark, **{"spark.sql.files.ignoreCorruptFiles": "true"}):
        code, stdout, err = cli("audit", "-d", f"x={tmp_path / 'cut.jsonl.gz'}",
                                "--text-field", "t")
    assert code == 2, stdout
    assert "error [LC_E_BAD_FORMAT]: cannot read" in err and "cut.jsonl.gz" in err


def test_parquet_columns_differing_only_in_case(spark, cli, tmp_path):
    # Spark's default (case-insensitive) reader refuses such a file: a one-line error naming it
    # and the setting that reads it; with spark.sql.caseSensitive=true both columns are kept.
    pq.write_table(pa.table({"id": [1, 2], "text": ["int f(){}", "int g(){}"],
                             "Text": ["A", "B"]}), tmp_path / "t.parquet")
    against = write_jsonl(tmp_path / "a.jsonl", [{"text": "int f() {}"}])
    argv = ["clean", "--test", f"t={tmp_path / 't.parquet'}", "--against", f"a={against}",
            "--text-field", "text", "-o", "t.id=id"]
    code, _, err = cli(*argv, "--out", tmp_path / "default.parquet")
    assert code == 2
    assert err.startswith("leakcheck-spark: error [LC_E_BAD_FORMAT]: the columns of ")
    assert "spark.sql.caseSensitive=true" in err and len(err.strip().splitlines()) == 1
    with spark_conf(spark, **{"spark.sql.caseSensitive": "true"}):
        code, _, err = cli(*argv, "--out", tmp_path / "kept.parquet")
    assert code == 0, err
    assert pq.read_table(tmp_path / "kept.parquet").to_pylist() == [
        {"id": 2, "text": "int g(){}", "Text": "B"}]


def test_a_catalog_tables_corrupt_file_is_an_error_under_ignore_corrupt_files(spark, cli,
                                                                               tmp_path):
    # A table: source was read with spark.table(), which took the session's setting: the rows of
    # the broken file were left out of the audit without a word (100 of 200 records audited).
    spark.createDataFrame([(f"text {i} {'y' * 40}",) for i in range(200)], "text string"
                          ).repartition(2).write.option("path", str(tmp_path / "t")).mode(
                              "overwrite").saveAsTable("lc_conf_corrupt")
    part = sorted((tmp_path / "t").glob("part-*.parquet"))[0]
    data = part.read_bytes()
    part.write_bytes(data[:len(data) // 2] + data[-8:])  # a footer length past the data
    (tmp_path / "t" / f".{part.name}.crc").unlink()
    spark.catalog.refreshTable("lc_conf_corrupt")
    try:
        with spark_conf(spark, **{"spark.sql.files.ignoreCorruptFiles": "true"}):
            code, stdout, err = cli("audit", "-d", "x=table:lc_conf_corrupt", "--text-field",
                                    "text", "--quiet")
    finally:
        spark.sql("DROP TABLE lc_conf_corrupt")
    assert code == 2, stdout
    assert err.startswith(f"leakcheck-spark: error [LC_E_BAD_FORMAT]: cannot read {part}"), err
