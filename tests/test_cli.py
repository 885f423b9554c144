"""The CLI through main([...]): outputs, exit codes, and every error code of SPEC section 9."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import spark_conf, viewfs_mount, write_jsonl

from leakcheck_spark.normalize import NORMALIZERS  # noqa: F401 - import works without Spark
from leakcheck_spark.session import local_shuffle_partitions, merge_java_options

LINE = re.compile(r"^leakcheck-spark: error \[(LC_E_[A-Z_]+)\]: .+ \(hint: .+\)$")


@pytest.fixture
def data(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"func": "int a(){}", "y": 1}, {"func": "int b(){}", "y": 0}])
    write_jsonl(tmp_path / "test.jsonl", [{"func": "int a() {}", "y": 0}, {"func": "int c(){}", "y": 1}])
    return tmp_path


def error_code(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.startswith("leakcheck-spark: error")]
    assert len(lines) == 1, stderr
    m = LINE.match(lines[0])
    assert m, lines[0]
    assert "Traceback" not in stderr and "\tat org." not in stderr
    return m.group(1)


def json_error_code(stderr: str) -> str:
    """The code of the one error object printed with --json (and nothing like a trace)."""
    assert "Traceback" not in stderr and "\tat org." not in stderr
    err = json.loads(stderr.strip().splitlines()[-1])["error"]
    assert err["message"] and err["hint"] and "bug" not in err["hint"]
    return err["code"]


def test_audit_out_dir_json_and_fail_on_overlap(cli, data):
    out = data / "report"
    code, stdout, _ = cli("audit", "-d", f"p:train={data / 'train.jsonl'}",
                          "-d", f"p:test={data / 'test.jsonl'}", "--text-field", "func",
                          "--label-field", "y", "--out-dir", out, "--json", "-",
                          "--fail-on-overlap")
    assert code == 1
    report = json.loads(stdout)
    assert report == json.loads((out / "report.json").read_text())
    assert report["split_matrix"]["p/test"]["p/train"] == {"count": 1, "fraction": 0.5}
    assert report["label_conflicts"]["count"] == 1
    assert pq.read_table(out / "overlaps").num_rows == 2
    assert pq.read_table(out / "label_conflicts").num_rows == 1
    assert not [p for p in data.iterdir() if ".lc-tmp" in p.name]


def test_audit_terminal_summary_and_csv_format(cli, data):
    out = data / "r"
    code, stdout, stderr = cli("audit", "-d", f"p={data / 'train.jsonl'}", "-d",
                               f"q={data / 'test.jsonl'}", "--text-field", "func",
                               "--format", "csv", "--out-dir", out)
    assert code == 0
    assert "p/all" in stdout and "1 (50.0%)" in stdout
    assert "read 2 sources: 4 records" in stderr
    rows = (next(out.glob("overlaps/part-*.csv"))).read_text().splitlines()
    assert rows[0] == "from,id,to,match_ids,match,similarity"


class _ClosedPipe:
    """A stdout whose reader has gone away, as under `leakcheck-spark audit ... | head`."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_reader_that_stops_early_leaves_the_finished_outputs_and_the_exit_code(
        spark, data, monkeypatch, capsys):
    from leakcheck_spark.cli import main

    out = data / "report"
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    code = main(["audit", "-d", f"p:train={data / 'train.jsonl'}", "-d",
                 f"p:test={data / 'test.jsonl'}", "--text-field", "func", "--out-dir", str(out),
                 "--fail-on-overlap"])
    assert code == 1, capsys.readouterr().err
    assert json.loads((out / "report.json").read_text())["split_matrix"]["p/test"]["p/train"][
        "count"] == 1
    assert "error" not in capsys.readouterr().err


def test_quiet_silences_progress(cli, data):
    code, _, stderr = cli("audit", "-d", f"p={data / 'train.jsonl'}", "--text-field", "func",
                          "--quiet")
    assert code == 0 and "read " not in stderr


def bad_gz(d):
    (d / "x.jsonl.gz").write_bytes(b"not gzip at all")
    return f"x={d / 'x.jsonl.gz'}"


def fake_bz2(d):
    # Hadoop's codec read a file that is not bzip2 as no lines: its records were lost silently.
    (d / "fk").mkdir()
    write_jsonl(d / "fk" / "a.jsonl", [{"func": "a"}])
    (d / "fk" / "b.jsonl.bz2").write_text('{"func": "b"}\n', encoding="utf-8")
    return f"x={d / 'fk'}"


def bad_jsonl(d):
    (d / "x.jsonl").write_text('{"func": "a"}\n\n{"func": "b",}\n', encoding="utf-8")
    return f"x={d / 'x.jsonl'}"


def bad_parquet(d):
    (d / "x.parquet").write_bytes(b"PAR1 garbage")
    return f"x={d / 'x.parquet'}"


def bad_utf8(d):
    (d / "x.jsonl").write_bytes(b'{"func": "\xff"}\n')
    return f"x={d / 'x.jsonl'}"


def not_object(d):
    (d / "x.jsonl").write_text('{"func": "a"}\n[1, 2]\n', encoding="utf-8")
    return f"x={d / 'x.jsonl'}"


def write(name, text):
    def make(d):
        (d / name).write_text(text, encoding="utf-8")
        return f"x={d / name}"
    return make


@pytest.mark.parametrize("make,extra,code,needle", [
    (write("x.jsonl", ""), [], "LC_E_EMPTY_INPUT", "no records"),
    (write("x.jsonl", "\n  \n"), [], "LC_E_EMPTY_INPUT", "no records"),
    (write("x.jsonl", "# comment\n// another\n"), [], "LC_E_EMPTY_INPUT", "no records"),
    (write("x.json", "[]"), [], "LC_E_EMPTY_INPUT", "no records"),
    (write("x.csv", "func,y\n"), [], "LC_E_EMPTY_INPUT", "no records"),
    (write("x.jsonl", '{"func": 3}\n'), [], "LC_E_BAD_VALUE", "line 1 of"),
    (write("x.jsonl", '{"code": "a"}\n'), [], "LC_E_MISSING_FIELD", "fields present: code"),
    (write("x.jsonl", '{"func": "a"}\n'), ["--label-field", "lab"], "LC_E_MISSING_FIELD",
     "present in no row"),
    (write("x.jsonl", '{"func": "a"}\n'), ["--id-field", "idx"], "LC_E_MISSING_FIELD", "idx"),
    (write("x.jsonl", '{"func": "a", "idx": 1}\n{"func": "b", "idx": null}\n'),
     ["--id-field", "idx"], "LC_E_MISSING_FIELD", "id field 'idx' is null in line 2 of"),
    (write("x.csv", "code\na\n"), [], "LC_E_MISSING_FIELD", "'func'"),
    # Lone CRs: the header is the file's first line as the read ends it, not all of the file.
    (write("x.csv", "code,y\r1,2\r"), [], "LC_E_MISSING_FIELD", "'func' not in"),
    (write("x.csv", "func,func\r1,2\r"), [], "LC_E_BAD_FORMAT", "repeats the column 'func'"),
    (bad_jsonl, [], "LC_E_BAD_FORMAT", "line 3 of"),
    (not_object, [], "LC_E_BAD_FORMAT", "line 2 of"),
    (write("x.jsonl", '{"func": "a"}\r{"func": "b"}\r'), [], "LC_E_BAD_FORMAT",
     "end with a lone CR"),
    (bad_utf8, [], "LC_E_BAD_FORMAT", "invalid UTF-8"),
    (bad_gz, [], "LC_E_BAD_FORMAT", "x.jsonl.gz"),
    (fake_bz2, [], "LC_E_BAD_FORMAT", "b.jsonl.bz2: its name ends in .bz2, but it is not bzip2"),
    (bad_parquet, [], "LC_E_BAD_FORMAT", "x.parquet"),
    (write("x.xml", "<a/>"), [], "LC_E_BAD_FORMAT", "unsupported"),
    (lambda d: f"x={d / 'missing.jsonl'}", [], "LC_E_IO", "missing.jsonl"),
    (lambda d: "no-equals-sign", [], "LC_E_BAD_SPEC", "bad dataset spec"),
    (lambda d: f"x={d / 'train.jsonl'}", ["-o", "nope.id=i"], "LC_E_BAD_SPEC", "'nope'"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--near", "--num-perm", "0"], "LC_E_USAGE", "--num-perm"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--near", "--num-perm", "100000000"], "LC_E_USAGE",
     "--num-perm"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--near", "--shingle", "0"], "LC_E_USAGE", "--shingle"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--near", "--shingle", "2147483648"], "LC_E_USAGE",
     "--shingle 2147483648 is not valid: expected an integer from 1 to 2147483647"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--near", "--shingle", "9223372036854775808"],
     "LC_E_USAGE", "--shingle"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--near", "--max-chars", "9223372036854775808"],
     "LC_E_USAGE", "--max-chars 9223372036854775808 is not valid"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--max-chars", "2147483648"], "LC_E_USAGE",
     "--max-chars"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--threshold", "0"], "LC_E_USAGE", "--threshold"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--threshold", "1.5"], "LC_E_USAGE", "--threshold"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--max-chars", "0"], "LC_E_USAGE", "--max-chars"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--max-rows", "-1"], "LC_E_USAGE", "--max-rows"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--out-d", "o"], "LC_E_USAGE", "--out-d"),
    (lambda d: f"x={d / 'train.jsonl'}", ["--bogus"], "LC_E_USAGE", "--bogus"),
])
def test_every_bad_input_is_one_line_exit_2_and_no_output(cli, data, make, extra, code, needle):
    out = data / "out"
    spec = make(data)
    rc, stdout, stderr = cli("audit", "-d", spec, "--text-field", "func", "--out-dir", out,
                             *extra)
    assert rc == 2
    assert error_code(stderr) == code
    assert needle in stderr
    assert not out.exists()
    assert not [p for p in data.iterdir() if ".lc-tmp" in p.name]


def test_error_as_json_object(cli, data):
    rc, _, stderr = cli("audit", "-d", f"x={data / 'nope.jsonl'}", "--text-field", "f", "--json", "-")
    assert rc == 2
    err = json.loads(stderr.strip().splitlines()[-1])["error"]
    assert err["code"] == "LC_E_IO" and err["message"] and err["hint"]


def test_bom_is_accepted(cli, data):
    (data / "bom.jsonl").write_bytes(b'\xef\xbb\xbf{"func": "int a(){}"}\n')
    with gzip.open(data / "bom.jsonl.gz", "wb") as fh:
        fh.write(b'\xef\xbb\xbf{"func": "int a(){}"}\n')
    rc, stdout, _ = cli("audit", "-d", f"b={data / 'bom.jsonl'}", "-d", f"g={data / 'bom.jsonl.gz'}",
                        "--text-field", "func", "--json")  # no FILE: stdout
    assert rc == 0 and json.loads(stdout)["split_matrix"]["b/all"]["g/all"]["count"] == 1


def test_check_flags_are_its_own(cli):
    rc, _, stderr = cli("check", "-d", "x=y", "--eval", "e.txt", "--train", "t.txt")
    assert rc == 2 and error_code(stderr) == "LC_E_USAGE" and "check --help" in stderr


@pytest.mark.parametrize("extra, needle", [
    (["--n", "99999999999999999999"], "--n 99999999999999999999 is not valid"),
    (["--n", "0"], "--n 0 is not valid"),
    (["--n", "2147483648"], "expected an integer from 1 to 2147483647"),
    (["--near", "--near-threshold", "0"], "--near-threshold 0.0 is not valid"),
    (["--near", "--threshold", "2"], "--threshold 2.0 is not valid"),
])
def test_check_values_are_refused_before_spark_starts(cli, data, monkeypatch, extra, needle):
    import leakcheck_spark.session

    def no_session(*_, **__):
        raise AssertionError("Spark was started for a bad flag value")

    monkeypatch.setattr(leakcheck_spark.session, "get_session", no_session)
    rc, _, stderr = cli("check", "--train", data / "train.jsonl", "--eval", data / "test.jsonl",
                        "--field", "func", *extra)
    assert rc == 2 and error_code(stderr) == "LC_E_USAGE" and needle in stderr, stderr
    assert "hint: fix --near-threshold" in stderr if "--near-threshold" in extra else True


def test_python_dash_m_entry_point(data):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "leakcheck_spark", "audit", "--bogus"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and error_code(proc.stderr) == "LC_E_USAGE"


def test_split_field_overrides_and_max_rows_through_the_cli(cli, tmp_path):
    write_jsonl(tmp_path / "x.jsonl", [
        {"i": "k1", "txt": "int a;", "s": "train", "y": 1},
        {"i": "k2", "txt": "int  a;", "s": "test", "y": 0},
        {"i": "k3", "txt": "int b;", "s": "test", "y": 1},
        {"i": "k4", "txt": "int c;", "s": "train", "y": 0}])
    write_jsonl(tmp_path / "z.jsonl", [{"code": "int b;"}, {"code": "int c;"}])
    code, stdout, _ = cli("audit", "-d", f"x={tmp_path / 'x.jsonl'}", "-d",
                          f"z:ref={tmp_path / 'z.jsonl'}", "--text-field", "txt",
                          "--split-field", "s", "--label-field", "y", "-o", "x.id=i",
                          "-o", "z.text=code", "-o", "z.label=", "--max-rows", "3",
                          "--json", "-")
    assert code == 0
    rep = json.loads(stdout)
    assert rep["groups"] == {"x/test": {"records": 2, "empty": 0},
                             "x/train": {"records": 1, "empty": 0},
                             "z/ref": {"records": 2, "empty": 0}}
    assert rep["split_matrix"]["x/test"]["x/train"] == {"count": 1, "fraction": 0.5}
    assert rep["dataset_matrix"]["x"]["z"] == {"count": 1, "fraction": 1 / 3}
    assert {(o["from"], o["id"], o["to"]) for o in rep["overlaps"]["sample"]} == {
        ("x/test", "k2", "x/train"), ("x/train", "k1", "x/test"),
        ("x/test", "k3", "z/ref"), ("z/ref", 0, "x/test")}
    assert rep["label_conflicts"]["count"] == 1


def test_a_local_session_it_builds_runs_the_throughput_collector_and_quiet_logs(spark):
    # The fixture's session was built by get_session("local[2]"): ask its JVM what it runs.
    jvm = spark.sparkContext._jvm
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    collectors = {beans.get(i).getName() for i in range(beans.size())}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}, collectors
    args = set(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in args), args


@pytest.mark.parametrize("theirs, expected", [
    (None, "-Dlog4j2.configurationFile=file:/q -XX:+UseParallelGC"),
    ("  ", "-Dlog4j2.configurationFile=file:/q -XX:+UseParallelGC"),
    ("-Dx=1", "-Dlog4j2.configurationFile=file:/q -XX:+UseParallelGC -Dx=1"),
    ("-XX:+UseG1GC -Dx=1", "-Dlog4j2.configurationFile=file:/q -XX:+UseG1GC -Dx=1"),
    ("-XX:-UseParallelGC", "-Dlog4j2.configurationFile=file:/q -XX:-UseParallelGC"),
    ("-Dlog4j.configurationFile=mine.xml", "-XX:+UseParallelGC -Dlog4j.configurationFile=mine.xml"),
    ("-XX:MaxGCPauseMillis=50", "-Dlog4j2.configurationFile=file:/q -XX:+UseParallelGC "
                                "-XX:MaxGCPauseMillis=50"),
])
def test_a_users_java_options_add_to_ours_and_replace_only_what_they_choose(theirs, expected):
    ours = ["-Dlog4j2.configurationFile=file:/q", "-XX:+UseParallelGC"]
    assert merge_java_options(ours, theirs) == expected


@pytest.mark.parametrize("master, cpus, expected", [
    ("local", 2, 16), ("local[2]", 2, 16), ("local[8]", 2, 16), ("local[12]", 2, 24),
    ("local[*]", 2, 16), ("local[*]", 48, 96), ("local[*, 3]", 48, 96), ("local[20,4]", 2, 40),
    ("local-cluster[2,1,1024]", 2, 16), ("local-cluster[4, 8, 2048]", 2, 64),
])
def test_a_local_session_gets_two_shuffle_partitions_per_core_and_at_least_16(master, cpus,
                                                                             expected):
    assert local_shuffle_partitions(master, cpus) == expected


def _python(script: str, cwd: Path) -> list[str]:
    """The lines `script` prints, run by a Python of its own (its own JVM, its own session)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()


def test_a_users_extra_java_options_reach_the_jvm_of_a_session_it_builds(tmp_path):
    # A collector of the user's own: with ours added as well the JVM would refuse to start.
    script = (
        "from leakcheck_spark.session import get_session\n"
        "s = get_session('local[10]', conf=[('spark.driver.extraJavaOptions', "
        "'-XX:+UseSerialGC -Dleakcheck.probe=yes')])\n"
        "m = s.sparkContext._jvm.java.lang.management.ManagementFactory\n"
        "b = m.getGarbageCollectorMXBeans()\n"
        "print(sorted(b.get(i).getName() for i in range(b.size())))\n"
        "print(sorted(a for a in m.getRuntimeMXBean().getInputArguments() if a.startswith('-D')))\n"
        "print(s.conf.get('spark.sql.shuffle.partitions'))\n"
    )
    collectors, props, partitions = _python(script, tmp_path)[-3:]
    assert partitions == "20"  # two per core of local[10]
    assert collectors == "['Copy', 'MarkSweepCompact']"
    assert "'-Dleakcheck.probe=yes'" in props and "-Dlog4j2.configurationFile=" in props


@pytest.mark.parametrize("before", [b"", b"Picked up JAVA_TOOL_OPTIONS: -Dx=1\n"])
def test_the_jvms_stderr_reaches_ours_without_its_incubator_warning(before):
    from leakcheck_spark.session import _JVM_START_WARNING

    rest = b"26/12/06 WARN Utils: a log line\nTraceback (from a worker)\n" + b"x" * 100_000
    data = before + _JVM_START_WARNING + b"\n" + rest
    for piece in (7, 4096, len(data)):  # the warning's line arrives whole, or in pieces
        assert _copied(data, piece) == before + rest
    # A line like it later on, or after a first line that is something else, is passed on.
    data = b"Error: no JVM\n" + _JVM_START_WARNING
    assert _copied(data) == data
    data = b"a\nb\nc\nd\n" + _JVM_START_WARNING + b"\n"
    assert _copied(data) == data


def test_the_jvms_stderr_is_drained_when_ours_is_gone():
    # A JVM whose stderr pipe is full blocks: the copier keeps reading when it cannot write.
    import threading

    from leakcheck_spark.session import _copy_stderr

    src, out = os.pipe(), os.pipe()
    os.close(out[0])  # writing to `out` now fails (EPIPE; Python ignores SIGPIPE)
    copier = threading.Thread(target=_copy_stderr, args=(src[0], out[1]))
    copier.start()
    os.write(src[1], b"line\n" * 200_000)  # 1 MB: blocks unless the copier drains it
    os.close(src[1])
    copier.join(30)
    assert not copier.is_alive()
    os.close(out[1])


def _copied(data: bytes, piece: int | None = None) -> bytes:
    """What `_copy_stderr` passes on of `data`, written into its pipe `piece` bytes at a time
    (the JVM's writes come in pieces) while another thread reads what it copies."""
    import threading

    from leakcheck_spark.session import _copy_stderr

    src, out = os.pipe(), os.pipe()
    copier = threading.Thread(target=_copy_stderr, args=(src[0], out[1]))
    copier.start()
    got: list[bytes] = []

    def read() -> None:
        while chunk := os.read(out[0], 1 << 16):
            got.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(0, len(data), piece or len(data)):
        os.write(src[1], data[i:i + (piece or len(data))])
    os.close(src[1])
    copier.join(30)
    os.close(out[1])
    reader.join(30)
    os.close(out[0])
    return b"".join(got)


def test_a_cli_session_passes_the_jvms_own_stderr_on(tmp_path):
    # With --verbose Spark logs with its own profile, which it says on the JVM's stderr: through
    # the copier to ours.
    import subprocess
    import sys

    write_jsonl(tmp_path / "a.jsonl", [{"t": "int a;"}])
    proc = subprocess.run([sys.executable, "-m", "leakcheck_spark", "fingerprint", "-d",
                           f"x={tmp_path / 'a.jsonl'}", "--text-field", "t", "--verbose"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Using Spark's default log4j profile" in proc.stderr, proc.stderr
    assert "incubator" not in proc.stderr


def test_a_file_or_directory_the_user_may_not_use_is_an_io_error(tmp_path, unprivileged):
    import subprocess
    import sys

    write_jsonl(tmp_path / "a b.jsonl", [{"t": "x"}])
    # Spaces in the names: Spark URL-encodes them, and its messages end a path at no space.
    sub = tmp_path / "d e" / "sub"
    sub.mkdir(parents=True)
    write_jsonl(tmp_path / "d e" / "b.jsonl", [{"t": "y"}])
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    (tmp_path / "a b.jsonl").chmod(0o000)
    sub.chmod(0o000)
    try:
        for source, out, want in (
                ("a b.jsonl", tmp_path / "ro" / "out", "cannot write --out-dir "
                 f"{tmp_path / 'ro' / 'out'}: permission denied in {tmp_path / 'ro'}"),
                ("a b.jsonl", tmp_path / "out", f"cannot read {tmp_path / 'a b.jsonl'}: permission "
                 "denied"),
                # Before: "An error occurred while calling o52.load.", naming nothing.
                ("d e", tmp_path / "out", f"cannot read {sub}: permission denied")):
            proc = subprocess.run([*unprivileged, sys.executable, "-m", "leakcheck_spark", "audit",
                                   "-d", f"a={tmp_path / source}", "--text-field", "t",
                                   "--out-dir", out, "--quiet"],
                                  capture_output=True, text=True, timeout=300, cwd=tmp_path)
            assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            assert proc.stderr.startswith(f"leakcheck-spark: error [LC_E_IO]: {want} (hint: ")
            assert not out.exists()
    finally:
        (tmp_path / "ro").chmod(0o755)
        (tmp_path / "a b.jsonl").chmod(0o644)
        sub.chmod(0o755)


def test_a_master_spark_cannot_use_is_one_error_line(tmp_path):
    import subprocess
    import sys

    write_jsonl(tmp_path / "a.jsonl", [{"t": "x"}])
    proc = subprocess.run([sys.executable, "-m", "leakcheck_spark", "audit", "--master",
                           "nosuch://host", "-d", f"a={tmp_path / 'a.jsonl'}", "--text-field", "t"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    # Refused before Spark is launched: no JVM "Exception in thread main" and its stack trace.
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert error_code(proc.stderr) == "LC_E_USAGE"
    assert "--master 'nosuch://host' is not a Spark master URL" in proc.stderr


def test_a_connect_url_that_is_malformed_or_answers_nobody_is_one_error_line(tmp_path):
    """Refused before any session: pyspark's Connect client would retry a closed port for
    ~10 minutes without a word (the timeout here would catch that)."""
    import socket
    import subprocess
    import sys

    write_jsonl(tmp_path / "a.jsonl", [{"t": "x"}])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nobody listens once the socket is closed
    closed = f"sc://127.0.0.1:{port}"
    cases = [
        (["--remote", "http://localhost:15002"], {}, "LC_E_USAGE",
         "--remote http://localhost:15002: not a Spark Connect URL (hint: write sc://HOST:PORT"),
        (["--remote", "sc://localhost/x"], {}, "LC_E_USAGE",
         "--remote sc://localhost/x: not a Spark Connect URL"),
        ([], {"SPARK_REMOTE": closed}, "LC_E_IO",
         f"cannot reach the Spark Connect server {closed} (127.0.0.1 port {port}): connection "
         "refused (hint: is the server up and listening there? check SPARK_REMOTE)"),
    ]
    for flags, env, code, needle in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "leakcheck_spark", "audit", "-d", f"a={tmp_path / 'a.jsonl'}",
             "--text-field", "t", "--out-dir", "out", *flags],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**{k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")},
                 **env})
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert error_code(proc.stderr) == code and needle in proc.stderr, proc.stderr
        assert not (tmp_path / "out").exists()


def test_a_connect_session_that_fails_to_start_names_grpcs_details():
    from leakcheck_spark.session import _start_error

    exc = RuntimeError('<_InactiveRpcError of RPC that terminated with:\n'
                       '\tstatus = StatusCode.UNAVAILABLE\n'
                       '\tdetails = "failed to connect to all addresses"\n'
                       '\tdebug_error_string = "UNKNOWN:Error received from peer"\n>')
    err = _start_error("sc://h:15002", exc)
    assert err.message == ("cannot start a Spark session on sc://h:15002: failed to connect to "
                           "all addresses")
    assert "--remote" in err.hint and "--master" not in err.hint
    err = _start_error("spark://h:7077", RuntimeError("boom\nat ..."))
    assert err.message == "cannot start a Spark session on spark://h:7077: boom"
    assert err.hint == "check --master (is the cluster up and reachable?) and --conf settings"


@pytest.mark.parametrize("master, ok", [
    ("local", True), ("local[2]", True), ("local[*]", True), ("local[4,3]", True),
    ("local[*, 2]", True), ("local-cluster[2,1,1024]", True), ("spark://h:7077", True),
    ("spark://h1:7077,h2:7077", True), ("yarn", True), ("k8s://https://h:443", True),
    ("bogus://x", False), ("local[0]", False), ("local[abc]", False), ("localhost", False),
    ("", False), ("mesos://h:5050", False), ("yarn-client", False), ("spark://", False),
])
def test_the_master_urls_spark_can_start(master, ok):
    from leakcheck_spark.errors import LeakcheckError
    from leakcheck_spark.session import check_master

    if ok:
        check_master(master)
    else:
        with pytest.raises(LeakcheckError) as err:
            check_master(master)
        assert err.value.code == "LC_E_USAGE"


def test_a_spark_setting_spark_refuses_is_a_usage_error_naming_it(cli, data, tmp_path):
    import subprocess
    import sys

    # A session this process builds (the CLI's usual case) and the active one (the fixture's).
    proc = subprocess.run([sys.executable, "-m", "leakcheck_spark", "audit", "-d",
                           f"a={data / 'train.jsonl'}", "--text-field", "func", "--master",
                           "local[1]", "--conf", "spark.sql.shuffle.partitions=abc", "--conf",
                           "spark.sql.ansi.enabled=true"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    rc, _, stderr = cli("audit", "-d", f"a={data / 'train.jsonl'}", "--text-field", "func",
                        "--conf", "spark.sql.shuffle.partitions=abc")
    for code, err in ((proc.returncode, proc.stderr), (rc, stderr)):
        assert code == 2 and error_code(err) == "LC_E_USAGE", err
        assert "Spark refused --conf spark.sql.shuffle.partitions=abc: The value 'abc'" in err
        assert "ansi" not in err and "bug" not in err
    # The JVM started and said nothing: no "Setting default log level" lines from Spark's shell
    # detection, and not the incubator-module warning Java prints on every start of Spark 4.
    said = proc.stderr.splitlines()
    assert len(said) == 1 and said[0].startswith("leakcheck-spark: error"), proc.stderr


def test_a_failure_no_spark_message_ties_to_a_setting_names_the_conf_settings(spark, cli,
                                                                                data):
    # spark.sql.files.maxPartitionBytes=0 is taken at start and fails the read with "step
    # cannot be 0", which names no setting.  Before: "unexpected failure ... this looks like a
    # bug in leakcheck-spark", not a word of the --conf.
    key = "spark.sql.files.maxPartitionBytes"
    with spark_conf(spark, **{key: "128MB"}):  # the CLI sets it on the tests' session
        rc, _, stderr = cli("audit", "-d", f"a={data / 'train.jsonl'}", "--text-field", "func",
                            "--conf", f"{key}=0")
    assert rc == 2 and error_code(stderr) == "LC_E_IO", stderr
    assert "step cannot be 0" in stderr and (
        f"(hint: it may come from --conf {key}=0: run again without it; if the failure stays, "
        "this looks like a bug") in stderr


def test_file_uris_and_paths_with_spaces_give_the_same_outputs(spark, cli, tmp_path):
    d = tmp_path / "in put"
    write_jsonl(d / "train.jsonl", [{"t": "int a;"}, {"t": "int b;"}, {"t": "int c;"}])
    write_jsonl(d / "test.jsonl", [{"t": "int  a;"}, {"t": "int z;"}, {"t": "int c;"}])

    def run(prefix: str, out: str) -> dict:
        base = f"{prefix}{tmp_path}/{out}"
        args = ["--text-field", "t", "--quiet"]
        code, _, _ = cli("audit", "-d", f"a:train={prefix}{d}/train.jsonl", "-d",
                         f"b:test={prefix}{d}/test.jsonl", *args, "--format", "json",
                         "--out-dir", f"{base} report")
        assert code == 0
        code, _, _ = cli("clean", "--test", f"b:test={prefix}{d}/test.jsonl", "--against",
                         f"a:train={prefix}{d}/train.jsonl", *args, "--out",
                         f"{base} clean.jsonl", "--report", f"{base} dropped.json")
        assert code == 0
        local = tmp_path / out
        report = json.loads((tmp_path / f"{out} report" / "report.json").read_text())
        overlaps = sorted(line for f in (tmp_path / f"{out} report" / "overlaps").glob("part-*")
                          for line in f.read_text().splitlines())
        # No staging left (Hadoop's checksummed local filesystem keeps .crc files of its own).
        staging = [p for p in tmp_path.glob(f".{out}*") if p.suffix != ".crc"]
        assert not staging and not local.exists()
        return {"matrix": report["split_matrix"], "overlaps": overlaps,
                "clean": (tmp_path / f"{out} clean.jsonl").read_bytes(),
                "dropped": json.loads((tmp_path / f"{out} dropped.json").read_text())["dropped"]}

    plain, uri = run("", "plain"), run("file://", "uri")
    assert plain == uri and plain["overlaps"] and plain["dropped"]
    # A non-local Hadoop URI (viewfs, mounted on tmp_path): outputs staged and moved through the
    # Hadoop FileSystem API.
    with viewfs_mount(spark) as root:
        assert run(root, "view") == plain
    assert plain["clean"] == b'{"t": "int z;"}\n'


def test_a_connect_client_without_a_filesystem_for_the_scheme_gets_a_usage_error():
    from leakcheck_spark.errors import USAGE, LeakcheckError
    from leakcheck_spark.outputs import _FsspecFiles

    with pytest.raises(LeakcheckError) as err:
        _FsspecFiles("nosuchscheme://bucket/out/report.json")
    assert err.value.code == USAGE
    assert err.value.message.startswith("cannot write nosuchscheme://bucket/out/report.json from "
                                        "this Spark Connect client: ")
    assert "fsspec" in err.value.hint and "\n" not in err.value.line()


# --- outputs: where a run may write, and all or nothing -------------------------------------


@pytest.mark.parametrize("out, what", [
    ("in", "is"), (".", "holds"), ("in/report", "lies inside"), ("in/sub/../report", "lies inside"),
])
def test_an_output_that_is_holds_or_lies_inside_an_input_is_refused(cli, tmp_path, monkeypatch,
                                                                     out, what):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"t": "int a;"}])
    before = (tmp_path / "in" / "a.jsonl").read_bytes()
    for spec in ("x=in", "x=in/*.jsonl", f"x={tmp_path / 'in'}"):
        rc, _, stderr = cli("audit", "-d", spec, "--text-field", "t", "--out-dir", out)
        assert rc == 2 and error_code(stderr) == "LC_E_USAGE", stderr
        assert f"--out-dir {out} {what} the input {spec[2:]}" in stderr
        assert sorted(p.name for p in (tmp_path / "in").iterdir()) == ["a.jsonl"]
        assert (tmp_path / "in" / "a.jsonl").read_bytes() == before


@pytest.mark.parametrize("out, what", [(".", "is"), ("{cwd}", "is"), ("..", "holds"),
                                       ("{cwd}/../", "holds")])
def test_an_output_that_is_or_holds_the_working_directory_is_refused(cli, tmp_path, monkeypatch,
                                                                     out, what):
    # The inputs live elsewhere: `--out-dir .` (or $PWD, or a parent) would replace the
    # working directory with the report and delete everything else in it.
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"t": "int a;"}])
    work = tmp_path / "work" / "here"
    work.mkdir(parents=True)
    (work / "keep.txt").write_text("precious")
    monkeypatch.chdir(work)
    out = out.format(cwd=work)
    rc, _, stderr = cli("audit", "-d", f"x={tmp_path / 'in'}", "--text-field", "t",
                        "--out-dir", out)
    assert rc == 2 and error_code(stderr) == "LC_E_USAGE", stderr
    assert f"--out-dir {out} {what} the working directory" in stderr
    assert (work / "keep.txt").read_text() == "precious"


@pytest.mark.parametrize("out", ["out[1]", "run?", "r*"])
def test_an_output_named_with_glob_characters_is_written_as_named(cli, tmp_path, monkeypatch,
                                                                  out):
    # An output is not a glob: `out[1]` is not the directory it would search (the working
    # directory, which holds the input too).
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", [{"t": "int a;"}])
    rc, _, stderr = cli("audit", "-d", "x=a.jsonl", "--text-field", "t", "--out-dir", out)
    assert rc == 0, stderr
    assert (tmp_path / out / "report.json").is_file()
    assert (tmp_path / "a.jsonl").is_file()


def test_the_config_file_and_the_images_a_list_or_table_names_are_inputs_too(cli, tmp_path,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"t": "int a;"}])
    (tmp_path / "job" / "job.toml").parent.mkdir()
    (tmp_path / "job" / "job.toml").write_text('datasets = ["x=in/a.jsonl"]\ntext-field = "t"\n')
    for flags, what in ((["--json", "job/job.toml"], "--json job/job.toml is"),
                        (["--out-dir", "job"], "--out-dir job holds")):
        rc, _, stderr = cli("audit", "--config", "job/job.toml", *flags)
        assert rc == 2 and f"{what} the input job/job.toml: writing" in stderr, stderr
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["job.toml"]
    # The images a list or a table names may be anywhere, not under the list's own path: here
    # inside what looks like an earlier output of ours, which the output guard would replace.
    rep, parts = tmp_path / "rep", tmp_path / "parts"
    (rep / "overlaps").mkdir(parents=True)
    (rep / "report.json").write_text("{}")
    (rep / "overlaps" / "0.png").write_bytes(b"not even an image")
    parts.mkdir()
    (parts / "part-0.png").write_bytes(b"not even an image")
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "l.txt").write_text("../rep/overlaps/0.png\n")
    write_jsonl(tmp_path / "lists" / "t.jsonl", [{"p": str(parts / "part-0.png")}])
    for src, flags, what, image in (
            ("lists/l.txt", ["--out-dir", "rep"], "--out-dir rep holds", rep / "overlaps" / "0.png"),
            ("lists/t.jsonl", ["--path-field", "p", "--resplit-out", "parts"],
             "--resplit-out parts holds", parts / "part-0.png")):
        rc, _, stderr = cli("images", "-d", f"x={src}", *flags)
        assert rc == 2 and error_code(stderr) == "LC_E_USAGE", stderr
        assert f"{what} the input {image} (listed in {src})" in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "job", "lists", "parts", "rep"]
    assert (rep / "overlaps" / "0.png").exists() and (parts / "part-0.png").exists()


def test_clean_may_replace_its_own_test_file_but_no_other_input(cli, tmp_path):
    write_jsonl(tmp_path / "test.jsonl", [{"t": "int a;"}, {"t": "int z;"}])
    write_jsonl(tmp_path / "train.jsonl", [{"t": "int a;"}])
    test, train = tmp_path / "test.jsonl", tmp_path / "train.jsonl"
    for flags in (["--out", train], ["--out", tmp_path / "c.jsonl", "--report", test],
                  ["--out", tmp_path / "c.jsonl", "--json", train]):
        rc, _, stderr = cli("clean", "--test", f"b={test}", "--against", f"a={train}",
                            "--text-field", "t", *flags)
        code = (json_error_code if "--json" in flags else error_code)(stderr)
        assert rc == 2 and code == "LC_E_USAGE" and "is the input" in stderr
    assert train.read_text() == '{"t": "int a;"}\n' and not (tmp_path / "c.jsonl").exists()
    rc, _, _ = cli("clean", "--test", f"b={test}", "--against", f"a={train}", "--text-field", "t",
                   "--out", test, "--report", tmp_path / "r.json")
    assert rc == 0 and test.read_text() == '{"t": "int z;"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "test.jsonl", "train.jsonl"]


@pytest.mark.parametrize("command, flag", [
    ("audit", "--out-dir"), ("audit", "--json"), ("clean", "--out"), ("clean", "--report"),
    ("clean", "--json"),
])
def test_an_empty_output_path_is_a_usage_error(cli, data, monkeypatch, command, flag):
    monkeypatch.chdir(data)
    sources = (["-d", "p=train.jsonl"] if command == "audit" else
               ["--test", "p=test.jsonl", "--against", "q=train.jsonl"]
               + ([] if flag == "--out" else ["--out", "c.jsonl"]))
    rc, stdout, stderr = cli(command, *sources, "--text-field", "func", flag, "")
    assert rc == 2 and f"{flag} is empty" in stderr and not stdout
    assert sorted(p.name for p in data.iterdir()) == ["test.jsonl", "train.jsonl"]


def test_outputs_that_overlap_or_sit_under_a_file_are_refused_before_any_work(cli, data):
    (data / "afile").write_text("x")
    base = ["--test", f"p={data / 'test.jsonl'}", "--against", f"q={data / 'train.jsonl'}",
            "--text-field", "func"]
    rc, _, stderr = cli("clean", *base, "--out", data / "c1.jsonl", "--report",
                        data / "afile" / "r.json")
    assert rc == 2 and error_code(stderr) == "LC_E_IO" and "afile is not a directory" in stderr
    rc, _, stderr = cli("audit", "-d", f"p={data / 'train.jsonl'}", "--text-field", "func",
                        "--out-dir", data / "rep", "--json", data / "rep" / "j.json")
    assert rc == 2 and json_error_code(stderr) == "LC_E_USAGE" and "overlap" in stderr
    (data / "adir").mkdir()
    rc, _, stderr = cli("clean", *base, "--out", data / "c1.jsonl", "--report", data / "adir")
    assert rc == 2 and error_code(stderr) == "LC_E_USAGE" and "adir is a directory" in stderr
    assert sorted(p.name for p in data.iterdir()) == ["adir", "afile", "test.jsonl",
                                                      "train.jsonl"]


def test_a_failure_after_the_first_output_puts_back_what_was_there(cli, data, monkeypatch):
    from leakcheck_spark import outputs

    real_open = outputs._LocalFiles._open_write

    def refuse_json(self, path):
        if "j.json" in path:
            raise PermissionError(13, "Permission denied")
        return real_open(self, path)

    monkeypatch.setattr(outputs._LocalFiles, "_open_write", refuse_json)
    (data / "rep").mkdir()  # an earlier --out-dir: this run replaces it
    (data / "rep" / "report.json").write_text("old")
    (data / "c1.jsonl").write_text("old")
    for command in (["audit", "-d", f"p={data / 'train.jsonl'}", "--out-dir", data / "rep"],
                    ["clean", "--test", f"p={data / 'test.jsonl'}", "--against",
                     f"q={data / 'train.jsonl'}", "--out", data / "c1.jsonl", "--report",
                     data / "new" / "r.json"]):
        rc, _, stderr = cli(*command, "--text-field", "func", "--json", data / "sub" / "j.json")
        assert rc == 2 and json_error_code(stderr) == "LC_E_IO", stderr
        assert "cannot write" in stderr and "Permission denied" in stderr
        assert sorted(p.name for p in data.iterdir()) == ["c1.jsonl", "rep", "test.jsonl",
                                                          "train.jsonl"]
        assert [p.name for p in (data / "rep").iterdir()] == ["report.json"]
        assert (data / "c1.jsonl").read_text() == "old"


def test_sigterm_rolls_back_like_ctrl_c_with_exit_143(cli, data, monkeypatch):
    import os
    import signal

    from leakcheck_spark import outputs

    def not_handled(*_):
        raise RuntimeError("SIGTERM reached the test's own handler")

    real_open = outputs._LocalFiles._open_write

    def terminate(self, path):  # as `timeout` or a scheduler would, once --out-dir is in place
        if "j.json" in path:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_open(self, path)

    monkeypatch.setattr(outputs._LocalFiles, "_open_write", terminate)
    (data / "rep").mkdir()  # an earlier --out-dir: this run replaces it
    (data / "rep" / "report.json").write_text("old")
    previous = signal.signal(signal.SIGTERM, not_handled)
    try:
        rc, _, stderr = cli("audit", "-d", f"p={data / 'train.jsonl'}", "--text-field", "func",
                            "--out-dir", data / "rep", "--json", data / "j.json")
        assert signal.getsignal(signal.SIGTERM) is not_handled  # main's handler is main's only
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert rc == 143 and stderr.strip().endswith("leakcheck-spark: interrupted (SIGTERM)"), stderr
    assert sorted(p.name for p in data.iterdir()) == ["rep", "test.jsonl", "train.jsonl"]
    assert [p.name for p in (data / "rep").iterdir()] == ["report.json"]


def _wait_until(condition, what: str, seconds: float = 120) -> None:
    """Poll `condition` (bounded: a test never hangs on a run that went wrong)."""
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("signum, raised", [("SIGTERM", "Terminated"),
                                            ("SIGINT", "KeyboardInterrupt")])
def test_an_interrupted_write_stops_its_spark_tasks_before_rolling_back(spark, tmp_path, caplog,
                                                                       signum, raised):
    # A signal in the middle of a write, with main's handlers: the rollback removes the staging
    # directory, so the write's tasks must be stopped first, or they recreate it and fill it.
    # And no Py4J traceback: PySpark's own Ctrl-C handler makes a JVM call from inside the one
    # the main thread is blocked in, which fails (and logs it) as a reentrant read.
    import os
    import signal
    import threading
    import time

    from leakcheck_spark import cli, outputs

    marker = str(tmp_path / "writing")

    def slow(batches):
        for batch in batches:
            with open(marker, "a") as fh:
                fh.write("x")
            time.sleep(0.2)
            yield batch

    def signal_once_writing():
        _wait_until(lambda: os.path.exists(marker), "the write to start")
        os.kill(os.getpid(), getattr(signal, signum))

    args = cli.build_parser().parse_args(["fingerprint", "-d", "x=y"])
    pyspark_handler = signal.getsignal(signal.SIGINT)  # the fixture's SparkContext installed it
    assert pyspark_handler is not signal.default_int_handler
    tracker = spark.sparkContext.statusTracker()
    earlier = set(tracker.getJobIdsForGroup())  # other tests' jobs
    with cli._quiet_py4j(), cli._signals_unwind():
        # A run builds its SparkContext inside main, which installs PySpark's handler again.
        signal.signal(signal.SIGINT, pyspark_handler)
        session = cli._session(args)
        rows = session.range(0, 40, numPartitions=8).mapInPandas(slow, "id long")
        threading.Thread(target=signal_once_writing, daemon=True).start()
        with pytest.raises(getattr(cli, raised, KeyboardInterrupt)), outputs.all_or_nothing():
            outputs.write_rows(rows, str(tmp_path / "out" / "rows"), "parquet", ["id"], ["id"])
    # Nothing of the write runs once the rollback is done (the process would end here).
    write = [j for j in tracker.getJobIdsForGroup() if j not in earlier]
    assert write and not outputs._busy(tracker, write), [tracker.getJobInfo(j) for j in write]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["writing"]
    assert not [r for r in caplog.records if "sending command" in r.getMessage()], caplog.text


def test_an_interrupted_write_waits_for_the_job_its_spark_call_starts_after_the_cancel(spark,
                                                                                      tmp_path):
    # Interrupted while the write's JVM call still plans (a Python data source's partitions()):
    # no job runs yet, so a cancel finds none, and the call starts its job after the rollback --
    # which then writes into the staging path the rollback removed.  The rollback must wait
    # until the call has returned, cancelling what it starts.
    import os
    import signal
    import threading
    import time

    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from leakcheck_spark import cli, outputs

    planning, go = str(tmp_path / "planning"), str(tmp_path / "go")

    class Reader(DataSourceReader):
        def partitions(self):
            open(planning, "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.01)
            return [InputPartition(i) for i in range(4)]

        def read(self, partition):
            for i in range(10):
                yield (partition.value * 10 + i,)

    class SlowPlanning(DataSource):
        @classmethod
        def name(cls):
            return "leakcheck_test_slow_planning"

        def schema(self):
            return "id long"

        def reader(self, schema):
            return Reader()

    def signal_once_planning():
        _wait_until(lambda: os.path.exists(planning), "the write to plan")
        os.kill(os.getpid(), signal.SIGTERM)
        open(go, "w").close()

    spark.dataSource.register(SlowPlanning)
    rows = spark.read.format("leakcheck_test_slow_planning").load()
    tracker = spark.sparkContext.statusTracker()
    earlier = set(tracker.getJobIdsForGroup())
    with cli._quiet_py4j(), cli._signals_unwind():
        threading.Thread(target=signal_once_planning, daemon=True).start()
        with pytest.raises(cli.Terminated), outputs.all_or_nothing():
            with outputs.staged(spark, str(tmp_path / "out" / "rows")) as staging:
                outputs.write_table(rows, staging, "parquet")  # one job: the write's
    # Whatever ran late has ended by now; the write's job (cancelled) wrote nothing that stays.
    _wait_until(lambda: (write := [j for j in tracker.getJobIdsForGroup() if j not in earlier])
                and not outputs._busy(tracker, write), "the write's job to end")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "planning"]


def test_a_jvm_that_dies_mid_run_is_one_error_line_and_leaves_no_output(data):
    # Killed (the OOM killer, say) between two Spark calls of the run: LC_E_IO, not "a bug in
    # leakcheck-spark" after a Py4J connection error and the accumulator server's traceback.
    import signal
    import subprocess
    import sys
    import threading

    proc = subprocess.Popen(
        [sys.executable, "-m", "leakcheck_spark", "clean", "--test", f"p={data / 'test.jsonl'}",
         "--against", f"q={data / 'train.jsonl'}", "--text-field", "func", "--out",
         data / "out" / "c.jsonl", "--master", "local[1]"],
        stderr=subprocess.PIPE, text=True, cwd=data)
    watchdog = threading.Timer(300, proc.kill)  # a test never hangs on a run that went wrong
    watchdog.start()
    try:
        stderr = ""
        for line in proc.stderr:
            stderr += line
            if "read 2 sources" in line:  # the run has Spark work left: cleaning, writing
                jvm = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                     text=True).stdout.split()
                assert jvm, "no JVM child"
                for pid in jvm:
                    os.kill(int(pid), signal.SIGKILL)
        rc = proc.wait()
    finally:
        watchdog.cancel()
        proc.kill()
    assert rc == 2 and error_code(stderr) == "LC_E_IO", stderr
    assert "lost the connection to Spark's JVM" in stderr and "Traceback" not in stderr, stderr
    assert sorted(p.name for p in data.iterdir()) == ["test.jsonl", "train.jsonl"]


def test_a_failed_runs_cache_is_released_without_hiding_its_error(spark):
    # A JVM out of memory fails the unpersist of the failed run's cache too (a Py4JJavaError
    # "calling o101.unpersist"), which replaced the run's own error: release() goes on quietly.
    from leakcheck_spark.session import release

    class Gone:
        def __init__(self) -> None:
            self.tried = False

        def unpersist(self) -> None:
            self.tried = True
            raise RuntimeError("An error occurred while calling o101.unpersist")

    cached = spark.range(3).cache()
    cached.count()
    frames = [Gone(), cached, Gone()]
    release(frames)
    assert frames[0].tried and frames[2].tried and not cached.is_cached


def test_a_python_worker_that_crashes_is_one_io_error_line(spark, tmp_path):
    # The OOM killer (here: SIGKILL) ending a task's Python worker: LC_E_IO with a hint, not
    # "unexpected failure: Py4JJavaError ... a bug in leakcheck-spark".
    import signal

    from leakcheck_spark import errors

    def crash(batches):
        for batch in batches:
            os.kill(os.getpid(), signal.SIGKILL)
            yield batch

    with pytest.raises(Exception) as info:  # noqa: PT011 - Spark's own exception
        spark.range(4, numPartitions=1).mapInPandas(crash, "id long").write.parquet(
            str(tmp_path / "out"))
    err = errors.from_spark_exception(info.value)
    assert err is not None and err.code == "LC_E_IO", str(info.value)[:500]
    assert LINE.match(err.line()) and "Python worker of a Spark task crashed" in err.message


def test_a_cancelled_job_and_a_jvm_out_of_memory_are_one_io_error_line(spark):
    # A notebook's other thread (cancelAllJobs), Spark UI's kill link: a Java trace of
    # SPARK_JOB_CANCELLED, or "unexpected failure ... a bug" from the CLI.  Likewise the
    # driver's heap filling up in a long notebook session.
    import threading
    import time

    from leakcheck_spark import errors

    def slow(batches):
        for batch in batches:
            time.sleep(30)
            yield batch

    sc = spark.sparkContext

    def cancel_when_running() -> None:
        deadline = time.monotonic() + 60
        while not sc.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
            time.sleep(0.1)
        sc.cancelAllJobs()

    canceller = threading.Thread(target=cancel_when_running)
    canceller.start()
    try:
        with pytest.raises(Exception) as info:  # noqa: PT011 - Spark's own exception
            spark.range(2, numPartitions=1).mapInPandas(slow, "id long").collect()
    finally:
        canceller.join()
    err = errors.from_spark_exception(info.value)
    assert err is not None and err.code == "LC_E_IO", str(info.value)[:2000]
    assert LINE.match(err.line()) and " of this run was cancelled (" in err.message, err.line()
    for text, said in (
            ("py4j.protocol.Py4JJavaError: An error occurred while calling o81.count.\n: "
             "java.lang.OutOfMemoryError: Java heap space\n\tat java.base/...",
             "Spark ran out of memory (OutOfMemoryError: Java heap space)"),
            ("org.apache.spark.SparkException: Not enough memory to build and broadcast the "
             "table to all worker nodes. As a workaround, ...",
             "Spark ran out of memory (building a broadcast table)")):
        err = errors.from_spark_exception(RuntimeError(text))
        assert err is not None and err.code == "LC_E_IO" and err.message == said
        assert "spark.driver.memory" in err.hint


def test_a_python_worker_spark_cannot_start_is_one_io_error_line(spark, tmp_path):
    # PYSPARK_PYTHON naming no program, or another Python, one without pandas or leakcheck-spark
    # (here ours without its site-packages): the cause, not "unexpected failure ... a bug" (or,
    # for a file that cannot be run, a hint about the inputs).
    import stat
    import sys

    from leakcheck_spark import errors

    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n', encoding="utf-8")
    bare.chmod(bare.stat().st_mode | stat.S_IXUSR)
    sc = spark.sparkContext
    kept = sc.pythonExec
    for program, said in (
            (tmp_path / "no-python", f"cannot run {tmp_path / 'no-python'}: no such file or "
             "directory"),
            (tmp_path, f"cannot run {tmp_path}: permission denied"),
            (bare, "Spark's Python workers cannot import ")):
        sc.pythonExec = str(program)  # what a UDF's worker is started with
        try:
            with pytest.raises(Exception) as info:  # noqa: PT011 - Spark's own exception
                spark.range(2, numPartitions=1).mapInPandas(lambda it: it, "id long").collect()
        finally:
            sc.pythonExec = kept
        err = errors.from_spark_exception(info.value)
        assert err is not None and err.code == "LC_E_IO", str(info.value)[:2000]
        assert LINE.match(err.line()) and said in err.message, err.line()
        assert "PYSPARK_PYTHON" in err.hint


def test_what_a_killed_run_left_is_restored_or_reported_never_deleted(tmp_path, caplog):
    from leakcheck_spark import outputs

    final = tmp_path / "out"
    old, tmp = tmp_path / ".out.lc-old-0a1b2c3d4e", tmp_path / ".out.lc-tmp-5f6a7b8c9d"
    old.mkdir()
    (old / "part-0.json").write_text("old")
    (tmp / "half").mkdir(parents=True)
    with pytest.raises(RuntimeError), outputs.all_or_nothing():
        with outputs.staged(None, str(final)) as staging:
            Path(staging).mkdir()
            (Path(staging) / "part-1.json").write_text("new")
        raise RuntimeError("this run fails too")
    # The output the killed run had set aside is back in place; its staging is only reported.
    assert sorted(p.name for p in tmp_path.iterdir()) == [tmp.name, "out"]
    assert [p.name for p in final.iterdir()] == ["part-0.json"]
    assert f"restored {final} from {old}" in caplog.text
    assert f"{tmp} was left beside {final} by an interrupted run" in caplog.text
    old.mkdir()  # one set aside beside the output: which is the user's latest is unknown
    caplog.clear()
    with outputs.all_or_nothing(), outputs.staged(None, str(final)) as staging:
        Path(staging).mkdir()
        (Path(staging) / "part-1.json").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == [old.name, tmp.name, "out"]
    assert [p.name for p in final.iterdir()] == ["part-1.json"]
    assert f"{old} was left beside {final}" in caplog.text and "restored" not in caplog.text


def test_json_file_gets_its_parent_directories(cli, data):
    rc, _, _ = cli("audit", "-d", f"p={data / 'train.jsonl'}", "--text-field", "func", "--json",
                   data / "a" / "b" / "j.json")
    assert rc == 0 and json.loads((data / "a" / "b" / "j.json").read_text())["groups"]


def test_a_move_into_place_that_fails_keeps_the_old_output_and_removes_the_staging(tmp_path,
                                                                                    monkeypatch):
    from leakcheck_spark import outputs
    from leakcheck_spark.errors import LeakcheckError

    final = tmp_path / "out"
    final.mkdir()
    (final / "part-0.json").write_text("old")
    real = outputs._LocalFiles._rename

    def fail_into_place(self, src, dst):
        if ".lc-tmp-" in src:
            raise OSError(28, "No space left on device")
        return real(self, src, dst)

    monkeypatch.setattr(outputs._LocalFiles, "_rename", fail_into_place)
    with pytest.raises(LeakcheckError) as err, outputs.staged(None, str(final)) as tmp:
        Path(tmp).mkdir()
        (Path(tmp) / "part-1.json").write_text("new")
    assert err.value.code == "LC_E_IO" and "No space left" in err.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert [p.name for p in final.iterdir()] == ["part-0.json"]


def test_all_or_nothing_restores_every_output_of_a_failed_block(tmp_path):
    from leakcheck_spark import outputs

    (tmp_path / "a.json").write_text("old a")
    with pytest.raises(RuntimeError), outputs.all_or_nothing():
        outputs.write_text_file(None, str(tmp_path / "a.json"), "new a")
        outputs.write_text_file(None, str(tmp_path / "new" / "dir" / "b.json"), "new b")
        assert (tmp_path / "a.json").read_text() == "new a"
        raise RuntimeError("a later failure")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    assert (tmp_path / "a.json").read_text() == "old a"
    with outputs.all_or_nothing():
        outputs.write_text_file(None, str(tmp_path / "a.json"), "new a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    assert (tmp_path / "a.json").read_text() == "new a"


UNWRITABLE = Path("/proc/leakcheck-spark-out")  # Linux: no one, not even root, creates files here


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("command, args", [
    ("clean", ["--test", "p={test}", "--out", f"{UNWRITABLE}.jsonl"]),
    ("clean", ["--test", "p={test}", "--out", UNWRITABLE]),
    ("resplit", ["-d", "p={test}", "--out", f"{UNWRITABLE}.csv"]),
])
def test_an_output_place_spark_cannot_write_is_an_io_error_naming_it(cli, data, command, args):
    args = [str(a).format(test=data / "test.jsonl") for a in args]
    rc, _, stderr = cli(command, *args, "--text-field", "func")
    assert rc == 2 and error_code(stderr) == "LC_E_IO", stderr
    assert f"cannot write {args[-1]}: IOException: Mkdirs failed" in stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_an_out_dir_spark_cannot_write_is_one_line_without_a_java_trace(data):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "leakcheck_spark", "audit", "-d",
                           f"p={data / 'train.jsonl'}", "--text-field", "func", "--quiet",
                           "--out-dir", UNWRITABLE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and error_code(proc.stderr) == "LC_E_IO", proc.stderr
    assert f"cannot write {UNWRITABLE}: IOException" in proc.stderr
    assert "Aborting task" not in proc.stderr and "java.io" not in proc.stderr.split("error [")[0]


def test_a_worker_spark_kills_mid_stream_prints_no_python_traceback(tmp_path):
    # The truncated end of the gzip stream fails the task while its Python worker is still
    # streaming texts; Spark closes the worker's socket, and PySpark's own daemon printed a
    # BrokenPipeError traceback for that worker, before or after the error line (2 runs of 2
    # with --conf spark.python.daemon.module=pyspark.daemon; 10 of 10 with the short last row
    # that failed the task the same way before such rows became row errors).
    import gzip
    import subprocess
    import sys

    rows = 100_000
    bad = tmp_path / "a.csv.gz"
    data = gzip.compress(("id,text\n" + "".join(f"{i},text number {i}\n" for i in range(rows)))
                         .encode())
    bad.write_bytes(data[:-40])
    proc = subprocess.run([sys.executable, "-m", "leakcheck_spark", "fingerprint", "-d",
                           f"x={bad}", "--text-field", "text"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and error_code(proc.stderr) == "LC_E_BAD_FORMAT", proc.stderr
    assert f"cannot read {bad}" in proc.stderr
    assert ("(hint: the file is damaged, or not compressed as its name says: check it with "
            f"gzip -t {bad})") in proc.stderr
    assert "BrokenPipeError" not in proc.stderr, proc.stderr


def test_the_daemon_of_a_cli_session_forks_workers_that_report_a_udf_failure(tmp_path):
    # Sessions the CLI builds fork their Python workers from leakcheck_spark._daemon; the
    # library's sessions keep PySpark's, and a user's own choice of daemon is kept.  A UDF that
    # raises still fails the query with its own message.  (The library's session comes first:
    # the settings of a process's first session become its JVM's defaults.)
    script = (
        "import os, pandas as pd\n"
        "import pyspark.sql.functions as F\n"
        "from leakcheck_spark.session import get_session\n"
        "KEY = 'spark.python.daemon.module'\n"
        "s = get_session('local[1]')\n"
        "print(s.conf.get(KEY, None))\n"
        "s.stop()\n"
        "s = get_session('local[1]', quiet_workers=True)\n"
        "@F.pandas_udf('string')\n"
        "def parent(s: pd.Series) -> pd.Series:\n"
        "    with open(f'/proc/{os.getppid()}/cmdline', 'rb') as f:\n"
        "        cmd = f.read().split(b'\\0')\n"
        "    return s.map(lambda _: cmd[cmd.index(b'-m') + 1].decode())\n"
        "@F.pandas_udf('string')\n"
        "def boom(s: pd.Series) -> pd.Series:\n"
        "    raise ValueError('boom in a UDF')\n"
        "print(s.conf.get(KEY), s.range(1).select(parent('id')).first()[0])\n"
        "try:\n"
        "    s.range(1).select(boom('id')).collect()\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, 'boom in a UDF' in str(exc))\n"
        "s.stop()\n"
        "s = get_session('local[1]', conf=[(KEY, 'pyspark.daemon')], quiet_workers=True)\n"
        "print(s.conf.get(KEY))\n"
    )
    assert _python(script, tmp_path)[-4:] == [
        "None", "leakcheck_spark._daemon leakcheck_spark._daemon", "PythonException True",
        "pyspark.daemon"]


def test_jobs_leakcheck_runs_the_command_named_first():
    # spark-submit had an entry point for audit and clean only (jobs/audit.py, jobs/clean.py):
    # resplit, images, fingerprint and check had none.  No JVM here: --help and a missing
    # command end before Spark.
    import subprocess
    import sys

    script = str(Path(__file__).resolve().parents[1] / "jobs" / "leakcheck.py")
    helped = subprocess.run([sys.executable, script, "resplit", "--help"], capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith(
        "usage: leakcheck-spark resplit"), helped.stderr
    bare = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and error_code(bare.stderr) == "LC_E_USAGE", bare.stderr
    assert "no command given" in bare.stderr


def test_the_daemon_imports_neither_pandas_nor_pyarrow_before_it_forks(tmp_path):
    # Importing pyarrow before a fork can deadlock the child (SPARK-54456): the workers import
    # them after the fork.
    script = ("import sys, leakcheck_spark._daemon\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'pyarrow'}))")
    assert _python(script, tmp_path) == ["[]"]


def _mine(path: Path, *names: str) -> Path:
    """A directory at `path` holding files `names` (a user's, or an earlier output)."""
    path.mkdir(parents=True)
    for name in names:
        (path / name).write_text("mine")
    return path


@pytest.mark.parametrize("command, flag", [
    (["audit", "-d", "p={train}", "--text-field", "func"], "--out-dir"),
    (["check", "--train", "{train}", "--eval", "{test}", "--field", "func"], "--out-dir"),
    (["clean", "--test", "p={test}", "--text-field", "func"], "--out"),
    (["resplit", "-d", "p={train}", "--text-field", "func"], "--out"),
    (["images", "-d", "p={imgs}"], "--out-dir"),
    (["images", "-d", "p={imgs}"], "--resplit-out"),
])
def test_an_output_never_replaces_a_directory_of_the_users(cli, data, command, flag):
    # Before: "an existing DIR is replaced": --out-dir ~/projects deleted everything in it.
    _mine(data / "imgs", "0.png")
    mine = _mine(data / "mine", "notes.txt", "b.txt", "c.txt", "d.txt")
    argv = [a.format(train=data / "train.jsonl", test=data / "test.jsonl", imgs=data / "imgs")
            for a in command]
    rc, _, stderr = cli(*argv, flag, mine)
    assert rc == 2 and error_code(stderr) == "LC_E_USAGE", stderr
    assert (f"{flag} {mine} exists and is not a leakcheck-spark output (it holds b.txt, c.txt, "
            "d.txt, ...)") in stderr and "give a new path, or remove it first" in stderr
    assert sorted(p.name for p in mine.iterdir()) == ["b.txt", "c.txt", "d.txt", "notes.txt"]
    assert sorted(p.name for p in data.iterdir()) == ["imgs", "mine", "test.jsonl",
                                                      "train.jsonl"]


def test_an_earlier_output_or_an_empty_directory_is_replaced(cli, data):
    runs = [(["audit", "-d", f"p={data / 'train.jsonl'}", "--text-field", "func", "--out-dir"],
             "report.json"),
            (["check", "--train", data / "train.jsonl", "--eval", data / "test.jsonl",
              "--field", "func", "--out-dir"], "report.json"),
            (["clean", "--test", f"p={data / 'test.jsonl'}", "--text-field", "func",
              "--format", "json", "--out"], "_SUCCESS"),
            (["resplit", "-d", f"p={data / 'train.jsonl'}", "--text-field", "func",
              "--format", "csv", "--out"], "_SUCCESS")]
    for i, (argv, marker) in enumerate(runs):
        out = _mine(data / f"o{i}")  # empty
        for _ in range(2):  # then the output of the first run
            rc, _, stderr = cli(*argv, out)
            assert rc in (0, 1), stderr
            assert (out / marker).exists()
    # What the other writers leave looks like one too: part files with Hadoop's checksums and
    # no marker, or an --out-dir list of another command beside report.json.
    for argv, names in ((runs[2][0], ["part-00000.json", ".part-00000.json.crc"]),
                        (runs[0][0], ["report.json", "records", "hashes"])):
        out = _mine(data / "other", *names)
        rc, _, stderr = cli(*argv, out)
        assert rc in (0, 1) and not (out / names[1]).exists(), stderr
        shutil.rmtree(out)


def test_clean_in_place_of_a_test_directory_of_the_users_is_refused(cli, tmp_path):
    # Its own --test file is cleaned in place; a directory of the user's files is not replaced.
    test = write_jsonl(tmp_path / "t" / "a.jsonl", [{"t": "int a;"}, {"t": "int a;"}]).parent
    rc, _, stderr = cli("clean", "--test", f"b={test}", "--text-field", "t", "--dedup",
                        "--out", test)
    assert rc == 2 and error_code(stderr) == "LC_E_USAGE", stderr
    assert "(it holds a.jsonl)" in stderr
    assert [p.name for p in test.iterdir()] == ["a.jsonl"]


def test_a_non_local_output_never_replaces_a_directory_of_the_users(cli, spark, data):
    # Through the Hadoop FileSystem (viewfs over local files): checked as soon as the session
    # is up, and again by the library's write.
    import leakcheck_spark as L

    mine, earlier = _mine(data / "mine", "notes.txt"), _mine(data / "earlier", "report.json")
    audit = ["audit", "-d", f"p={data / 'train.jsonl'}", "--text-field", "func", "--out-dir"]
    with viewfs_mount(spark) as root:
        rc, _, stderr = cli(*audit, f"{root}{mine}")
        assert rc == 2 and error_code(stderr) == "LC_E_USAGE", stderr
        assert (f"--out-dir {root}{mine} exists and is not a leakcheck-spark output (it holds "
                "notes.txt)") in stderr
        res = L.audit([L.Source("p", str(data / "train.jsonl"), text_field="func")],
                      spark=spark)
        with pytest.raises(L.LeakcheckError) as err:
            res.write(f"{root}{mine}")
        assert err.value.code == "LC_E_USAGE" and "(it holds notes.txt)" in err.value.message
        res.unpersist()
        rc, _, stderr = cli(*audit, f"{root}{earlier}")
        assert rc == 0, stderr
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert (earlier / "overlaps").is_dir()


@pytest.mark.parametrize("kind, names, ok", [
    ("report", [], True),
    ("report", ["report.json"], True),
    ("report", ["report.json", "overlaps", "label_conflicts"], True),
    ("report", ["report.json", "notes.txt"], False),
    ("report", ["overlaps"], False),
    ("report", [".git"], False),
    # what a file browser leaves behind is no user's data
    ("report", ["report.json", ".DS_Store", "overlaps"], True),
    ("report", [".DS_Store", "notes.txt"], False),
    ("parts", ["Thumbs.db"], True),
    ("parts", ["part-00000.json", ".part-00000.json.crc", "_SUCCESS", "._SUCCESS.crc"], True),
    ("parts", ["_SUCCESS"], True),
    ("parts", ["part-00000-x.snappy.parquet"], True),
    ("parts", ["part-00000.json", "notes.txt"], False),
    ("parts", ["_SUCCESS", ".git"], False),
    ("parts", ["_temporary"], False),
    ("parts", ["report.json"], False),
    ("file", [], True),
    ("file", ["part-00000.json"], False),
])
def test_what_counts_as_an_output_of_ours(tmp_path, kind, names, ok):
    from leakcheck_spark import outputs
    from leakcheck_spark.errors import LeakcheckError

    out = _mine(tmp_path / "out", *names)
    if ok:
        outputs.check_replaceable(None, str(out), kind)
        with outputs.staged(None, str(out), kind) as tmp:
            _mine(Path(tmp), "part-new")
        assert [p.name for p in out.iterdir()] == ["part-new"]
        return
    with pytest.raises(LeakcheckError) as err, outputs.staged(None, str(out), kind) as tmp:
        _mine(Path(tmp), "part-new")
    assert err.value.code == "LC_E_USAGE" and f"{out} exists and is not" in err.value.message
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    with pytest.raises(LeakcheckError):  # a report file over a directory of anything
        outputs.write_text_file(None, str(out), "{}")
    assert sorted(p.name for p in out.iterdir()) == sorted(names)


def test_an_output_of_the_other_kind_is_refused_not_replaced(cli, data):
    """A file where a run writes a directory, or a directory where it writes one file, is not an
    earlier output: it is refused before any work, and kept."""
    (data / "afile").write_text("mine")
    (data / "adir.jsonl").mkdir()
    (data / "adir.jsonl" / "keep").write_text("mine")
    clean = ["clean", "--test", f"p={data / 'test.jsonl'}", "--text-field", "func", "--out"]
    for argv, needle in (
        (["audit", "-d", f"p={data / 'train.jsonl'}", "--text-field", "func", "--out-dir",
          data / "afile"], "is a file"),
        ([*clean, data / "afile"], "is a file"),
        ([*clean, data / "adir.jsonl"], "is a directory"),
        (["resplit", "-d", f"p={data / 'train.jsonl'}", "--text-field", "func", "--out",
          data / "afile"], "is a file"),
    ):
        rc, _, stderr = cli(*argv)
        assert rc == 2 and error_code(stderr) == "LC_E_USAGE" and needle in stderr, stderr
    assert (data / "afile").read_text() == "mine"
    assert (data / "adir.jsonl" / "keep").read_text() == "mine"
    assert sorted(p.name for p in data.iterdir()) == ["adir.jsonl", "afile", "test.jsonl",
                                                      "train.jsonl"]


def test_two_specs_of_one_group_reading_one_file_are_refused(cli, data):
    # Different specs (a directory and a glob in it), the same file: found from the files read.
    code, _, stderr = cli("audit", "-d", f"x:train={data}", "-d", f"x:train={data / 'tr*.jsonl'}",
                          "-d", f"x:test={data / 'test.jsonl'}", "--text-field", "func")
    assert code == 2 and error_code(stderr) == "LC_E_USAGE", stderr
    assert f"both read {data / 'train.jsonl'}" in stderr, stderr


@pytest.mark.parametrize("argv, needle", [
    # A forgotten :SPLIT: b's rows would be a group x/all beside x/train.
    (["audit", "-d", "x:train=train.jsonl", "-d", "x=test.jsonl"],
     "dataset 'x' is given as x:train=train.jsonl and as x=test.jsonl, whose rows have no split"),
    # The same source twice: every record would be an internal duplicate of its copy.
    (["audit", "-d", "x=train.jsonl", "-d", "x=./train.jsonl"], "x=./train.jsonl is given twice"),
    (["clean", "--test", "x:t=train.jsonl", "--against", "x:t=train.jsonl", "--out", "o.jsonl"],
     "x:t=train.jsonl is given twice"),
    # Overrides that no source of the dataset would use.
    (["audit", "-d", "x=train.jsonl", "-o", "x.hf_split=train"],
     "-o x.hf_split=train: hf_split is for Hugging Face sources (hf:ORG/NAME), and no source of "
     "'x' is one (hint: drop -o x.hf_split=)"),
    (["audit", "-d", "x=train.jsonl", "-o", "x.config=c"], "-o x.config=c: config is for"),
    (["audit", "-d", "x:train=train.jsonl", "-o", "x.split=s"],
     "-o x.split=s: no source of 'x' reads a split column"),
])
def test_sources_that_would_be_misread_are_refused_before_spark_starts(data, monkeypatch, capsys,
                                                                       argv, needle):
    import leakcheck_spark.session
    from leakcheck_spark import Source, audit
    from leakcheck_spark.cli import main
    from leakcheck_spark.errors import LeakcheckError

    def no_session(*_, **__):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(leakcheck_spark.session, "get_session", no_session)
    monkeypatch.setattr(leakcheck_spark.session, "session_or_default", no_session)
    monkeypatch.chdir(data)
    assert main([*argv, "--text-field", "func"]) == 2
    stderr = capsys.readouterr().err
    assert error_code(stderr) == "LC_E_USAGE" and needle in stderr, stderr
    # A split column, or an hf: dataset's own splits, give the split-less source its splits.
    assert main(["audit", "-d", "x:train=train.jsonl", "-d", "x=test.jsonl", "--split-field", "s",
                 "--text-field", "func"]) == 2
    assert "Spark was started" in capsys.readouterr().err
    # The library refuses the same.
    src = Source("x", "train.jsonl", text_field="func")
    with pytest.raises(LeakcheckError, match="given twice"):
        audit([src, src])
    with pytest.raises(LeakcheckError, match="hf_split 'train' given for x=train.jsonl, which is "
                       "not a Hugging Face source"):
        Source("x", "train.jsonl", hf_split="train")


def test_no_command_or_an_abbreviated_required_option_is_one_usage_line(cli):
    rc, out, err = cli()
    assert (rc, out) == (2, "")
    assert err == ("leakcheck-spark: error [LC_E_USAGE]: no command given (hint: commands: audit, "
                   "clean, resplit, images, fingerprint, check; run 'leakcheck-spark --help')\n")
    # The abbreviation is named, not the option it abbreviates as missing.
    rc, out, err = cli("check", "--tr", "a.jsonl", "--eval", "b.jsonl")
    assert (rc, out) == (2, "")
    assert err == ("leakcheck-spark: error [LC_E_USAGE]: unrecognized arguments: --tr (hint: run "
                   "'leakcheck-spark check --help')\n")
    rc, _, err = cli("check", "--eval", "b.jsonl")
    assert rc == 2 and "the following arguments are required: --train" in err


def test_a_container_locale_and_a_closed_stdout_still_give_the_whole_run(tmp_path):
    import subprocess
    import sys

    # LC_ALL=C (Docker, CI scripts): Python reads its arguments as UTF-8 (its UTF-8 mode) while
    # Java would name files in ASCII, and é.jsonl was "no such file".  Run with stdout closed
    # (`>&-`): the report has nowhere to go, which is no failure of the run ("unexpected failure
    # ... a bug" after the outputs were written).
    d = tmp_path / "données"
    write_jsonl(d / "é.jsonl", [{"t": "int a;"}, {"t": "int b;"}])
    write_jsonl(d / "tr.jsonl", [{"t": "int  a;"}])
    out = tmp_path / "rapport"
    env = {**os.environ, "LC_ALL": "C", "PYSPARK_PYTHON": sys.executable}
    env.pop("PYTHONUTF8", None)
    proc = subprocess.run(
        [sys.executable, "-m", "leakcheck_spark", "audit", "-d", f"café:test={d / 'é.jsonl'}",
         "-d", f"tr:train={d / 'tr.jsonl'}", "--text-field", "t", "--json", "-", "--out-dir",
         str(out), "--master", "local[1]"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=300, cwd=tmp_path,
        preexec_fn=lambda: os.close(1))  # noqa: PLW1509 - the child's stdout, closed
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["split_matrix"]["café/test"]["tr/train"]["count"] == 1
    assert proc.stdout == b""


@pytest.mark.parametrize("setting,said", [
    ({"JAVA_HOME": "/nonexistent/jdk"}, "JAVA_HOME is /nonexistent/jdk, which holds no bin/java"),
    ({"JAVA_HOME": None, "PATH": "/nonexistent"},
     "no Java found: JAVA_HOME is not set and no java is on PATH"),
    ({"SPARK_HOME": "/nonexistent/spark"},
     "SPARK_HOME is /nonexistent/spark, which holds no bin/spark-submit"),
    ({"LC_ALL": "C", "PYTHONUTF8": "0"}, "the argument 'x=donn\\xe9es.jsonl' holds characters "
     "this locale's encoding (ascii) cannot read"),
])
def test_a_machine_without_java_or_spark_or_a_readable_argument_is_one_line(tmp_path, setting,
                                                                            said):
    import subprocess
    import sys

    # The install, not the inputs: said before any JVM starts (not spark-class's shell errors
    # and "Java gateway process exited", with a hint about --master).
    (tmp_path / "données.jsonl").write_text('{"t": "a"}\n', encoding="utf-8")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    for key, value in setting.items():
        env.pop(key, None) if value is None else env.__setitem__(key, value)
    proc = subprocess.run([sys.executable, "-m", "leakcheck_spark", "audit", "-d",
                           "x=données.jsonl", "--text-field", "t"],
                          capture_output=True, env=env, timeout=120, cwd=tmp_path)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and LINE.match(err.strip()), err
    assert said in err, err


def test_a_leading_tilde_the_shell_left_is_the_home_folder(cli, tmp_path, monkeypatch):
    # The shell expands no ~ after NAME= (-d x=~/a.jsonl), in --opt=~/..., nor when quoted:
    # '~/o' was a folder named ~ in the current directory ("wrote ~/o" read like the home one).
    home = tmp_path / "home"
    write_jsonl(home / "a.jsonl", [{"t": "a b"}, {"t": "a  b"}])
    (home / "job.toml").write_text('text-field = "t"\n', encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    rc, _, err = cli("audit", "--config=~/job.toml", "-d", "x:train=~/a.jsonl", "--out-dir",
                     "~/o", "--json=~/r.json")
    assert rc == 0, err
    assert json.loads((home / "r.json").read_text())["groups"]["x/train"]["records"] == 2
    assert (home / "o" / "report.json").is_file() and not (tmp_path / "~").exists()


def test_an_ascii_terminal_gets_escaped_text_and_valid_json(tmp_path, monkeypatch):
    import io
    import subprocess
    import sys

    from leakcheck_spark import cli

    # LC_ALL=C PYTHONUTF8=0: stdout and stderr take ASCII only.  A finished run printing an id
    # with é failed as "unexpected failure: UnicodeEncodeError ... a bug" (exit 2), and --json
    # printed é as \xe9, which is no JSON escape.
    write_jsonl(tmp_path / "a.jsonl", [{"t": "x = 1", "i": "té-0"}, {"t": "y = 2", "i": "b"}])
    write_jsonl(tmp_path / "b.jsonl", [{"t": "x  = 1", "i": "c"}])
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYSPARK_PYTHON": sys.executable}
    env.pop("PYTHONIOENCODING", None)
    base = [sys.executable, "-m", "leakcheck_spark", "audit", "-d", "a:test=a.jsonl", "-d",
            "b:train=b.jsonl", "--text-field", "t", "--id-field", "i", "--master", "local[1]",
            "--json", "-"]
    as_json = subprocess.run(base, capture_output=True, env=env, timeout=300, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["overlaps"]["sample"][0]["id"] == "té-0"
    err = subprocess.run([*base[:4], "-d", "é=a.jsonl", "--json", "-"], capture_output=True,
                         env=env, timeout=300, cwd=tmp_path)
    assert err.returncode == 2 and "é=a.jsonl" in json.loads(err.stderr)["error"]["message"]
    # The terminal report (text) on such a stdout: escaped, not a failure.
    ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict")
    monkeypatch.setattr(sys, "stdout", ascii_out)
    cli._plain_streams()
    print("té-0", file=ascii_out, flush=True)
    assert ascii_out.buffer.getvalue() == b"t\\xe9-0\n"
