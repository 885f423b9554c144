"""resplit: duplicate groups (exact and verified near, transitive) moved whole into one split."""

from __future__ import annotations

import json
import random
import re

import pytest
from chispa import assert_df_equality
from conftest import spark_conf, write_jsonl

from leakcheck_spark.options import Options, Source
from leakcheck_spark.resplit import COLUMNS, resplit


def shifted(start: int, n: int = 100, prefix: str = "w") -> str:
    """Tokens start..start+n-1: texts shifted by s share n - s of n + s tokens (--shingle 1)."""
    return " ".join(f"{prefix}{i}" for i in range(start, start + n))


def run(cli, tmp_path, *args: str) -> list[dict]:
    out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}.jsonl"
    rc, stdout, stderr = cli("resplit", *args, "--quiet", "--out", out)
    assert rc == 0, stderr
    assert stdout.strip().endswith(f"wrote {out}")
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_chain_across_three_splits_moves_whole_into_train(cli, tmp_path):
    # A~B exact (train/val), B~C near (val/test), C~D near (test/test): A and D are far apart
    # (Jaccard 0.72 with --shingle 1) but in one group, so all of it goes to train.
    a, c, d = shifted(0), shifted(8), shifted(16)
    rows = [{"t": a, "s": "train"}, {"t": "  " + a, "s": "val"}, {"t": c, "s": "test"},
            {"t": d, "s": "test"}, {"t": shifted(0, prefix="x"), "s": "test"},
            {"t": shifted(0, prefix="y"), "s": "val"}]
    write_jsonl(tmp_path / "data.jsonl", rows)
    got = run(cli, tmp_path, "-d", f"b={tmp_path / 'data.jsonl'}", "--text-field", "t",
              "--split-field", "s", "--near", "--shingle", "1")
    assert got == [
        {"dataset": "b", "id": 0, "split": "train", "original_split": "train", "group_id": 0,
         "reassigned": False},
        {"dataset": "b", "id": 1, "split": "train", "original_split": "val", "group_id": 0,
         "reassigned": True},
        {"dataset": "b", "id": 2, "split": "train", "original_split": "test", "group_id": 0,
         "reassigned": True},
        {"dataset": "b", "id": 3, "split": "train", "original_split": "test", "group_id": 0,
         "reassigned": True},
        {"dataset": "b", "id": 4, "split": "test", "original_split": "test", "group_id": 4,
         "reassigned": False},
        {"dataset": "b", "id": 5, "split": "val", "original_split": "val", "group_id": 5,
         "reassigned": False},
    ]
    # Without --near only the exact pair is a group.
    exact = run(cli, tmp_path, "-d", f"b={tmp_path / 'data.jsonl'}", "--text-field", "t",
                "--split-field", "s")
    assert [r["split"] for r in exact] == ["train", "train", "test", "test", "test", "val"]
    assert [r["group_id"] for r in exact] == [0, 0, 2, 3, 4, 5]


def test_priority_and_splits_it_does_not_name(cli, tmp_path):
    text = "int f(){return 0;}"
    for name in "abcd":
        write_jsonl(tmp_path / f"{name}.jsonl", [{"t": text, "uid": f"{name}1"},
                                                 {"t": f"int {name}();", "uid": f"{name}2"}])
    srcs = [arg for name, split in (("a", "test"), ("b", "dev"), ("c", "extra"))
            for arg in ("-d", f"{name}:{split}={tmp_path / (name + '.jsonl')}")]
    common = ["--text-field", "t", "--id-field", "uid"]
    # test is named, dev and extra are not: test wins.
    got = run(cli, tmp_path, *srcs, *common, "--priority", "train,test")
    assert {r["id"]: r["split"] for r in got if r["group_id"] == 0} == {
        "a1": "test", "b1": "test", "c1": "test"}
    # Only unnamed splits: the alphabetically first.
    got = run(cli, tmp_path, *srcs[2:], *common)
    assert {r["id"]: r["split"] for r in got if r["reassigned"]} == {"c1": "dev"}
    # group ids are global ordinals: dataset b's rows come after dataset a's two rows.
    got = run(cli, tmp_path, *srcs, "-d", f"d:val={tmp_path / 'd.jsonl'}", *common)
    assert {r["id"]: (r["split"], r["group_id"]) for r in got} == {
        "a1": ("val", 0), "a2": ("test", 1), "b1": ("val", 0), "b2": ("dev", 3),
        "c1": ("val", 0), "c2": ("extra", 5), "d1": ("val", 0), "d2": ("val", 7)}


@pytest.mark.parametrize("priority", ["train,,test", "train,train", ""])
def test_a_bad_priority_is_a_usage_error(cli, tmp_path, priority):
    write_jsonl(tmp_path / "a.jsonl", [{"t": "x"}])
    rc, _, err = cli("resplit", "-d", f"a={tmp_path / 'a.jsonl'}", "--text-field", "t",
                     "--priority", priority, "--out", tmp_path / "o.jsonl")
    assert rc == 2 and err.startswith("leakcheck-spark: error [LC_E_USAGE]: bad --priority")
    assert not (tmp_path / "o.jsonl").exists()


def _tokens(text: str) -> frozenset:
    return frozenset(re.findall(r"\w+|[^\w\s]", text))


def oracle(records: list[tuple[str, str, str]], priority: list[str], threshold: float) -> dict:
    """(dataset, id) -> new split, by brute force: union-find over exact (whitespace-normalised)
    and Jaccard >= threshold (token sets: --shingle 1) pairs."""
    parent = list(range(len(records)))

    def root(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    keys = ["".join(t.split()) for _, _, t in records]
    toks = [_tokens(t) for _, _, t in records]
    for i in range(len(records)):
        for j in range(i):
            if keys[i] and keys[j] and (keys[i] == keys[j] or len(toks[i] & toks[j])
                                        >= threshold * len(toks[i] | toks[j])):
                parent[max(root(i), root(j))] = min(root(i), root(j))
    rank = {s: i for i, s in enumerate(priority)}
    best: dict[int, tuple] = {}
    for i, (split, _, _) in enumerate(records):
        k = (rank.get(split, len(priority)), split)
        best[root(i)] = min(best.get(root(i), k), k)
    return {(i, name): best[root(i)][1] for i, (_, name, _) in enumerate(records)}


def test_random_families_match_a_brute_force_oracle(spark, tmp_path):
    rnd = random.Random(11)
    splits = ["train", "val", "test", "holdout"]
    rows = {s: [] for s in splits}
    for fam in range(40):
        start = 0
        for _ in range(rnd.randint(1, 4)):  # a chain of near copies, or exact copies
            start += rnd.choice([0, 0, 3, 6, 30])
            text = shifted(start, prefix=f"f{fam}_")
            rows[rnd.choice(splits)].append(("\t" if rnd.random() < 0.3 else "") + text)
    for s in splits:
        rnd.shuffle(rows[s])
        write_jsonl(tmp_path / f"{s}.jsonl", [{"t": t} for t in rows[s]])
    sources = [Source("d", str(tmp_path / f"{s}.jsonl"), split=s, text_field="t") for s in splits]
    opts = Options(near=True, shingle=1, num_perm=256)
    got = resplit(sources, opts, ["train", "val", "test"], spark=spark)
    records = [(s, f"{s}#{i}", t) for s in splits for i, t in enumerate(rows[s])]
    want = oracle(records, ["train", "val", "test"], 0.8)
    have = {r.id: r.split for r in got.assignment.collect()}
    want_by_row = {}
    for (i, _), split in want.items():
        want_by_row[i] = split
    assert [have[i] for i in range(len(records))] == [want_by_row[i] for i in range(len(records))]
    assert got.summary["moved_records"] == sum(
        1 for i, (s, _, _) in enumerate(records) if want_by_row[i] != s) > 0
    got.unpersist()


def test_the_same_assignment_on_any_partitioning(spark, tmp_path):
    rnd = random.Random(5)
    rows = [{"t": shifted(rnd.choice([0, 2, 4, 50, 52]), prefix=f"g{rnd.randrange(8)}_"),
             "s": rnd.choice(["train", "val", "test"])} for _ in range(120)]
    write_jsonl(tmp_path / "a.jsonl", rows[:60])
    write_jsonl(tmp_path / "b.jsonl", rows[60:])
    sources = [Source("a", str(tmp_path / "a.jsonl"), text_field="t", split_field="s"),
               Source("b", str(tmp_path / "b.jsonl"), text_field="t", split_field="s")]
    results = []
    for shuffle in (1, 8):
        with spark_conf(spark, **{"spark.sql.shuffle.partitions": shuffle}):
            res = resplit(sources, Options(near=True, shingle=1), spark=spark)
            results.append((res.assignment.select(*COLUMNS).orderBy("dataset", "id"),
                            res.summary))
    assert_df_equality(results[0][0], results[1][0])
    assert results[0][1] == results[1][1] and results[0][1]["moved_records"] > 0


def test_directory_and_csv_outputs(cli, tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"t": "x y", "s": "test"}, {"t": "x  y", "s": "train"}])
    args = ["-d", f"a={tmp_path / 'a.jsonl'}", "--text-field", "t", "--split-field", "s", "--quiet"]
    rc, _, err = cli("resplit", *args, "--out", tmp_path / "dir", "--format", "json",
                     "--json", tmp_path / "summary.json")
    assert rc == 0, err
    lines = [json.loads(line) for f in sorted((tmp_path / "dir").glob("part-*"))
             for line in f.read_text().splitlines()]
    assert [(r["id"], r["split"], r["reassigned"]) for r in lines] == [
        (0, "train", True), (1, "train", False)]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["schema"] == "leakcheck-spark/resplit/v1"
    assert summary["moved"] == [{"from": "test", "to": "train", "records": 1}]
    assert summary["splits"] == {"test": {"before": 1, "after": 0},
                                 "train": {"before": 1, "after": 2}}
    rc, _, err = cli("resplit", *args, "--out", tmp_path / "rows.csv")
    assert rc == 0, err
    assert (tmp_path / "rows.csv").read_text().splitlines() == [
        "dataset,id,split,original_split,group_id,reassigned",
        "a,0,train,test,0,true", "a,1,train,train,0,false"]
