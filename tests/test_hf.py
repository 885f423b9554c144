"""hf:ORG/NAME sources, offline: a Hugging Face dataset the tests put in a fresh cache."""

from __future__ import annotations

import json
import logging
import shutil
import sys

import pytest
from conftest import write_jsonl

TRAIN = [{"code": "int a;", "y": 0}, {"code": "int b;", "y": 1}, {"code": "int c;", "y": 0},
         {"code": "int b;", "y": 1}]
TEST = [{"code": "int  a;", "y": 1}, {"code": "int z;", "y": 0}, {"code": "int c;", "y": 0}]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """`lctest/tiny` (HF splits train, test, in that order) in an empty offline cache, laid out as
    ``datasets`` caches a Hub dataset it has loaded once (prepared Arrow files under
    HF_DATASETS_CACHE/lctest___tiny/default/0.0.0/HASH); yields the same rows as JSONL files."""
    datasets = pytest.importorskip("datasets")
    import huggingface_hub.constants
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets.packaged_modules.parquet.parquet import Parquet

    root = tmp_path_factory.mktemp("hf")
    files = {}
    for split, rows in (("train", TRAIN), ("test", TEST)):
        files[split] = str(root / f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), files[split])
    cache = root / "home" / "datasets"
    with pytest.MonkeyPatch.context() as mp:
        # Offline, in a cache of our own (datasets reads these at import, so set both).
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_HOME", str(root / "home"))
        mp.setattr(datasets.config, "HF_HUB_OFFLINE", True)
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        builder = Parquet(cache_dir=str(root / "build"), dataset_name="tiny", hash="0123abcd",
                          data_files=files)
        builder.download_and_prepare()
        shutil.copytree(builder.cache_dir, cache / "lctest___tiny" / "default" / "0.0.0" / "0123abcd")
        # The same rows as files, in the same read order (train first), with the split as a field.
        plain = root / "plain"
        write_jsonl(plain / "0.jsonl", [{**r, "split": "train"} for r in TRAIN])
        write_jsonl(plain / "1.jsonl", [{**r, "split": "test"} for r in TEST])
        yield plain


def _report(cli, tmp_path, *sources: str) -> dict:
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
    rc, _, err = cli("audit", *sources, "--text-field", "code", "--label-field", "y", "--quiet",
                     "--json", out)
    assert rc == 0, err
    report = json.loads(out.read_text())
    for volatile in ("timings", "sources", "options"):
        report.pop(volatile, None)
    return report


def test_an_hf_dataset_reads_like_the_same_rows_in_files(cli, hub, tmp_path):
    from_hub = _report(cli, tmp_path, "-d", "tiny=hf:lctest/tiny", "-d", f"ref:train={hub / '0.jsonl'}")
    from_files = _report(cli, tmp_path, "-d", f"tiny={hub}", "--split-field", "split",
                         "-d", f"ref:train={hub / '0.jsonl'}")
    assert from_hub == from_files
    # One group per HF split; ids are row indexes across the splits, in the dataset's order.
    assert set(from_hub["split_matrix"]) == {"tiny/train", "tiny/test", "ref/train"}
    assert from_hub["split_matrix"]["tiny/test"]["tiny/train"]["count"] == 2


def test_hf_split_and_a_named_split_read_one_hf_split(cli, hub, tmp_path):
    got = _report(cli, tmp_path, "-d", "tiny:heldout=hf:lctest/tiny", "-o", "tiny.hf_split=test",
                  "-d", f"ref:train={hub / '0.jsonl'}")
    assert set(got["split_matrix"]) == {"tiny/heldout", "ref/train"}
    assert got["split_matrix"]["tiny/heldout"]["ref/train"]["count"] == 2

    out = tmp_path / "clean.jsonl"
    rc, _, err = cli("clean", "--test", "tiny:test=hf:lctest/tiny", "-o", "tiny.hf_split=test",
                     "--against", f"ref:train={hub / '0.jsonl'}", "--text-field", "code",
                     "--quiet", "--out", out)
    assert rc == 0, err
    assert [json.loads(line) for line in out.read_text().splitlines()] == [TEST[1]]


@pytest.mark.parametrize(("source", "extra", "code", "message"), [
    ("hf:lctest/nosuch", [], "LC_E_IO", "cannot load hf:lctest/nosuch (x=hf:lctest/nosuch): "),
    ("hf:lctest/tiny", ["-o", "x.hf_split=nosplit"], "LC_E_IO", "cannot load hf:lctest/tiny"),
    ("hf:lctest/tiny", ["-o", "x.config=other"], "LC_E_IO", "cannot load hf:lctest/tiny"),
    ("hf:not a name", [], "LC_E_BAD_SPEC", "bad Hugging Face dataset name 'not a name'"),
])
def test_an_hf_dataset_that_cannot_be_loaded_is_one_line(cli, hub, source, extra, code, message):
    rc, _, err = cli("audit", "-d", f"x={source}", *extra, "--text-field", "code", "--quiet")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"leakcheck-spark: error [{code}]: {message}")
    # A Hub it cannot reach (HF_HUB_OFFLINE unset) makes huggingface_hub warn of each retry
    # before the error: its warnings are off once datasets is loaded.
    assert code != "LC_E_IO" or logging.getLogger("huggingface_hub").getEffectiveLevel() >= logging.ERROR


def test_without_the_datasets_package_the_error_names_the_extra(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    rc, _, err = cli("audit", "-d", "x=hf:lctest/tiny", "--text-field", "code", "--quiet")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("leakcheck-spark: error [LC_E_USAGE]: x=hf:lctest/tiny needs the "
                          "optional 'datasets' package, which is not installed")
    assert "leakcheck-spark[hf]" in err
