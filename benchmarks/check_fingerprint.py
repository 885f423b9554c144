"""Benchmark: `check` and `fingerprint` on the real corpus, side by side with the noleak package.

Builds nothing itself: point it at a corpus written by ../shared/bench/make_corpus.py.  In one run,
on the same files, it runs (each in a subprocess, as a user would, with its peak memory measured
as the PSS of the whole process tree, sampled from /proc as _common.run says):

* ``leakcheck-spark check --train TRAIN --eval EVAL --field func --id-field id`` (exact and
  13-gram, local mode) and ``noleak check --train TRAIN --eval EVAL --field func
  --methods exact,ngram`` (noleak's near method is its own unverified MinHash, not compared);
* ``leakcheck-spark fingerprint`` of both files and ``noleak fingerprint`` of each.

It prints the counts and fingerprints of both (and exits 1 unless they are identical), the wall
times, records/s, speed ratios and peak memory.

    python benchmarks/check_fingerprint.py /tmp/corpus [--train datasetB/train.jsonl]
        [--eval datasetA/test.jsonl] [--n 13] [--master local[*]]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _common import run

NOLEAK = "import sys; from noleak.cli import main; sys.exit(main())"
COUNTS = ("n_train", "n_eval", "exact_hits", "ngram_hits")
FP_KEYS = ("digest", "n_examples", "n_unique")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--train", default="datasetB/train.jsonl",
                    help="train file, relative to the corpus (default datasetB/train.jsonl)")
    ap.add_argument("--eval", default="datasetA/test.jsonl",
                    help="eval file, relative to the corpus (default datasetA/test.jsonl)")
    ap.add_argument("--n", type=int, default=13)
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args()
    train, ev = args.corpus / args.train, args.corpus / args.eval
    tmp = Path(tempfile.mkdtemp(prefix="lc-bench-check-"))
    ours_cmd = [sys.executable, "-m", "leakcheck_spark", "check", "--master", args.master,
                "--train", str(train), "--eval", str(ev), "--field", "func", "--id-field", "id",
                "--n", str(args.n), "--out-dir", str(tmp / "out"), "--json",
                str(tmp / "ours.json")]
    theirs_cmd = [sys.executable, "-c", NOLEAK, "check", "--train", str(train), "--eval",
                  str(ev), "--field", "func", "--n", str(args.n), "--methods", "exact,ngram",
                  "--json"]
    print("ours:  ", " ".join(ours_cmd))
    print("noleak:", " ".join(theirs_cmd))
    size = (train.stat().st_size + ev.stat().st_size) / 1e6
    rows = []
    wall, peak, *_ = run(ours_cmd)
    ours = json.loads((tmp / "ours.json").read_text())
    rows.append(("check", "leakcheck-spark", wall, peak))
    wall, peak, *_ = run(theirs_cmd, stdout=str(tmp / "noleak.json"))
    theirs = json.loads((tmp / "noleak.json").read_text())
    rows.append(("check", "noleak", wall, peak))
    same = True
    records = ours["n_train"] + ours["n_eval"]
    print(f"\ninput: train {ours['n_train']:,} + eval {ours['n_eval']:,} records "
          f"({size:,.0f} MB of JSONL), n = {args.n}")
    for key in COUNTS:
        same &= ours[key] == theirs[key]
        print(f"  {key:<11} ours {ours[key]:>9,}  noleak {theirs[key]:>9,}")
    for side in ("train", "eval"):
        a, b = ours[f"fingerprint_{side}"], theirs[f"fingerprint_{side}"]
        same &= all(a[k] == b[k] for k in FP_KEYS)
        print(f"  {side:<5} fingerprint ours {a['fingerprint']} ({a['n_unique']:,} unique)  "
              f"noleak {b['algo']}:{b['digest'][:12]} ({b['n_unique']:,} unique)")

    fp_cmd = [sys.executable, "-m", "leakcheck_spark", "fingerprint", "--master", args.master,
              "-d", f"train={train}", "-d", f"eval={ev}", "--text-field", "func",
              "--json", str(tmp / "fp.json")]
    print("\nours:  ", " ".join(fp_cmd))
    wall, peak, *_ = run(fp_cmd, ok=(0,))
    prints = json.loads((tmp / "fp.json").read_text())["fingerprints"]
    rows.append(("fingerprint", "leakcheck-spark", wall, peak))
    total_wall, total_peak = 0.0, 0
    for name, path in (("train/all", train), ("eval/all", ev)):
        cmd = [sys.executable, "-c", NOLEAK, "fingerprint", str(path), "--field", "func",
               "--json"]
        print("noleak:", " ".join(cmd))
        wall, peak, *_ = run(cmd, ok=(0,), stdout=str(tmp / "fp-noleak.json"))
        total_wall, total_peak = total_wall + wall, max(total_peak, peak)
        b = json.loads((tmp / "fp-noleak.json").read_text())
        same &= all(prints[name][k] == b[k] for k in FP_KEYS)
        print(f"  {name:<9} ours {prints[name]['fingerprint']}  noleak "
              f"{b['algo']}:{b['digest'][:12]}  n_examples {prints[name]['n_examples']:,} / "
              f"{b['n_examples']:,}  n_unique {prints[name]['n_unique']:,} / {b['n_unique']:,}")
    rows.append(("fingerprint", "noleak", total_wall, total_peak))

    print(f"\n{'command':<12} {'tool':<16} {'wall s':>8} {'records/s':>10} {'peak GiB':>9}")
    for command, tool, wall, peak in rows:
        print(f"{command:<12} {tool:<16} {wall:>8.1f} {records / wall:>10,.0f} "
              f"{peak / 2**30:>9.2f}")
    for command in ("check", "fingerprint"):
        ours_wall, theirs_wall = (w for c, _, w, _ in rows if c == command)
        print(f"{command}: leakcheck-spark is {theirs_wall / ours_wall:.2f}x noleak's speed")
    print("our stage timings (s):", json.dumps(ours["timings"]))
    print("identical counts and fingerprints:", "yes" if same else "NO")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
