"""The one session-scoped SparkSession, and helpers to write real input files."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from leakcheck_spark.session import get_session

    session = get_session(
        "local[2]",
        conf=[("spark.ui.enabled", "false"), ("spark.sql.shuffle.partitions", "3"),
              ("spark.default.parallelism", "2"),
              # Catalog tables the tests save go to a temporary warehouse, not the cwd.
              ("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))],
        app_name="leakcheck-spark-tests",
    )
    yield session
    session.stop()


def spark_conf(spark, **settings):
    """Set Spark SQL settings for a block and restore them afterwards."""
    from leakcheck_spark.session import session_conf

    return session_conf(spark, settings)


@contextlib.contextmanager
def viewfs_mount(spark, target: Path = Path("/")):
    """A non-local Hadoop URI over local files, for the code paths object storage takes: yields
    ``viewfs://NAME/lc``, a Hadoop ViewFS mount of `target` (each call a new NAME, as Hadoop caches
    a mount table by name)."""
    name = f"lc{uuid.uuid4().hex[:8]}"
    key = f"fs.viewfs.mounttable.{name}.link./lc"
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set(key, target.as_uri())
    try:
        yield f"viewfs://{name}/lc"
    finally:
        conf.unset(key)


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_csv_endings(d: Path, big_cr: bool = False) -> list[list[str]]:
    """CSV files in directory `d` (made here) with one line ending each: CRLF rows with a BOM,
    gzipped CRLF rows, LF rows and CR rows (with `big_cr`, more than 64 KiB of them), each with
    CRLF, LF and CR inside quoted values, and a last row whose text is ``leak``.  Returns the
    rows a clean against ``leak`` keeps: the header and each file's other rows."""
    import csv
    import gzip
    import io

    values = ["al\r\npha", "be\r\n\r\nta", "gam\nma", "del\rta", "end\r"]
    d.mkdir()
    expected = [["id", "text"]]
    for name, ending in (("a.csv", "\r\n"), ("b.csv.gz", "\r\n"), ("c.csv", "\n"),
                         ("d.csv", "\r")):
        rows = [[f"{name[0]}{i}", v] for i, v in enumerate(values)]
        if big_cr and ending == "\r":
            rows += [[f"{name[0]}{i}", f"{v} {i}"] for i in range(5, 5000) for v in values[:1]]
        rows.append([f"{name[0]}x", "leak"])
        buf = io.StringIO(newline="")
        csv.writer(buf, lineterminator=ending, quoting=csv.QUOTE_NONNUMERIC).writerows(
            [["id", "text"], *rows])
        data = ("\ufeff" if name == "a.csv" else "").encode() + buf.getvalue().encode()
        (d / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        expected += rows[:-1]
    return expected


@pytest.fixture
def unprivileged() -> list:
    """The command prefix that runs a process bound by file modes: root reads and writes past
    them, so its runs drop the capabilities that let it (skipped where that cannot be done)."""
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv to drop root's file access")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


@pytest.fixture
def cli(spark, capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""
    from leakcheck_spark.cli import main

    def run(*argv: str):
        code = main([str(a) for a in argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
