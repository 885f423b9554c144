"""The same report on any master: local[2], local-cluster, a real standalone cluster, and
through a Spark Connect server.

The standalone cluster is real: a master and two workers started from the pip package's
``bin/spark-class`` on 127.0.0.1, each a separate JVM, with executors in their own processes (and
their own Python workers).  The jobs run through ``spark-submit jobs/*.py`` exactly as a user runs
them, from a working directory that holds nothing of theirs; the local[2] outputs they are compared
with come from the same commands run in the tests' own session.
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import write_csv_endings, write_jsonl

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SUBMIT_TIMEOUT = 600
# Outputs written through a non-local Hadoop URI: a ViewFS mount of the local root, set on every
# master (and, for a Spark Connect client, an fsspec filesystem for the same URIs, see below).
VIEWFS = "viewfs://lcview/lc"
VIEWFS_CONF = "spark.hadoop.fs.viewfs.mounttable.lcview.link./lc=file:///"
# Installed into a Connect client's interpreter (as sitecustomize): fsspec's view of VIEWFS.
FSSPEC_VIEWFS = """
import fsspec
from fsspec.implementations.local import LocalFileSystem


class ViewFS(LocalFileSystem):
    protocol = "viewfs"

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path)
        if path.startswith("viewfs://"):  # viewfs://AUTHORITY/lc/REST -> /REST
            path = "/" + path[len("viewfs://"):].split("/", 2)[2]
        return super()._strip_protocol(path)


fsspec.register_implementation("viewfs", ViewFS, clobber=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_bin(name: str) -> str:
    """A script of the pip package's Spark (installed next to this interpreter)."""
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            pytest.fail(f"{name} not found next to {sys.executable} nor on PATH")
        return found
    return str(path)


def _spark_home() -> str:
    """The pip package's Spark (spark-class finds it with whatever `python` is on PATH else)."""
    import pyspark

    return str(Path(pyspark.__file__).parent)


def _master_state(ui_port: int) -> dict:
    """The standalone master's state, from its web UI's JSON ({} while it is not up)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as resp:
            return json.load(resp)
    except OSError:
        return {}


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    """A Spark standalone master and two 1-core workers on 127.0.0.1; yields (master URL, the
    workers' work directories)."""
    work = tmp_path_factory.mktemp("standalone")
    port, ui = _free_port(), _free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(work),
           "SPARK_HOME": _spark_home()}
    procs = []

    def start(name: str, *args: str) -> None:
        log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append((subprocess.Popen([_spark_bin("spark-class"), *args], stdout=log,
                                       stderr=subprocess.STDOUT, env=env, cwd=work), log))

    url = f"spark://127.0.0.1:{port}"
    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui))
        for i in (1, 2):
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", url, "--host",
                  "127.0.0.1", "--cores", "1", "--memory", "1536m", "--webui-port", "0",
                  "--work-dir", str(work / f"worker{i}"))
        deadline = time.monotonic() + 120
        while _master_state(ui).get("aliveworkers", 0) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
                logs = "\n".join(f.name + ":\n" + Path(f.name).read_text()[-2000:]
                                 for _, f in procs)
                pytest.fail(f"standalone cluster did not come up with 2 workers\n{logs}")
            time.sleep(1)
        yield url, [work / "worker1", work / "worker2"]
    finally:
        for proc, log in reversed(procs):
            _stop(proc, log)


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A Spark Connect server (local[2]) started from the pip package; yields its sc:// URL."""
    pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark[connect]")
    work = tmp_path_factory.mktemp("connect")
    port = _free_port()
    jar = next(Path(_spark_home(), "jars").glob("spark-connect_*.jar"))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": _spark_home(),
           "PYSPARK_PYTHON": sys.executable}
    log = open(work / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [_spark_bin("spark-submit"), "--class",
         "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
         "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.ui.enabled=false",
         "--conf", VIEWFS_CONF,
         "--jars", str(jar), "spark-internal"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
    try:
        deadline = time.monotonic() + 120
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("Spark Connect server did not start:\n"
                            + (work / "server.log").read_text()[-3000:])
            time.sleep(1)
        yield f"sc://127.0.0.1:{port}"
    finally:
        _stop(proc, log)


def _stop(proc: subprocess.Popen, log) -> None:  # noqa: ANN001 - an open log file
    """Stop a daemon we started (by its PID) and close its log."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Two datasets with exact and near copies across them, string and integer ids, labels, and
    one of them split over several files (so every master reads several partitions)."""
    d = tmp_path_factory.mktemp("cluster in")  # a space in the path, on purpose
    rnd = random.Random(4)
    words = [f"v{i}" for i in range(300)] + list("(){};=+-")
    bases = [" ".join(rnd.choice(words) for _ in range(rnd.randint(40, 90))) for _ in range(120)]

    def near(text: str) -> str:
        toks = text.split()
        toks[rnd.randrange(len(toks))] = rnd.choice(words)
        return " ".join(toks)

    train = [{"uid": f"t{i}", "code": t, "y": i % 3} for i, t in enumerate(bases)]
    for part in range(3):
        write_jsonl(d / "train" / f"part-{part}.jsonl", train[part::3])
    test = []
    for i in range(80):
        kind = i % 4
        text = (bases[i] if kind == 0 else near(bases[i]) if kind == 1
                else "  ".join(bases[i].split()) if kind == 2
                else " ".join(rnd.choice(words) for _ in range(60)))
        test.append({"uid": f"s{i}", "code": text, "y": (i + kind) % 3})
    test += test[:5]  # repeats inside the test split
    write_jsonl(d / "test.jsonl", test)
    return d


def _submit(master: str | None, job: str, args: list[str], cwd: Path) -> None:
    """spark-submit a job on `master`; a master of ``sc://...`` runs the job script with plain
    Python through that Spark Connect server instead, and None runs the job's command in this
    process, on the tests' local[2] session (the reference: two JVM starts fewer)."""
    if master is None:
        from leakcheck_spark.cli import main

        here = os.getcwd()
        os.chdir(cwd)
        try:
            assert main([job.removesuffix(".py"), *args]) == 0
        finally:
            os.chdir(here)
        return
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_HOME": _spark_home(),
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    if master.startswith("sc://"):
        cmd = [sys.executable, str(ROOT / "jobs" / job), "--remote", master,
               "--conf", "spark.sql.shuffle.partitions=5", *args]
        site = cwd.parent / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(FSSPEC_VIEWFS)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    else:
        cmd = [_spark_bin("spark-submit"), "--master", master, "--conf",
               "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=5",
               "--conf", VIEWFS_CONF, str(ROOT / "jobs" / job), *args]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=SUBMIT_TIMEOUT)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr[-4000:]}"
    if master.startswith("local-cluster"):
        # The job stops its session: the JVM's shutdown no longer races the executors, which
        # logged hundreds of ERROR lines ("Lost executor") after every successful run.
        assert " ERROR " not in done.stderr, done.stderr[-4000:]


def _run_all(master: str | None, inputs: Path, out: Path, prefix: str = "") -> dict:
    """Audit (with --near) and clean on `master`; returns what must be identical everywhere.

    `prefix` (a URI prefix such as VIEWFS, which reaches local files another way) goes before the
    audit's --out-dir and clean's --out; clean's --report stays a plain path."""
    cwd = out / "cwd"
    cwd.mkdir(parents=True)
    fields = ["--text-field", "code", "--id-field", "uid", "--label-field", "y"]
    _submit(master, "audit.py", [
        "-d", f"ref:train={inputs / 'train'}", "-d", f"new:test={inputs / 'test.jsonl'}",
        *fields, "--near", "--format", "json", "--out-dir", f"{prefix}{out / 'report dir'}"], cwd)
    _submit(master, "clean.py", [
        "--test", f"new:test={inputs / 'test.jsonl'}", "--against", f"ref:train={inputs / 'train'}",
        *fields, "--near", "--dedup", "--out", f"{prefix}{out / 'clean.jsonl'}",
        "--report", str(out / "dropped.json")], cwd)
    assert not any(cwd.iterdir()), "a job wrote into its working directory"
    report = json.loads((out / "report dir" / "report.json").read_text())
    report.pop("timings")

    def lines(directory: Path) -> list[str]:
        return sorted(line for f in sorted(directory.glob("part-*"))
                      for line in f.read_text().splitlines())

    return {
        "report": report,
        "overlaps": lines(out / "report dir" / "overlaps"),
        "conflicts": lines(out / "report dir" / "label_conflicts"),
        "clean": (out / "clean.jsonl").read_bytes(),
        "dropped": (out / "dropped.json").read_bytes(),
    }


@pytest.fixture(scope="module")
def local_result(spark, inputs, tmp_path_factory):
    """The outputs of local mode: the tests' session, local[2] (its own shuffle partitions)."""
    return _run_all(None, inputs, tmp_path_factory.mktemp("local"))


def _assert_same(got: dict, want: dict) -> None:
    assert got["report"] == want["report"]
    assert got["overlaps"] == want["overlaps"] and want["overlaps"]
    assert got["conflicts"] == want["conflicts"] and want["conflicts"]
    assert got["clean"] == want["clean"] and want["clean"]
    assert got["dropped"] == want["dropped"]


def test_local_run_finds_what_was_planted(local_result):
    report = local_result["report"]
    cell = report["split_matrix"]["new/test"]["ref/train"]
    assert cell["count"] >= 60  # 20 exact, 20 near, 20 whitespace copies, + repeats
    dropped = json.loads(local_result["dropped"])["dropped"]
    assert {e["reason"] for e in dropped} >= {"against", "duplicate"}


def test_standalone_cluster_gives_the_same_outputs(standalone, inputs, local_result, tmp_path):
    url, worker_dirs = standalone
    _assert_same(_run_all(url, inputs, tmp_path), local_result)
    for work in worker_dirs:  # both workers ran executors of both jobs
        assert len(list(work.glob("app-*"))) >= 2


def test_local_cluster_gives_the_same_outputs(inputs, local_result, tmp_path):
    """Also writes through a non-local URI: staging, commit and report.json through the driver's
    Hadoop FileSystem API (plain paths are covered by the other classic masters)."""
    _assert_same(_run_all("local-cluster[2,1,1024]", inputs, tmp_path, VIEWFS), local_result)


def test_spark_connect_gives_the_same_outputs(connect_server, inputs, local_result, tmp_path):
    """The Connect client has no JVM: report.json and the commit moves of the non-local outputs
    go through fsspec, the DataFrame outputs through the server; the plain --report path is
    written by the client beside a server on the same machine."""
    _assert_same(_run_all(connect_server, inputs, tmp_path, VIEWFS), local_result)


def test_spark_connect_keeps_quoted_line_breaks_of_csv_files_whatever_their_endings(
        connect_server, tmp_path):
    """The Connect client finds each CSV file's line ending through its server (it has no JVM to
    read the file's start with): Spark's own detection turned a quoted CRLF of a CRLF file into
    LF, so clean wrote changed rows.  The CR file is longer than the 64 KiB looked at."""
    expected = write_csv_endings(tmp_path / "t", big_cr=True)
    (tmp_path / "a.txt").write_text("leak\n", encoding="utf-8")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    _submit(connect_server, "clean.py", [
        "--test", f"t={tmp_path / 't'}", "--against", f"a={tmp_path / 'a.txt'}",
        "--text-field", "text", "--out", str(tmp_path / "o.csv")], cwd)
    with open(tmp_path / "o.csv", newline="", encoding="utf-8") as fh:
        assert list(csv.reader(fh)) == expected
