"""Benchmark: exact (whitespace-normalised) audit of the real corpus in local mode.

Builds nothing itself: point it at a corpus written by ../shared/bench/make_corpus.py
(OUT/datasetA/{train,test}.jsonl, OUT/datasetB/{train,test}.jsonl).  Runs
``leakcheck-spark audit`` as a user would, in a subprocess, and prints records, wall time,
records/s and the peak memory (PSS) of the whole process tree (Python driver + Spark JVM +
Python workers), sampled from /proc (see _common.run).

    python benchmarks/exact_audit.py /tmp/corpus [--master local[*]] [--out-dir /tmp/bench_out]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _common import run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--normalizer", default="whitespace")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="lc-bench-") + "/report"
    c = args.corpus
    cmd = [sys.executable, "-m", "leakcheck_spark", "audit", "--master", args.master,
           "-d", f"datasetA:train={c}/datasetA/train.jsonl",
           "-d", f"datasetA:test={c}/datasetA/test.jsonl",
           "-d", f"datasetB:train={c}/datasetB/train.jsonl",
           "-d", f"datasetB:test={c}/datasetB/test.jsonl",
           "--text-field", "func", "--label-field", "target", "--id-field", "id",
           "--normalizer", args.normalizer, "--out-dir", out_dir]
    wall, peak, *_ = run(cmd)
    report = json.loads(Path(out_dir, "report.json").read_text())
    records = sum(g["records"] for g in report["groups"].values())
    size = sum(f.stat().st_size for f in c.glob("dataset*/*.jsonl"))
    print("command:", " ".join(cmd))
    print(f"input: {records:,} records, {size / 1e6:,.0f} MB of JSONL")
    print(f"wall: {wall:,.1f} s  ({records / wall:,.0f} records/s)")
    print(f"peak memory, PSS of driver + JVM + workers: {peak / 2**30:,.2f} GiB")
    print(f"overlaps: {report['overlaps']['count']:,}  label conflicts: "
          f"{report['label_conflicts']['count']:,}")
    print("stage timings (s):", json.dumps(report["timings"]))
    a = report["split_matrix"]["datasetA/test"]
    cell = a["datasetA/train"]
    print(f"datasetA/test -> datasetA/train: {cell['count']:,} ({cell['fraction']:.2%})")


if __name__ == "__main__":
    main()
