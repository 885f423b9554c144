"""Verified near-duplicate edges between keys: sign, band, pair, verify (SPEC sections 4-5).

The stages, each ``DataFrame -> DataFrame``:

1. :func:`representatives` -- one text per distinct key (records with equal normalised text are
   collapsed first, so a text with 100,000 copies is signed once).
2. :func:`sign` -- per key, the sorted unique 64-bit shingle hashes (``array<bigint>``: 8 bytes a
   shingle, exact-Jaccard verification needs the set itself) and one 64-bit hash per LSH band of
   the MinHash signature (``array<bigint>``: b values instead of P; the signature is never stored).
3. :func:`candidates` -- pairs of keys that agree on at least one band.  Buckets are bounded:
   a bucket with more than `max_bucket` keys (boilerplate shared by thousands of texts) is sorted
   by key and each key is paired with its next `max_bucket` neighbours only, so a 50,000-key bucket
   yields ~50,000 x max_bucket pairs instead of 1.25e9.  Effect on recall: a pair inside such a
   bucket is missed only if it is more than `max_bucket` apart in key order *and* agrees on no
   other band; records there still match their window neighbours, which keeps the matrices'
   "matches at least one record of B" counts intact unless B has fewer than ~1 member per window.
4. :func:`verify` -- the exact Jaccard of the two shingle sets for every candidate; only pairs at
   or above the threshold survive, with their exact similarity.

:func:`near_edges` chains them into (key, other, match, similarity) edges, both directions, which
:mod:`leakcheck_spark.match` consumes exactly like its exact self-edges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from leakcheck_spark import minhash as mh

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd
    from pyspark.sql import DataFrame

from leakcheck_spark.options import Options

MAX_BUCKET = 1000
# A pair exactly at the threshold becomes a candidate with at least this probability; the layout
# with the fewest rows per band (most selective) that reaches it is used (16 x 8 at 0.8 / 128).
_AT_THRESHOLD = 0.94


def lsh_layout(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) for a threshold: the largest r (fewest false candidates) whose b = P // r
    bands make a pair at the threshold a candidate with probability >= 0.94.

    >>> lsh_layout(0.8, 128), lsh_layout(0.9, 128), lsh_layout(0.5, 128)
    ((16, 8), (10, 12), (42, 3))
    """
    best = (num_perm, 1)
    for r in range(1, num_perm + 1):
        b = num_perm // r
        if 1.0 - (1.0 - threshold ** r) ** b >= _AT_THRESHOLD:
            best = (b, r)
    return best


def band_hashes(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """One 64-bit hash per band of each signature: a (texts, bands) int64 array."""
    n = sig.shape[0]
    vals = sig[:, :bands * rows].astype(np.uint64).reshape(n, bands, rows)
    acc = np.zeros((n, bands), dtype=np.uint64)
    for j in range(rows):
        acc = acc * np.uint64(0x100000001B3) + vals[:, :, j]
    acc = mh._fmix64(acc ^ np.arange(bands, dtype=np.uint64)[None, :])
    return acc.view(np.int64)


def sign_batch(texts: pd.Series, opts: Options) -> tuple[list, list]:
    """Shingle sets and band hashes of a batch of texts (lists of int64 arrays)."""
    toks = mh.tokenize_series(texts, opts.normalizer, opts.lang, opts.max_chars)
    batch = mh.shingle_batch(toks, opts.shingle)
    bands, rows = lsh_layout(opts.threshold, opts.num_perm)
    sig = mh.signatures(batch, opts.num_perm)
    hashes = band_hashes(sig, bands, rows)
    sets = batch.hashes.view(np.int64)
    return ([sets[batch.offsets[i]:batch.offsets[i + 1]] for i in range(len(batch))],
            [hashes[i] for i in range(len(batch))])


def representatives(records: DataFrame) -> DataFrame:
    """(key, text): one text per non-empty key, the first record's in (dataset, row) order."""
    import pyspark.sql.functions as F

    return (records.where(F.col("key").isNotNull()).groupBy("key")
            .agg(F.min_by("text", F.struct("dataset", "row")).alias("text")))


def sign(reps: DataFrame, opts: Options) -> DataFrame:
    """(key, shingles array<bigint>, bands array<bigint>) for every representative."""
    import pandas as pd

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            sets, bands = sign_batch(pdf["text"], opts)
            yield pd.DataFrame({"key": pdf["key"], "shingles": sets, "bands": bands})

    return reps.mapInPandas(run, "key binary, shingles array<bigint>, bands array<bigint>")


def bucket_pairs(keys: list, max_bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i < j) to compare within one bucket of sorted keys: all pairs, or, above
    `max_bucket` keys, each key with its next `max_bucket` neighbours.

    >>> [p.tolist() for p in bucket_pairs(["a", "b", "c"], 5)]
    [[0, 0, 1], [1, 2, 2]]
    >>> [p.tolist() for p in bucket_pairs(["a", "b", "c", "d"], 2)]
    [[0, 0, 1, 1, 2], [1, 2, 2, 3, 3]]
    """
    m = len(keys)
    if m <= max_bucket:
        return np.triu_indices(m, 1)
    i = np.repeat(np.arange(m), max_bucket)
    j = i + np.tile(np.arange(1, max_bucket + 1), m)
    ok = j < m
    return i[ok], j[ok]


def candidates(signed: DataFrame, max_bucket: int = MAX_BUCKET) -> DataFrame:
    """(key, other) with key < other: distinct pairs of keys sharing a band bucket."""
    import pandas as pd
    import pyspark.sql.functions as F

    buckets = (
        signed.select("key", F.posexplode("bands").alias("band", "h"))
        .groupBy("band", "h").agg(F.array_sort(F.collect_list("key")).alias("keys"))
        .where(F.size("keys") > 1).select("keys")
    )

    def pairs(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            left, right, pending = [], [], 0
            for keys in pdf["keys"]:
                arr = np.array(list(keys), dtype=object)
                i, j = bucket_pairs(arr, max_bucket)
                left.append(arr[i])
                right.append(arr[j])
                pending += len(i)
                if pending >= 1_000_000:  # bounded output frames
                    yield pd.DataFrame({"key": np.concatenate(left),
                                        "other": np.concatenate(right)})
                    left, right, pending = [], [], 0
            if left:
                yield pd.DataFrame({"key": np.concatenate(left), "other": np.concatenate(right)})

    return buckets.mapInPandas(pairs, "key binary, other binary").distinct()


def jaccard_series(a: pd.Series, b: pd.Series) -> pd.Series:
    """Exact Jaccard of paired sorted-unique int64 arrays."""
    import pandas as pd

    out = np.empty(len(a), dtype=np.float64)
    for n, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        inter = len(np.intersect1d(x, y, assume_unique=True))
        out[n] = inter / (len(x) + len(y) - inter)
    return pd.Series(out, index=a.index)


def verify(pairs: DataFrame, signed: DataFrame, threshold: float) -> DataFrame:
    """(key, other, similarity) for candidate pairs whose exact Jaccard is >= threshold."""
    import pandas as pd
    import pyspark.sql.functions as F

    sets = signed.select("key", "shingles")
    with_sets = (
        pairs.join(sets.withColumnRenamed("shingles", "a"), "key")
        .join(sets.select(F.col("key").alias("other"), F.col("shingles").alias("b")), "other")
    )

    def score(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            sim = jaccard_series(pdf["a"], pdf["b"])
            keep = sim >= threshold
            yield pd.DataFrame({"key": pdf["key"][keep], "other": pdf["other"][keep],
                                "similarity": sim[keep]})

    return with_sets.select("key", "other", "a", "b").mapInPandas(
        score, "key binary, other binary, similarity double")


def near_edges(records: DataFrame, opts: Options, max_bucket: int = MAX_BUCKET) -> DataFrame:
    """(key, other, match="near", similarity) verified near edges, in both directions."""
    import pyspark.sql.functions as F
    from pyspark import StorageLevel

    signed = sign(representatives(records), opts).persist(StorageLevel.MEMORY_AND_DISK)
    found = verify(candidates(signed, max_bucket), signed, opts.threshold)
    both = found.unionByName(found.select(F.col("other").alias("key"),
                                          F.col("key").alias("other"), "similarity"))
    return both.select("key", "other", F.lit("near").alias("match"), "similarity")
