"""Benchmark: verified near-duplicate audit vs its peers, on the real corpus, in one run.

    python benchmarks/near_audit.py /tmp/corpus-100k [--sample 2000] [--peers datasketch,mllib]
                                    [--timeout 600] [--repeat 3]

On the same input (a corpus written by ../shared/bench/make_corpus.py, 4 groups) it runs, each in
its own process so wall time and peak memory (PSS of the process tree; also of the launched
Python process alone -- for ours the Python driver, where anything collected would land -- and of
the JVM) are measured alike:

* ours       -- ``leakcheck-spark audit --near`` (local mode, all cores, full report written);
* datasketch -- ``datasketch.MinHashLSH`` (the single-machine peer): MinHash every record, insert,
                query every record, verify candidates by exact Jaccard (as we do);
* mllib      -- Spark MLlib ``MinHashLSH.approxSimilarityJoin`` self-join at Jaccard distance
                <= 1 - T on the same shingle sets (the peer on our own engine), stopped after
                ``--timeout`` seconds.

Wall times on a small shared machine vary between runs minutes apart (15-25% here), so with
``--repeat N`` every run that finished its first round is run N times in all, the runs of one
round side by side (ours, then each peer), and the table gives the median wall time (records/s
from it), the range, and the highest peaks.  Our reported overlaps must be the same in every
round (the job is deterministic); the script says so, or stops.

Quality is measured against brute force: for a fixed random sample of test records (``--sample``,
seed 0), every record of the corpus with shingle-set Jaccard >= T is found exactly (prefix
filtering over a global rare-first shingle order, then exact intersection).  The audit reports,
per (record, other group), whether the record matches the group and the best similarity, so
recall is counted at that level: of the (sample record, other group) cells whose best true
Jaccard is >= 0.8 (and >= 0.9), the share the run reported.  Precision: the share of reported
cells whose true best Jaccard is >= T and at least the reported similarity (must be 1.0).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import Measured, run

GROUPS = ("datasetA/train", "datasetA/test", "datasetB/train", "datasetB/test")
THRESHOLD = 0.8


def load(corpus: Path) -> tuple[list[str], list[str], list[str]]:
    """(group, id, text) lists of every record, in group then file order."""
    groups, ids, texts = [], [], []
    for g in GROUPS:
        with open(corpus / f"{g}.jsonl", encoding="utf-8") as fh:
            for line in fh:
                rec = json.loads(line)
                groups.append(g)
                ids.append(rec["id"])
                texts.append(rec["func"])
    return groups, ids, texts


def shingle_sets(texts: list[str]):  # noqa: ANN201 - a ShingleBatch
    """Every record's shingle set, computed by our vectorised code (given to both peers, so
    they are measured on MinHash, LSH and verification, not on tokenising)."""
    import pyarrow as pa

    from leakcheck_spark import minhash as mh

    return mh.shingle_batch(pa.array(texts, pa.large_string()), 5)


def truth_for_sample(batch, sample: np.ndarray, t: float) -> dict[int, list[tuple[int, float]]]:
    """Every record with Jaccard >= t to each sample record (exact, by prefix filtering)."""
    sizes = batch.sizes()
    owner = np.repeat(np.arange(len(sizes)), sizes)
    uniq, inv, freq = np.unique(batch.hashes, return_inverse=True, return_counts=True)
    # Global order: rare shingles first (ties by hash), so prefixes are short posting lists.
    rank_of = np.empty(len(uniq), dtype=np.int64)
    rank_of[np.lexsort((uniq, freq))] = np.arange(len(uniq))
    rank = rank_of[inv]
    order = np.lexsort((rank, owner))
    rank_sorted, owner_sorted = rank[order], owner[order]
    prefix = sizes - np.ceil(t * sizes).astype(np.int64) + 1
    pos = np.arange(len(order)) - np.repeat(batch.offsets[:-1], sizes)
    in_prefix = pos < np.repeat(prefix, sizes)
    post_rank, post_owner = rank_sorted[in_prefix], owner_sorted[in_prefix]
    by_rank = np.argsort(post_rank, kind="stable")
    post_rank, post_owner = post_rank[by_rank], post_owner[by_rank]
    out: dict[int, list[tuple[int, float]]] = {}
    for r in sample:
        lo, hi = batch.offsets[r], batch.offsets[r + 1]
        mine = rank_sorted[lo:hi][: prefix[r]] if hi > lo else []
        cands = set()
        for x in mine:
            a, b = np.searchsorted(post_rank, [x, x + 1])
            cands.update(post_owner[a:b].tolist())
        cands.discard(int(r))
        found = []
        ref = batch.get(r)
        for c in cands:
            other = batch.get(c)
            if min(len(ref), len(other)) < t * max(len(ref), len(other)):
                continue
            inter = len(np.intersect1d(ref, other, assume_unique=True))
            j = inter / (len(ref) + len(other) - inter)
            if j >= t:
                found.append((c, j))
        out[int(r)] = found
    return out


# --- the peers, each run in its own process ------------------------------------------------


def peer_datasketch(corpus: Path, out: Path) -> None:
    from datasketch import MinHash, MinHashLSH

    from leakcheck_spark.minhash import DEFAULT_SEED

    groups, _, texts = load(corpus)
    batch = shingle_sets(texts)
    hv32 = (batch.hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=128)
    sketches = []
    for i in range(len(texts)):
        m = MinHash(num_perm=128, seed=DEFAULT_SEED, hashfunc=int)
        m.update_batch(hv32[batch.offsets[i]:batch.offsets[i + 1]].tolist())
        sketches.append(m)
        lsh.insert(i, m, check_duplication=False)
    best: dict[tuple[int, str], float] = {}
    for i, m in enumerate(sketches):
        ref = batch.get(i)
        if not len(ref):
            continue
        for c in lsh.query(m):
            if c == i or groups[c] == groups[i]:
                continue
            other = batch.get(c)
            inter = len(np.intersect1d(ref, other, assume_unique=True))
            j = inter / (len(ref) + len(other) - inter)
            if j >= THRESHOLD:
                key = (i, groups[c])
                best[key] = max(best.get(key, 0.0), j)
    out.write_text(json.dumps([[i, g, j] for (i, g), j in best.items()]))


def peer_mllib(corpus: Path, out: Path) -> None:
    from pyspark.ml.feature import MinHashLSH
    from pyspark.ml.linalg import SparseVector, VectorUDT
    from pyspark.sql import types as T

    from leakcheck_spark.session import get_session

    groups, _, texts = load(corpus)
    batch = shingle_sets(texts)
    spark = get_session("local[*]", app_name="mllib-peer")
    dim = 1 << 30  # MLlib's MinHashLSH accepts dimensions up to its prime 2,038,074,743
    rows = []
    for i in range(len(texts)):
        idx = np.unique((batch.get(i) % np.uint64(dim)).astype(np.int64))
        if len(idx):
            rows.append((i, groups[i], SparseVector(dim, idx.tolist(), [1.0] * len(idx))))
    schema = T.StructType([T.StructField("i", T.LongType()), T.StructField("g", T.StringType()),
                           T.StructField("v", VectorUDT())])
    df = spark.createDataFrame(rows, schema).repartition(16)
    model = MinHashLSH(inputCol="v", outputCol="h", numHashTables=16, seed=1).fit(df)
    pairs = model.approxSimilarityJoin(df, df, 1.0 - THRESHOLD, distCol="d").selectExpr(
        "datasetA.i as i", "datasetB.g as g", "1 - d as j", "datasetA.g as ga").where(
        "ga != g")
    best = pairs.groupBy("i", "g").max("j").collect()
    out.write_text(json.dumps([[r[0], r[1], r[2]] for r in best]))


# --- orchestration ---------------------------------------------------------------------------


def ours(corpus: Path, work: Path, round_no: int = 0) -> tuple[Measured, str, list, dict]:
    """Our audit's measures, command, overlaps and stage timings (report.json)."""
    out_dir = work / f"ours-{round_no}"
    cmd = [sys.executable, "-m", "leakcheck_spark", "audit", "--near", "--quiet"]
    for g in GROUPS:
        name, split = g.split("/")
        cmd += ["-d", f"{name}:{split}={corpus / g}.jsonl"]
    cmd += ["--text-field", "func", "--id-field", "id", "--out-dir", str(out_dir)]
    m = run(cmd)
    import pyarrow.parquet as pq

    overlaps = pq.read_table(out_dir / "overlaps").to_pylist()
    timings = json.loads((out_dir / "report.json").read_text())["timings"]
    shutil.rmtree(out_dir, ignore_errors=True)
    return m, " ".join(cmd), overlaps, timings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--peers", default="datasketch,mllib")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per peer")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of every run that finishes (median wall time reported)")
    ap.add_argument("--run-peer", choices=["datasketch", "mllib"], help=argparse.SUPPRESS)
    ap.add_argument("--peer-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.run_peer:
        {"datasketch": peer_datasketch, "mllib": peer_mllib}[args.run_peer](args.corpus,
                                                                           args.peer_out)
        return

    work = Path(tempfile.mkdtemp(prefix="lc-near-bench-"))
    try:
        compare(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(args: argparse.Namespace, work: Path) -> None:
    """The runs side by side, the ground truth, and the table."""
    groups, ids, texts = load(args.corpus)
    n = len(texts)
    print(f"input: {n:,} records from {args.corpus}")
    row_of = {(g, i): r for r, (g, i) in enumerate(zip(groups, ids))}
    peers = [p for p in args.peers.split(",") if p]
    # Each run's measured rounds; a peer with none was stopped in the first round.
    figures: dict[str, list[Measured]] = {name: [] for name in ["ours", *peers]}
    reported: dict[str, dict] = {}
    for round_no in range(args.repeat):
        tag = f" (round {round_no + 1} of {args.repeat})" if args.repeat > 1 else ""
        mine, our_cmd, overlaps, timings = ours(args.corpus, work, round_no)
        figures["ours"].append(mine)
        print(f"ours{tag}: {mine.wall:.1f} s, peak {mine.peak / 2**30:.2f} GiB (Python driver "
              f"{mine.own_peak / 2**30:.2f}, JVM {mine.java_peak / 2**30:.2f}); stages (s): "
              + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()), flush=True)
        found = {(row_of[o["from"], o["id"]], o["to"]): o["similarity"] for o in overlaps}
        if reported.setdefault("ours", found) != found:
            sys.exit(f"ours: round {round_no + 1} reported other overlaps than round 1")
        for peer in peers:
            if round_no and not figures[peer]:  # stopped in the first round: not run again
                continue
            out = work / f"{peer}.json"
            cmd = [sys.executable, __file__, str(args.corpus), "--run-peer", peer,
                   "--peer-out", str(out)]
            try:
                m = run(cmd, timeout=args.timeout, ok=(0,))
            except TimeoutError:
                print(f"{peer}{tag}: did not finish in {args.timeout:.0f} s")
                continue
            figures[peer].append(m)
            print(f"{peer}{tag}: {m.wall:.1f} s, peak {m.peak / 2**30:.2f} GiB", flush=True)
            reported.setdefault(peer, {(i, g): j for i, g, j in json.loads(out.read_text())})
    if args.repeat > 1:
        print(f"ours: the same {len(reported['ours']):,} overlaps in all {args.repeat} rounds")

    # Ground truth on a fixed sample of test records.
    batch = shingle_sets(texts)
    rng = np.random.default_rng(0)
    tests = np.array([r for r, g in enumerate(groups) if g.endswith("/test")
                      and batch.sizes()[r] > 0])
    sample = np.sort(rng.choice(tests, size=min(args.sample, len(tests)), replace=False))
    t = time.monotonic()
    truth = truth_for_sample(batch, sample, THRESHOLD)
    print(f"ground truth: {len(sample):,} sampled test records, brute force (prefix-filtered "
          f"exact Jaccard) in {time.monotonic() - t:.1f} s")
    best: dict[tuple[int, str], float] = {}
    for r, found in truth.items():
        for c, j in found:
            if groups[c] != groups[r]:
                key = (r, groups[c])
                best[key] = max(best.get(key, 0.0), j)
    sample_set = set(sample.tolist())
    print(f"cells (sample record, other group) with best J >= 0.8: "
          f"{sum(j >= 0.8 for j in best.values()):,}; >= 0.9: "
          f"{sum(j >= 0.9 for j in best.values()):,}")
    print()
    print(f"{'run':<11} {'wall s':>8} {'range s':>13} {'records/s':>10} {'peak GiB':>9} "
          f"{'driver':>7} {'JVM':>6} {'recall@0.8':>11} {'recall@0.9':>11} {'precision':>10}")
    for name, runs in figures.items():
        if not runs:
            print(f"{name:<11} {'-':>8} stopped after {args.timeout:.0f} s")
            continue
        walls = [m.wall for m in runs]
        wall = float(np.median(walls))
        spread = f"{min(walls):.1f}-{max(walls):.1f}" if len(runs) > 1 else "-"
        rep = {k: v for k, v in reported.get(name, {}).items() if k[0] in sample_set}
        r8 = [k in rep for k, j in best.items() if j >= 0.8]
        r9 = [k in rep for k, j in best.items() if j >= 0.9]
        good = [best.get(k, 0.0) >= THRESHOLD and v <= best[k] + 1e-12 for k, v in rep.items()]
        peak = max(m.peak for m in runs) / 2**30
        own = max(m.own_peak for m in runs) / 2**30
        java = max(m.java_peak for m in runs) / 2**30
        print(f"{name:<11} {wall:>8.1f} {spread:>13} {n / wall:>10,.0f} {peak:>9.2f} "
              f"{own:>7.2f} {java:>6.2f} {np.mean(r8):>11.4f} {np.mean(r9):>11.4f} "
              f"{(np.mean(good) if good else math.nan):>10.4f}")
    rounds = (f"wall: median of {args.repeat} rounds, range: fastest-slowest round; peaks: "
              "highest of the rounds; " if args.repeat > 1 else "")
    print(f"({rounds}peak: PSS of the whole process tree; driver: of the launched Python process "
          "alone, where anything collected would land; JVM: of the Java processes in the tree, "
          "GiB)")
    print()
    print("ours:", our_cmd)


if __name__ == "__main__":
    main()
