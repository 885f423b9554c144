"""--config FILE, and every template in conf/: each describes a command our own parser accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leakcheck_spark.cli import build_parser, expand_config
from leakcheck_spark.errors import LeakcheckError

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
QUICK_START = [
    "-d", "primevul:train=examples/primevul_train.jsonl",
    "-d", "primevul:test=examples/primevul_test.jsonl",
    "-d", "diversevul:test=examples/diversevul_test.jsonl",
    "--text-field", "func", "--label-field", "target", "-o", "diversevul.label=label",
    "-o", "primevul.id=idx", "-o", "diversevul.id=id", "--out-dir", "leak_report",
]


def parsed(argv):
    return vars(build_parser().parse_args(expand_config(list(argv))))


def job_args(args: list[str], script: str) -> list[str]:
    """The job's own arguments in a spark-submit argument list: those after the job script,
    with a --config FILE shipped beside the job resolved to its template in conf/."""
    rest = args[[i for i, a in enumerate(args) if a.endswith(script)][0] + 1:]
    if "--config" in rest:
        i = rest.index("--config") + 1
        rest[i] = str(CONF / Path(rest[i]).name)
    return rest


def test_config_file_is_the_same_as_its_flags():
    assert parsed(["audit", "--config", CONF / "audit.toml"]) == parsed(["audit", *QUICK_START])


def test_command_line_flags_win_over_the_file(tmp_path):
    cfg = tmp_path / "job.toml"
    cfg.write_text('datasets = ["a:train=x.jsonl"]\ntext_field = "func"\nnear = true\n'
                   'threshold = 0.9\nconf = ["spark.a=1"]\n')
    args = parsed(["audit", "--config", cfg, "--threshold", "0.7", "-d", "b:test=y.jsonl",
                   "--conf", "spark.b=2"])
    assert args["threshold"] == 0.7 and args["near"] and args["text_field"] == "func"
    assert args["datasets"] == ["a:train=x.jsonl", "b:test=y.jsonl"]
    assert args["conf"] == ["spark.a=1", "spark.b=2"]
    clean = tmp_path / "clean.toml"
    clean.write_text('test = "t:test=t.jsonl"\nagainst = ["a=a.jsonl", "b=b.jsonl"]\n'
                     'out = "o.jsonl"\ndedup = true\nnear = false\n')
    args = parsed(["clean", f"--config={clean}"])
    assert args["against"] == ["a=a.jsonl", "b=b.jsonl"] and args["dedup"] and not args["near"]


@pytest.mark.parametrize("text,code,words", [
    (None, "LC_E_IO", "cannot read config"),
    ("near = [", "LC_E_BAD_FORMAT", "bad TOML"),
    ("nearr = true", "LC_E_USAGE", "unknown key 'nearr'"),
    ("near = 1", "LC_E_BAD_VALUE", "expected true or false"),
    ("threshold = true", "LC_E_BAD_VALUE", "threshold = true in config "),
    ("num-perm = \"x\"", "LC_E_BAD_VALUE", "an integer (hint: num-perm = N stands for --num-perm N)"),
    ("shingle = 1.5", "LC_E_BAD_VALUE", "shingle = 1.5 in config "),
    ("text-field = []", "LC_E_BAD_VALUE", "expected a string or a number"),
    ("[table]\nx = 1", "LC_E_USAGE", "unknown key 'table'"),
    (b'text-field = "\xff"', "LC_E_BAD_FORMAT", "is not UTF-8 (invalid start byte at byte 15)"),
    ('text-field = "a"\ntext_field = "b"', "LC_E_USAGE",
     "sets text-field twice, as 'text-field' and 'text_field' (hint: keep one of them)"),
])
def test_bad_config_is_one_error_line(cli, tmp_path, text, code, words):
    cfg = tmp_path / "job.toml"
    if isinstance(text, bytes):
        cfg.write_bytes(text + b"\n")
    elif text is not None:
        cfg.write_text(text + "\n")
    rc, out, err = cli("audit", "--config", cfg, "-d", "a=x.jsonl", "--text-field", "t")
    assert rc == 2 and not out and len(err.strip().splitlines()) == 1
    assert err.startswith(f"leakcheck-spark: error [{code}]: ") and words in err


def test_one_config_file_a_run(cli, tmp_path):
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    for cfg in (one, two):
        cfg.write_text('text-field = "t"\n')
    rc, out, err = cli("audit", "--config", one, f"--config={two}", "-d", "a=x.jsonl")
    assert rc == 2 and not out and len(err.strip().splitlines()) == 1
    assert f"[LC_E_USAGE]: --config given 2 times ({one}, {two})" in err


def test_config_needs_a_command(cli, tmp_path):
    rc, _, err = cli("--config", CONF / "audit.toml")
    assert rc == 2 and "[LC_E_USAGE]" in err


def test_every_toml_template_parses():
    templates = sorted(CONF.glob("*.toml"))
    assert len(templates) >= 2
    for path in templates:
        args = parsed(["audit", "--config", path])
        assert args["datasets"] and args["text_field"] and args["out_dir"]


def test_emr_step_runs_the_audit_job_with_a_shipped_config():
    # The form of `aws emr add-steps --steps file://...` (which takes no --cli-input-json): a
    # list of steps with the CLI's own keys, not the AddJobFlowSteps API's HadoopJarStep.
    (step,) = json.loads((CONF / "emr-steps.json").read_text())
    assert set(step) <= {"Type", "Name", "ActionOnFailure", "Jar", "Args", "MainClass",
                         "Properties"}
    args = step["Args"]
    assert step["Type"] == "CUSTOM_JAR" and step["Jar"] == "command-runner.jar"
    assert args[0] == "spark-submit"
    own = job_args(args, "jobs/audit.py")
    shipped = args[args.index("--files") + 1].split(",")
    assert any(Path(f).name == Path(own[own.index("--config") + 1]).name for f in shipped)
    assert parsed(["audit", *own])["out_dir"].startswith("s3://")


def test_databricks_job_runs_the_audit_job_with_a_config():
    job = json.loads((CONF / "databricks-job.json").read_text())
    (task,) = job["tasks"]
    python_task = task.get("spark_python_task") or task["python_wheel_task"]
    assert python_task["python_file"].endswith("jobs/audit.py")
    assert any(lib.get("whl", "").endswith(".whl") for lib in task["libraries"])
    assert task["job_cluster_key"] in {c["job_cluster_key"] for c in job["job_clusters"]}
    args = parsed(["audit", *job_args(["jobs/audit.py", *python_task["parameters"]],
                                      "jobs/audit.py")])
    assert args["near"] and args["datasets"]


@pytest.mark.parametrize("name", ["local.conf", "cluster.conf"])
def test_spark_profiles_are_properties_files(name):
    lines = [ln.split(None, 1) for ln in (CONF / name).read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines and all(len(kv) == 2 and kv[0].startswith("spark.") for kv in lines)
    keys = [k for k, _ in lines]
    assert len(keys) == len(set(keys))


def test_a_config_may_start_with_a_bom_and_its_json_makes_errors_json(cli, tmp_path):
    cfg = tmp_path / "job.toml"
    cfg.write_bytes(b'\xef\xbb\xbfjson = "-"\noverrides = ["a.foo=1"]\n')
    for argv in (("--config", cfg), ("--json=" + str(tmp_path / "r.json"), "-o", "a.foo=1")):
        rc, out, err = cli("audit", *argv, "-d", "a=x.jsonl", "--text-field", "t")
        assert (rc, out) == (2, "")
        assert json.loads(err)["error"]["code"] == "LC_E_BAD_SPEC", err


@pytest.mark.parametrize("bad", ['num_perm = "many"', "near = 1"])
def test_an_error_in_a_config_that_sets_json_is_json(cli, tmp_path, bad):
    cfg = tmp_path / "job.toml"
    cfg.write_text(f"json = true\n{bad}\n")
    rc, out, err = cli("audit", "--config", cfg, "-d", "a=x.jsonl", "--text-field", "t")
    assert (rc, out) == (2, "")
    error = json.loads(err)["error"]
    # The error is the bad line's (json = true is --json: before, it was refused itself).
    assert error["code"] == "LC_E_BAD_VALUE" and error["message"].startswith(bad), err


def test_json_true_in_a_config_is_json_to_stdout(tmp_path):
    cfg = tmp_path / "job.toml"
    for value, want in (("true", "-"), ("false", None), ('"r.json"', "r.json")):
        cfg.write_text(f"json = {value}\n")
        assert parsed(["audit", "--config", cfg, "-d", "a=x.jsonl"])["json"] == want
    cfg.write_text("json = [1]\n")
    with pytest.raises(LeakcheckError) as info:
        parsed(["audit", "--config", cfg])
    assert info.value.message == (f"json = [1] in config {cfg}: expected a string or a number, "
                                  "or true for --json alone")
