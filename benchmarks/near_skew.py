"""Benchmark: a band bucket of N near-identical boilerplate functions stays bounded.

    python benchmarks/near_skew.py [--keys 50000] [--timeout 1800]

Writes N distinct variants of one boilerplate function (the same ~120 tokens, one identifier
changed per variant, so every pair has Jaccard ~0.9 and all N share most LSH band buckets) as a
train split, and 200 of them again, plus 200 unrelated functions, as a test split.  It then runs
``leakcheck-spark audit --near`` on them (local mode, all cores) and prints wall time, peak memory
(PSS of the whole process tree) and what was found.  Without a bound, the N-key buckets would
hold N (N - 1) / 2 pairs (1.25e9 at N = 50,000); buckets of more than 4,000 keys are verified in a
window instead (each key against its next ~2^21 / N keys, in a pseudo-random order per bucket:
see leakcheck_spark/near.py), and every test variant must still be reported as a near copy of
train.  At N <= 4,000 every pair is verified (N = 3,000 is the acceptance suite's cluster size).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

from _common import run

BOILERPLATE = """static int {name}(struct device *dev, const char *buf, size_t count)
{{
    struct priv_data *priv = dev_get_drvdata(dev);
    unsigned long value;
    int ret;

    ret = kstrtoul(buf, 10, &value);
    if (ret)
        return ret;
    mutex_lock(&priv->lock);
    priv->setting = value;
    ret = regmap_write(priv->map, REG_SETTING, value);
    mutex_unlock(&priv->lock);
    if (ret < 0)
        return ret;
    return count;
}}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    rnd = random.Random(0)
    work = Path(tempfile.mkdtemp(prefix="lc-skew-"))
    variants = [BOILERPLATE.format(name=f"store_setting_{i}") for i in range(args.keys)]
    with open(work / "train.jsonl", "w") as fh:
        for i, text in enumerate(variants):
            fh.write(json.dumps({"id": i, "func": text}) + "\n")
    picked = sorted(rnd.sample(range(args.keys), 200))
    with open(work / "test.jsonl", "w") as fh:
        for n, i in enumerate(picked):  # the same boilerplate, another name: near, not exact
            fh.write(json.dumps({"id": n, "func": variants[i].replace("store_setting_",
                                                                        "show_setting_")}) + "\n")
        for n in range(200):
            words = [rnd.choice(["a", "b", "x", "y", "+", "=", ";", "(", ")", "if", "for"])
                     for _ in range(80)]
            fh.write(json.dumps({"id": 200 + n, "func": " ".join(words)}) + "\n")
    out = work / "report"
    cmd = [sys.executable, "-m", "leakcheck_spark", "audit", "--near", "--quiet",
           "-d", f"boiler:train={work / 'train.jsonl'}", "-d", f"boiler:test={work / 'test.jsonl'}",
           "--text-field", "func", "--id-field", "id", "--out-dir", str(out)]
    wall, peak, *_ = run(cmd, timeout=args.timeout)
    report = json.loads((out / "report.json").read_text())
    cell = report["split_matrix"]["boiler/test"]["boiler/train"]
    print("command:", " ".join(cmd))
    print(f"input: {args.keys:,} near-identical train functions, 400 test functions")
    print(f"wall: {wall:,.1f} s   peak memory (PSS, tree): {peak / 2**30:,.2f} GiB")
    print(f"test records matching train: {cell['count']} of 400 (expected 200)")
    print(f"overlaps: {report['overlaps']['count']:,}")
    print("stage timings (s):", json.dumps(report["timings"]))


if __name__ == "__main__":
    main()
