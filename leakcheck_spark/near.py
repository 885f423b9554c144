"""Verified near-duplicate edges between keys: sign, band, pair, verify (SPEC sections 4-5).

The stages, each ``DataFrame -> DataFrame``, all per-record work in ``mapInArrow`` over whole
Arrow batches (numpy on Arrow's own buffers, no per-row Python objects):

1. :func:`representatives` -- one text per distinct key, the first record's in (dataset, row)
   order (records with equal normalised text are collapsed first, so a text with 100,000 copies
   is signed once, and the choice does not depend on partitioning).
2. :func:`sign` -- per key, one 64-bit hash per LSH band of its MinHash signature
   (``array<bigint>``: b values instead of P; the signature itself is never stored).
3. :func:`candidates` -- pairs of keys that agree on at least one band.  Buckets are bounded:
   a bucket with more than `max_bucket` keys (boilerplate shared by thousands of texts) is sorted
   by key and each key is paired with its next `max_bucket` neighbours only, so a 50,000-key bucket
   yields ~50,000 x max_bucket pairs instead of 1.25e9.  Effect on recall: a pair inside such a
   bucket is missed only if it is more than `max_bucket` apart in key order *and* agrees on no
   other band; records there still match their window neighbours, which keeps the matrices'
   "matches at least one record of B" counts intact unless B has fewer than ~1 member per window.
4. :func:`shingle_sets` -- the shingle set of every key that is in a candidate pair (usually a
   small share of all keys), as sorted unique 64-bit hashes (``array<bigint>``: exact-Jaccard
   verification needs the set itself, and 8 bytes a shingle keeps collisions at ~2^-64).
5. :func:`verify` -- the exact Jaccard of the two shingle sets of every candidate; only pairs at
   or above the threshold survive, with their exact similarity.  The sets are broadcast to the
   pairs when they are small, else joined to them.

:func:`near_edges` chains them into (key, other, match, similarity) edges, both directions, which
:mod:`leakcheck_spark.match` consumes exactly like its exact self-edges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from leakcheck_spark import minhash as mh

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

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


def sign_batch(texts: pa.Array, opts: Options) -> tuple[np.ndarray, np.ndarray]:
    """(band hashes (texts, bands) int64, has_shingles bool) of a batch of texts."""
    batch = mh.shingle_batch(texts, opts.shingle, opts.normalizer, opts.lang, opts.max_chars,
                             sets=False)
    bands, rows = lsh_layout(opts.threshold, opts.num_perm)
    return band_hashes(mh.signatures(batch, opts.num_perm), bands, rows), batch.sizes() > 0


def _list_array(values: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """An Arrow list<int64> array from flat values and offsets (no per-row objects).  Spark
    takes 32-bit list offsets, which a batch's values stay far below."""
    import pyarrow as pa

    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                    pa.array(values.view(np.int64)))


def representatives(records: DataFrame) -> DataFrame:
    """(key, text): one text per non-empty key, the first record's in (dataset, row) order."""
    import pyspark.sql.functions as F

    return (records.where(F.col("key").isNotNull()).groupBy("key")
            .agg(F.min_by("text", F.struct("dataset", "row")).alias("text")))


def sign(reps: DataFrame, opts: Options) -> DataFrame:
    """(key, bands array<bigint>) for every representative with at least one shingle."""
    import pyarrow as pa

    bands, _ = lsh_layout(opts.threshold, opts.num_perm)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            hashes, nonempty = sign_batch(rb.column("text"), opts)
            keep = np.flatnonzero(nonempty)
            offsets = np.arange(len(keep) + 1, dtype=np.int64) * bands
            yield pa.RecordBatch.from_arrays(
                [rb.column("key").take(pa.array(keep)),
                 _list_array(hashes[keep].ravel(), offsets)], names=["key", "bands"])

    return reps.mapInArrow(run, "key binary, bands array<bigint>")


def window_pairs(sizes: np.ndarray, max_bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i < j) to compare in consecutive buckets of the given sizes (sorted keys,
    concatenated): all pairs of a bucket, or, above `max_bucket` keys, each key with its next
    `max_bucket` neighbours only.

    >>> [p.tolist() for p in window_pairs(np.array([3]), 5)]
    [[0, 0, 1], [1, 2, 2]]
    >>> [p.tolist() for p in window_pairs(np.array([4, 2]), 2)]
    [[0, 0, 1, 1, 2, 4], [1, 2, 2, 3, 3, 5]]
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    start = np.cumsum(sizes) - sizes
    pos = np.arange(int(sizes.sum()), dtype=np.int64)
    local = pos - np.repeat(start, sizes)
    last = np.repeat(sizes, sizes) - 1 - local       # keys after this one in its bucket
    partners = np.where(np.repeat(sizes, sizes) > max_bucket,
                        np.minimum(last, max_bucket), last)
    i = np.repeat(pos, partners)
    j = i + 1 + (np.arange(int(partners.sum()), dtype=np.int64)
                 - np.repeat(np.cumsum(partners) - partners, partners))
    return i, j


_PAIRS_PER_FRAME = 1 << 20


def key_id() -> Column:
    """A key's 64-bit id for the band join (Spark's xxhash64 of the key): pairs of longs join,
    sort and de-duplicate much faster than pairs of 16-byte binaries.  Two keys sharing an id
    cost nothing in exactness: verification joins ids back to every key holding them, and checks
    each of those pairs on its own shingle sets."""
    import pyspark.sql.functions as F

    return F.xxhash64("key")


def candidates(signed: DataFrame, max_bucket: int = MAX_BUCKET) -> DataFrame:
    """(a, b) with a < b: distinct pairs of key ids (:func:`key_id`) sharing a band bucket."""
    import pyarrow as pa
    import pyspark.sql.functions as F

    buckets = (
        signed.select(key_id().alias("id"), F.posexplode("bands").alias("band", "h"))
        .groupBy("band", "h").agg(F.array_sort(F.collect_list("id")).alias("ids"))
        .where(F.size("ids") > 1)
        # Buckets of different bands with the same members (a cluster of near-identical texts
        # shares most bands) give the same pairs: keep one of them.
        .select("ids").distinct()
    )

    def pairs(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            ids = rb.column("ids")
            offsets = np.asarray(ids.offsets, dtype=np.int64)
            values = ids.values.to_numpy()
            sizes = np.diff(offsets)
            n_pairs = np.where(sizes > max_bucket,
                               sizes * max_bucket - max_bucket * (max_bucket + 1) // 2,
                               sizes * (sizes - 1) // 2)
            # Bounded output frames: runs of buckets of at most ~_PAIRS_PER_FRAME pairs.
            cum = np.cumsum(n_pairs)
            lo = 0
            while lo < len(sizes):
                done = int(cum[lo - 1]) if lo else 0
                hi = max(lo + 1, int(np.searchsorted(cum, done + _PAIRS_PER_FRAME, "right")))
                i, j = window_pairs(sizes[lo:hi], max_bucket)
                part = values[offsets[lo]:offsets[hi]]
                a, b = part[i], part[j]
                keep = a != b  # equal ids: two keys sharing one id are not paired here
                yield pa.RecordBatch.from_arrays([pa.array(a[keep]), pa.array(b[keep])],
                                                 names=["a", "b"])
                lo = hi

    return buckets.mapInArrow(pairs, "a bigint, b bigint").distinct()


def _packed(values: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """An Arrow binary array holding each row's 64-bit values as little-endian bytes."""
    import pyarrow as pa

    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [
        None, pa.py_buffer((offsets * 8).astype(np.int32)),
        pa.py_buffer(values.astype("<u8", copy=False))])


def _unpacked(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 values, offsets into them) of a binary array written by :func:`_packed`."""
    data, offsets = mh.arrow_bytes(arr)
    base = offsets[0]
    values = data[base:offsets[-1]].view("<u8")
    return values, (offsets - base) // 8


def shingle_sets(reps: DataFrame, ids: DataFrame, opts: Options) -> DataFrame:
    """(key, id, shingles binary): the sorted unique shingle hashes, 8 bytes each, of the keys
    whose :func:`key_id` is in `ids` (a frame with one column, ``id``).

    Binary rather than ``array<bigint>``: the JVM copies a binary value as one block (an array
    element by element) when it moves rows to Arrow, and verification moves each set once per
    candidate pair it is in, so this is the column that costs."""
    import pyarrow as pa

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            batch = mh.shingle_batch(rb.column("text"), opts.shingle, opts.normalizer,
                                     opts.lang, opts.max_chars)
            yield pa.RecordBatch.from_arrays(
                [rb.column("key"), rb.column("id"), _packed(batch.hashes, batch.offsets)],
                names=["key", "id", "shingles"])

    return (reps.withColumn("id", key_id()).join(ids, "id", "left_semi")
            .select("key", "id", "text").mapInArrow(run, "key binary, id bigint, shingles binary"))


def intersection_sizes(a: np.ndarray, a_off: np.ndarray, b: np.ndarray,
                       b_off: np.ndarray) -> np.ndarray:
    """|A_p & B_p| for every pair p of sorted unique sets, exactly.

    Each pair's two sets are laid side by side in one array and merged by a stable sort
    (timsort merges two sorted runs in one linear pass, in cache); equal neighbours are the
    shared hashes.  ~2 us a pair of 130-shingle sets, against ~10 us for ``np.intersect1d``.

    >>> intersection_sizes(np.array([1, 2, 3, 5]), np.array([0, 3, 4]),
    ...                    np.array([2, 3, 4, 7]), np.array([0, 3, 4]))
    array([2, 0])
    """
    na, nb = np.diff(a_off), np.diff(b_off)
    size = na + nb
    off = np.zeros(len(size) + 1, dtype=np.int64)
    np.cumsum(size, out=off[1:])
    merged = np.empty(int(off[-1]), dtype=np.uint64)
    merged[np.repeat(off[:-1] - a_off[:-1], na) + np.arange(len(a))] = a
    merged[np.repeat(off[:-1] + na - b_off[:-1], nb) + np.arange(len(b))] = b
    for lo, hi in zip(off[:-1].tolist(), off[1:].tolist()):
        if hi - lo > 1:
            merged[lo:hi].sort(kind="stable")
    equal = np.zeros(len(merged), dtype=bool)
    equal[1:] = merged[1:] == merged[:-1]
    equal[off[:-1][size > 0]] = False  # never across two pairs
    count = np.zeros(len(merged) + 1, dtype=np.int64)
    np.cumsum(equal, out=count[1:])
    return count[off[1:]] - count[off[:-1]]


# Shingle sets up to this many bytes in all are broadcast to the candidate pairs instead of
# being shuffled to them twice (once per side).
BROADCAST_SET_BYTES = 256 << 20


def verify(pairs: DataFrame, sets: DataFrame, threshold: float,
           broadcast: bool = False) -> DataFrame:
    """(key, other, similarity) for candidate id pairs (a, b) whose keys' exact Jaccard is
    >= threshold."""
    import pyarrow as pa
    import pyspark.sql.functions as F

    side_a = sets.select(F.col("id").alias("a"), "key", F.col("shingles").alias("sa"))
    side_b = sets.select(F.col("id").alias("b"), F.col("key").alias("other"),
                         F.col("shingles").alias("sb"))
    if broadcast:
        side_a, side_b = F.broadcast(side_a), F.broadcast(side_b)
    with_sets = pairs.join(side_a, "a").join(side_b, "b")

    def score(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            a, a_off = _unpacked(rb.column("sa"))
            b, b_off = _unpacked(rb.column("sb"))
            inter = intersection_sizes(a, a_off, b, b_off)
            union = np.diff(a_off) + np.diff(b_off) - inter
            sim = inter / np.maximum(union, 1)
            keep = pa.array(np.flatnonzero(sim >= threshold))
            yield pa.RecordBatch.from_arrays(
                [rb.column("key").take(keep), rb.column("other").take(keep),
                 pa.array(sim).take(keep)], names=["key", "other", "similarity"])

    return with_sets.select("key", "other", "sa", "sb").mapInArrow(
        score, "key binary, other binary, similarity double")


def near_edges(records: DataFrame, opts: Options,
               max_bucket: int = MAX_BUCKET) -> tuple[DataFrame, list[DataFrame]]:
    """(key, other, match="near", similarity) verified near edges, in both directions, and the
    cached frame they are read from (the caller unpersists it when done).

    Runs the stages now (a few Spark jobs) and keeps only the verified pairs cached.
    """
    import pyspark.sql.functions as F
    from pyspark import StorageLevel

    level = StorageLevel.MEMORY_AND_DISK
    reps = representatives(records).persist(level)
    signed = sign(reps, opts).persist(level)
    pairs = candidates(signed, max_bucket).persist(level)
    ids = pairs.select(F.col("a").alias("id")).union(pairs.select(F.col("b").alias("id")))
    sets = shingle_sets(reps, ids.distinct(), opts).persist(level)
    stats = sets.agg(F.count(F.lit(1)).alias("n"),
                     F.sum(F.length("shingles")).alias("bytes")).first()
    small = (stats["bytes"] or 0) + (stats["n"] or 0) * 64 <= BROADCAST_SET_BYTES
    found = verify(pairs, sets, opts.threshold, broadcast=small).persist(level)
    found.count()
    for df in (reps, signed, pairs, sets):
        df.unpersist()
    both = found.unionByName(found.select(F.col("other").alias("key"),
                                          F.col("key").alias("other"), "similarity"))
    return both.select("key", "other", F.lit("near").alias("match"), "similarity"), [found]
