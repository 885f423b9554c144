"""Verified near-duplicate edges between keys: sign, bucket, verify inside buckets (SPEC 4-5).

The stages, each ``DataFrame -> DataFrame``, all per-record work in ``mapInArrow`` over whole
Arrow batches (numpy on Arrow's own buffers, no per-row Python objects):

1. :func:`representatives` -- one text per distinct key, the first record's in (dataset, row)
   order (records are collapsed first, so a text with 100,000 copies is signed once, and the
   choice does not depend on partitioning).  The callers pass each record's *unit* as its key
   (:func:`leakcheck_spark.match.as_units`): records of a unit share their tokens, so the text
   signed stands for every record of it (a normalised-text key would not: ``"ab c"`` and
   ``"a bc"`` share one under ``whitespace``).
2. :func:`sign` -- per key, one 64-bit hash per LSH band of its MinHash signature (a row per
   band: b values instead of P; the signature itself is never stored).
3. :func:`buckets` -- the band buckets (band, band hash) holding more than one key, found by
   sorting the band rows by bucket and reading off the runs; of buckets
   with exactly the same keys (a cluster of near-identical texts shares most bands) only the
   lowest band's is kept.
4. :func:`member_sets` -- for every key in such a bucket: its shingle set (sorted unique 64-bit
   hashes, packed as binary; exact verification needs the set itself, and 8 bytes a shingle keeps
   collisions at ~2^-64), its band hashes, and the bands where its bucket is windowed (below).
5. :func:`verify` -- each bucket's members are brought together once (one shuffle, each set
   moved once per bucket it is in, never once per pair) and the pairs of the bucket are verified
   there by exact Jaccard; only pairs at or above the threshold survive, with their similarity.
   Intersections are counted by merging the two sorted sets, or, in a large bucket of
   near-identical texts (a small vocabulary of its own), by AND and popcount of bitsets
   (:class:`Intersections`); both are exact.

Every candidate pair is verified exactly once: in a bucket of band k, a pair is skipped when its
two keys also share an earlier band's bucket that is enumerated in full (that bucket verifies it).

Skew.  A bucket of up to `full_bucket` keys (4,000 by default, ~8M pairs) has all its pairs
verified.  Above that (boilerplate shared by tens of thousands of texts) the bucket's keys are put
in a pseudo-random order of their own (a hash of key and bucket) and each key is paired with its
next :func:`window` neighbours only: 2^21 / n of them, at least 16, so a bucket costs ~2M pairs
(16 per key past 131,072 keys).  A 50,000-key bucket gives ~2M pairs instead of 1.25e9, in one
task, in bounded memory.  Such a pair is verified in the first band whose bucket it shares, and
only if no bucket it shares is enumerated in full.  Effect on recall: only pairs whose every
shared bucket is windowed can be missed, each with probability ~1 - 2w/n; every key of a windowed
bucket is still verified against ~2w others of it, so a record of such a cluster still matches
(the matrices' "matches at least one record of B" counts hold) unless B holds fewer than ~n/2w
members of the cluster.  Measured by ``benchmarks/near_skew.py``.  A bucket of more than `part`
keys (65,536) is dealt into parts of at most about that many by a hash of key and bucket
(:func:`bucket_parts`), each verified in a task of its own with the whole bucket's window: no
task holds the sets of more than ~65,536 keys, however large the bucket (its keys then meet
neighbours from their own part, as many as before).

:func:`near_edges` chains them into (key, other, match, similarity) edges, both directions, which
:mod:`leakcheck_spark.match` consumes exactly like its exact self-edges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from leakcheck_spark import minhash as mh
from leakcheck_spark.errors import require_columns

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

from leakcheck_spark.options import Options

FULL_BUCKET = 4000
# Keys of a windowed bucket verified in one task at most (their sets are held in one Python
# worker, ~5 KB a key of real code at the peak): a larger bucket is dealt into parts of this size
# at most, by a hash of key and bucket (:func:`bucket_parts`).
BUCKET_PART = 1 << 16
_WINDOW_PAIRS = 1 << 21
_MIN_WINDOW = 16
# A pair exactly at the threshold becomes a candidate with at least this probability; the layout
# with the fewest rows per band (most selective) that reaches it is used (16 x 8 at 0.8 / 128).
_AT_THRESHOLD = 0.94
# Signature values held at once while signing (16,384 texts at P = 128; 8 MiB).
_SIGNATURE_VALUES = 1 << 21
# The records near matching reads: texts go to Python workers, keys come back declared binary.
_RECORDS = {"key": "binary", "text": "string", "dataset": None, "row": None}


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


def sign_batch(texts: pa.Array, opts: Options, sets: bool = False
               ) -> tuple[np.ndarray, mh.ShingleBatch]:
    """(band hashes (texts, bands) int64, shingles) of a batch of texts; with `sets`, the
    shingles are each text's sorted unique hashes."""
    batch = mh.shingle_batch(texts, opts.shingle, opts.normalizer, opts.lang, opts.max_chars,
                             sets=sets)
    bands, rows = lsh_layout(opts.threshold, opts.num_perm)
    out = np.empty((len(batch), bands), dtype=np.int64)
    # Signatures of a few texts at a time: P values a text, three times over in band_hashes.
    step = max(1, _SIGNATURE_VALUES // opts.num_perm)
    for lo in range(0, len(batch), step):
        part = batch.texts(lo, lo + step)
        out[lo:lo + len(part)] = band_hashes(mh.signatures(part, opts.num_perm), bands, rows)
    return out, batch


def _list_array(values: np.ndarray, width: int) -> pa.Array:
    """An Arrow list<int64> array of rows of `width` values each (no per-row objects)."""
    import pyarrow as pa

    offsets = np.arange(len(values) // max(width, 1) + 1, dtype=np.int32) * width
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.view(np.int64)))


def representatives(records: DataFrame, sides: Column | None = None) -> DataFrame:
    """(key, text): one text per non-empty key, the first record's in (dataset, row) order.
    With `sides` (a bit per record, 1 or 2), also `side`: the bits of the key's records."""
    import pyspark.sql.functions as F
    from pyspark.sql import Window

    require_columns(records, "near.representatives", _RECORDS, "records")
    # A row_number window rather than ``min_by(text, ...)`` per key: Spark keeps only each key's
    # first row on both sides of the shuffle (a key with 100,000 copies ships one text per task),
    # as the partial aggregation did, at a lower cost (benchmarks/RESULTS.md).
    kept = records.where(F.col("key").isNotNull())
    first = F.row_number().over(Window.partitionBy("key").orderBy("dataset", "row"))
    reps = kept.select("key", "text", first.alias("_n")).where("_n = 1").drop("_n")
    if sides is None:
        return reps
    # The sides of all of a key's records, aggregated apart (no text moves for them).
    return reps.join(kept.groupBy("key").agg(F.bit_or(sides).alias("side")), "key")


def sign(reps: DataFrame, opts: Options) -> DataFrame:
    """(id, band, h[, side]): a row per LSH band of every representative with at least one
    shingle -- its key's :func:`key_id`, the band's number and the band's 64-bit hash.

    Rows rather than an ``array<bigint>`` per key: the next stage groups by band hash, and
    flat long columns go from Arrow to Spark's sorter with no explode in between."""
    import pyarrow as pa

    require_columns(reps, "near.sign", {"key": None, "text": "string"},
                    "representatives (near.representatives)")
    bands, _ = lsh_layout(opts.threshold, opts.num_perm)
    extra = ["side"] if "side" in reps.columns else []

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            hashes, shingles = sign_batch(rb.column("text"), opts)
            keep = np.flatnonzero(shingles.sizes() > 0)
            yield pa.RecordBatch.from_arrays(
                [pa.array(np.repeat(rb.column("id").to_numpy()[keep], bands)),
                 pa.array(np.tile(np.arange(bands, dtype=np.int32), len(keep))),
                 pa.array(hashes[keep].ravel()),
                 *[pa.array(np.repeat(rb.column(c).to_numpy()[keep], bands)) for c in extra]],
                names=["id", "band", "h", *extra])

    return reps.select(key_id().alias("id"), "text", *extra).mapInArrow(
        run, "id bigint, band int, h bigint" + "".join(f", {c} int" for c in extra))


def key_id() -> Column:
    """A key's 64-bit id for grouping keys into buckets (Spark's xxhash64 of the key): longs
    group and join much faster than 16-byte binaries.  Two keys sharing an id cost nothing in
    exactness: the members of a bucket are joined back to every key holding their id."""
    import pyspark.sql.functions as F

    return F.xxhash64("key")


def buckets(signed: DataFrame) -> DataFrame:
    """(band, h, ids): every band bucket with more than one key id, the ids sorted.  When the
    keys carry a `side` (:func:`representatives`), only buckets holding keys of both sides.

    Most buckets hold one key (7.2M band rows, 95k shared buckets on the 501k-record corpus), so
    the rows are sorted by bucket and the runs read off in numpy: 9.5 s there against 23.6 s for
    a ``collect_set`` aggregation by bucket, which builds an object for every bucket."""
    import pyarrow as pa

    require_columns(signed, "near.buckets", {"band": "int", "h": "bigint", "id": "bigint"},
                    "band rows (near.sign)")
    both = "side" in signed.columns

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in _whole_buckets(batches):
            band = rb.column("band").to_numpy()
            h = rb.column("h").to_numpy()
            ids = rb.column("id").to_numpy()
            starts = _bucket_starts(band, h)
            new_id = np.ones(len(h), dtype=bool)  # ids are sorted within a bucket
            new_id[1:] = ids[1:] != ids[:-1]
            new_id[starts] = True
            distinct = np.add.reduceat(new_id.astype(np.int64), starts)
            keep = distinct > 1
            if both:
                keep &= np.bitwise_or.reduceat(rb.column("side").to_numpy(), starts) == 3
            rows = new_id & np.repeat(keep, np.diff(np.append(starts, len(h))))
            offsets = np.zeros(int(keep.sum()) + 1, dtype=np.int32)
            np.cumsum(distinct[keep], out=offsets[1:])
            yield pa.RecordBatch.from_arrays(
                [pa.array(band[starts[keep]]), pa.array(h[starts[keep]]),
                 pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids[rows]))],
                names=["band", "h", "ids"])

    return (signed.repartition("h").sortWithinPartitions("h", "band", "id")
            .mapInArrow(run, "band int, h bigint, ids array<bigint>"))


def distinct_buckets(bucketed: DataFrame) -> DataFrame:
    """(band, h, ids) of :func:`buckets`, only the lowest band's of buckets with the same ids
    (they would verify the same pairs)."""
    import pyspark.sql.functions as F

    require_columns(bucketed, "near.distinct_buckets", {"band": None, "h": None, "ids": None},
                    "buckets (near.buckets)")

    return (bucketed.groupBy("ids").agg(F.min(F.struct("band", "h")).alias("first"))
            .select("first.band", "first.h", "ids"))


def window(n: np.ndarray | int, full_bucket: int = FULL_BUCKET) -> np.ndarray:
    """How many following keys each key of an n-key bucket is verified against: all of them up
    to `full_bucket` keys, else 2^21 / n, at least 16 and at most `full_bucket`.

    >>> window(np.array([2, 4000, 4001, 50000, 10**6])).tolist()
    [1, 3999, 524, 41, 16]
    """
    n = np.asarray(n, dtype=np.int64)
    wide = np.clip(_WINDOW_PAIRS // np.maximum(n, 1), min(_MIN_WINDOW, full_bucket), full_bucket)
    return np.where(n <= full_bucket, n - 1, wide)


def member_sets(reps: DataFrame, bucketed: DataFrame, opts: Options,
                full_bucket: int = FULL_BUCKET) -> DataFrame:
    """(id, key, shingles binary, bands array<bigint>, windowed array<int>) for every key whose
    id is in a bucket of `bucketed` (all of :func:`buckets`): its sorted unique shingle hashes, 8
    bytes each, its band hashes, and the bands whose bucket of it is windowed (more than
    `full_bucket` keys).

    Binary rather than ``array<bigint>`` for the set: the JVM copies a binary value as one block
    (an array element by element) when it moves rows to Arrow, and the sets are the data that
    moves in verification."""
    import pyarrow as pa
    import pyspark.sql.functions as F

    require_columns(reps, "near.member_sets", {"key": "binary", "text": "string"},
                    "representatives (near.representatives)")
    require_columns(bucketed, "near.member_sets", {"band": None, "ids": "array<bigint>"},
                    "buckets (near.buckets)")
    per_id = (bucketed.select("band", F.size("ids").alias("n"), F.explode("ids").alias("id"))
              .groupBy("id").agg(F.collect_list(F.when(F.col("n") > full_bucket, F.col("band")))
                                 .alias("windowed")))
    bands, _ = lsh_layout(opts.threshold, opts.num_perm)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            hashes, batch = sign_batch(rb.column("text"), opts, sets=True)
            yield pa.RecordBatch.from_arrays(
                [rb.column("id"), rb.column("key"), _packed(batch.hashes, batch.offsets),
                 _list_array(hashes.ravel(), bands), rb.column("windowed")],
                names=["id", "key", "shingles", "bands", "windowed"])

    return (reps.withColumn("id", key_id()).join(per_id, "id")
            .select("id", "key", "text", "windowed")
            .mapInArrow(run, "id bigint, key binary, shingles binary, bands array<bigint>, "
                             "windowed array<int>"))


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


def _excl_cumsum(sizes: np.ndarray) -> np.ndarray:
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _tagged(offsets: np.ndarray, rows: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The values of sets `rows` (laid out by `offsets`), in order, each as
    ``(index in rows) << 32 | rank``: one sorted run (in place where possible: these arrays are
    the bulk of verification's memory traffic)."""
    sizes = offsets[rows + 1] - offsets[rows]
    pos = np.repeat(offsets[rows] - (np.cumsum(sizes) - sizes), sizes)
    pos += np.arange(len(pos))
    out = np.repeat(np.arange(len(rows), dtype=np.uint64) << np.uint64(32), sizes)
    out |= ranks[pos]
    return out


def intersection_sizes(ranks: np.ndarray, offsets: np.ndarray, i: np.ndarray,
                       j: np.ndarray) -> np.ndarray:
    """|S_i[p] & S_j[p]| for every pair p of sets, exactly.  Set r is
    ``ranks[offsets[r]:offsets[r + 1]]``: distinct values below 2^32, sorted.

    Each side becomes one sorted run of (pair << 32 | rank); numpy's stable sort of the two runs
    side by side is a single linear merge (timsort), and equal neighbours are the shared values.

    >>> intersection_sizes(np.array([1, 2, 3, 5, 2, 3, 4, 7]), np.array([0, 3, 4, 8]),
    ...                    np.array([0, 1]), np.array([2, 2]))
    array([2, 0])
    """
    ranks = ranks.view(np.uint64) if ranks.dtype == np.int64 else ranks.astype(np.uint64)
    merged = np.concatenate([_tagged(offsets, i, ranks), _tagged(offsets, j, ranks)])
    merged.sort(kind="stable")
    shared = merged[1:][merged[1:] == merged[:-1]]
    shared >>= np.uint64(32)
    return np.bincount(shared.view(np.int64), minlength=len(i))


# Pairs enumerated at once, and shingles gathered at once per side, in verification: bounds the
# per-pair temporaries (~100 bytes a pair) and the merge (~24 bytes a shingle).
_PAIRS_PER_STEP = 1 << 18
_VALUES_PER_STEP = 1 << 22

# Buckets verified by bitsets (:class:`Intersections`): at least this many keys, at most this many
# 64-bit words of bitsets per bucket (64 MB), and bitsets of at most this many words per shingle
# of an average member.  Measured per pair: ~4 ns a word (gather, AND, popcount) against ~16 ns
# a shingle of either set in the merge, so at 4 words a shingle bitsets cost at most half.
_BITSET_MIN_KEYS = 16
_BITSET_MAX_WORDS = 1 << 23
_BITSET_WORDS_PER_SHINGLE = 4
_BITSET_WORDS_PER_STEP = 1 << 22

# Set bits per byte, for numpy without ``bitwise_count`` (before 2.0).
_BYTE_BITS = np.array([bin(b).count("1") for b in range(256)], dtype=np.uint8)


def _popcounts(words: np.ndarray) -> np.ndarray:
    """The number of set bits of each row of a 2-D uint64 array."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words).sum(axis=1, dtype=np.int64)
    return _BYTE_BITS[words.view(np.uint8)].sum(axis=1, dtype=np.int64)


class Intersections:
    """|S_a & S_b|, exactly, for pairs of rows of one block of whole buckets (the rows of a
    bucket consecutive, every pair within one bucket).  Set r is ``ranks[offsets[r]:offsets[r +
    1]]``: distinct values below 2^32, sorted.

    A bucket of many texts that vary within a small shared vocabulary (one boilerplate with a
    handful of variants recurring across it) has many pairs over few distinct shingles.  There
    each member becomes a bitset over the bucket's own vocabulary, and a pair costs an AND and a
    popcount of a few words instead of a merge of two sets (:func:`intersection_sizes`, used for
    every other bucket, e.g. thousands of getters each with a name of its own).  Both are exact.
    `sizes` are the buckets' row counts, in row order.
    """

    def __init__(self, ranks: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> None:
        self.ranks, self.offsets = ranks, offsets
        starts = _excl_cumsum(sizes)
        self.bucket = np.repeat(np.arange(len(sizes)), sizes)
        self.bits: dict[int, tuple[int, np.ndarray]] = {}  # bucket -> (first row, bitsets)
        self.dense = np.zeros(len(sizes), dtype=bool)  # buckets with bitsets
        lengths = np.diff(offsets)
        for b in np.flatnonzero(sizes >= _BITSET_MIN_KEYS).tolist():
            lo, hi = int(starts[b]), int(starts[b] + sizes[b])
            local, bit = np.unique(ranks[offsets[lo]:offsets[hi]], return_inverse=True)
            words = (len(local) + 63) // 64
            if (words * (hi - lo) > _BITSET_MAX_WORDS
                    or words > _BITSET_WORDS_PER_SHINGLE * lengths[lo:hi].mean()):
                continue
            bit = bit.reshape(-1)
            row = np.repeat(np.arange(hi - lo, dtype=np.int64), lengths[lo:hi])
            sets = np.zeros((hi - lo) * words, dtype=np.uint64)
            np.bitwise_or.at(sets, row * words + (bit >> 6),
                             np.left_shift(np.uint64(1), (bit & 63).astype(np.uint64)))
            self.bits[b] = (lo, sets.reshape(hi - lo, words))
            self.dense[b] = True

    def __call__(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        if not self.bits:
            return intersection_sizes(self.ranks, self.offsets, i, j)
        out = np.empty(len(i), dtype=np.int64)
        bucket = self.bucket[i]
        merged = ~self.dense[bucket]
        out[merged] = intersection_sizes(self.ranks, self.offsets, i[merged], j[merged])
        # The bitset pairs grouped by bucket with one sort (not one scan of all pairs per bucket).
        dense = np.flatnonzero(~merged)
        dense = dense[np.argsort(bucket[dense], kind="stable")]
        cuts = _excl_cumsum(np.unique(bucket[dense], return_counts=True)[1])
        for lo_p, hi_p in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            pairs = dense[lo_p:hi_p]
            lo, sets = self.bits[int(bucket[pairs[0]])]
            step = max(1, _BITSET_WORDS_PER_STEP // sets.shape[1])
            for k in range(0, len(pairs), step):
                p = pairs[k:k + step]
                out[p] = _popcounts(sets[i[p] - lo] & sets[j[p] - lo])
        return out


def _pair_steps(partners: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Pairs (i, i + 1 .. i + partners[i]) of positions, in steps of about _PAIRS_PER_STEP."""
    cum = _excl_cumsum(partners)
    lo = 0
    while lo < len(partners):
        hi = max(lo + 1, int(np.searchsorted(cum, cum[lo] + _PAIRS_PER_STEP, "right")) - 1)
        part = partners[lo:hi]
        i = np.repeat(np.arange(lo, hi, dtype=np.int64), part)
        yield i, i + 1 + np.arange(len(i), dtype=np.int64) - np.repeat(_excl_cumsum(part)[:-1],
                                                                       part)
        lo = hi


def _bucket_starts(band: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Row positions where a new bucket (`band`, `h`) begins, for rows grouped by bucket."""
    new = np.ones(len(h), dtype=bool)
    new[1:] = (band[1:] != band[:-1]) | (h[1:] != h[:-1])
    return np.flatnonzero(new)


def bucket_partners(rb: pa.RecordBatch, full_bucket: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For rows sorted by bucket (`band`, `h`): the bucket sizes, per row how many of the rows
    after it in its bucket it is paired with (all of them in a full bucket, its window in a
    larger one), and per row whether its bucket is full.  A row's `n`, where the rows have one,
    is the size of the whole bucket its rows are a part of (:func:`bucket_parts`): the window
    is the whole bucket's."""
    n = rb.num_rows
    band = rb.column("band").to_numpy()
    h = rb.column("h").to_numpy()
    starts = _bucket_starts(band, h)
    sizes = np.diff(np.append(starts, n))
    whole = rb.column("n").to_numpy()[starts] if "n" in rb.schema.names else sizes
    local = np.arange(n) - np.repeat(starts, sizes)
    return sizes, np.minimum(np.repeat(sizes, sizes) - 1 - local,
                             np.repeat(window(whole, full_bucket), sizes)), np.repeat(
        whole <= full_bucket, sizes)


def verify_block(rb: pa.RecordBatch, threshold: float, full_bucket: int
                 ) -> Iterator[pa.RecordBatch]:
    """(key, other, similarity) of the verified pairs of whole buckets, sorted by (band, h)."""
    import pyarrow as pa

    n = rb.num_rows
    band = rb.column("band").to_numpy()
    sizes, partners, full = bucket_partners(rb, full_bucket)
    nb = len(rb.column("bands")[0]) if n else 0
    sig = rb.column("bands").flatten().to_numpy().reshape(n, nb)
    windowed = np.zeros((n, nb), dtype=bool)
    wl = rb.column("windowed")
    woff = np.asarray(wl.offsets, dtype=np.int64)
    windowed[np.repeat(np.arange(n), np.diff(woff)), wl.values.to_numpy()[woff[0]:woff[-1]]] = True
    values, offsets = _unpacked(rb.column("shingles"))
    # Dense ranks keep the order of the hashes and fit in 32 bits (see intersection_sizes).
    ranks = np.unique(values, return_inverse=True)[1].reshape(-1)
    lengths = np.diff(offsets)
    intersections = Intersections(ranks, offsets, sizes)
    earlier = np.arange(nb)[None, :] < band[:, None]
    keys = rb.column("key")
    for i, j in _pair_steps(partners):
        shared = sig[i] == sig[j]
        in_full = shared & ~windowed[i]
        # Each pair once: in its first shared full bucket, else (only windowed buckets shared)
        # in its first shared bucket.
        keep = np.where(full[i], ~(in_full & earlier[i]).any(1),
                        ~(in_full.any(1) | (shared & earlier[i]).any(1)))
        i, j = i[keep], j[keep]
        vol = _excl_cumsum(lengths[i] + lengths[j])
        lo = 0
        while lo < len(i):
            hi = max(lo + 1, int(np.searchsorted(vol, vol[lo] + _VALUES_PER_STEP, "right")) - 1)
            a, b = i[lo:hi], j[lo:hi]
            inter = intersections(a, b)
            union = lengths[a] + lengths[b] - inter
            sim = inter / np.maximum(union, 1)
            ok = sim >= threshold
            if ok.any():
                yield pa.RecordBatch.from_arrays(
                    [keys.take(pa.array(a[ok])), keys.take(pa.array(b[ok])), pa.array(sim[ok])],
                    names=["key", "other", "similarity"])
            lo = hi


def _whole_buckets(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Re-cut a stream of batches whose rows are grouped by bucket (`band`, `h`) so that no
    bucket spans two batches."""
    import pyarrow as pa

    held: list[pa.RecordBatch] = []

    def bucket_of(rb: pa.RecordBatch, row: int) -> tuple[int, int]:
        return rb.column("band")[row].as_py(), rb.column("h")[row].as_py()

    def joined(parts: list[pa.RecordBatch]) -> pa.RecordBatch:
        if len(parts) == 1:
            return parts[0]
        table = pa.Table.from_batches(parts).combine_chunks()
        return pa.RecordBatch.from_arrays([c.chunk(0) for c in table.columns],
                                          names=table.column_names)

    for rb in batches:
        if rb.num_rows == 0:
            continue
        last = bucket_of(rb, rb.num_rows - 1)
        if held and bucket_of(rb, 0) == last == bucket_of(held[-1], held[-1].num_rows - 1):
            held.append(rb)  # the bucket goes on
            continue
        band = rb.column("band").to_numpy()
        h = rb.column("h").to_numpy()
        tail = int(np.flatnonzero((band != last[0]) | (h != last[1]))[-1] + 1
                   if ((band != last[0]) | (h != last[1])).any() else 0)
        if tail:
            yield joined(held + [rb.slice(0, tail)])
            held = [rb.slice(tail)]
        else:
            held.append(rb)
    if held:
        yield joined(held)


def bucket_parts(members: DataFrame, part: int = BUCKET_PART) -> DataFrame:
    """`members` (band, h, n, key, ...: a row per key of an n-key bucket) with the `h` of a
    bucket of more than `part` keys replaced by that of one of its ceil(n / part) parts, chosen
    by a hash of key and bucket: the parts are verified apart, each in one task.

    Only windowed buckets (`part` is at least the full bucket's size) are split, and their keys
    are paired with pseudo-random neighbours anyway: in a part, with as many of them as in the
    whole bucket (the window follows `n`).  Two keys of one bucket then meet only if they fall in
    one part; a key still meets as many others."""
    import pyspark.sql.functions as F

    n = F.col("n")
    parts = F.ceil(n / F.lit(part))
    return members.withColumn("h", F.when(n > part, F.xxhash64(
        "h", F.pmod(F.xxhash64("h", "key"), parts))).otherwise(F.col("h")))


def verify(members: DataFrame, threshold: float, full_bucket: int = FULL_BUCKET,
           part: int = BUCKET_PART) -> DataFrame:
    """(key, other, similarity): the pairs of keys in a common bucket whose exact Jaccard is >=
    threshold, each pair once.  `members` is (band, h, n, key, shingles, bands, windowed), a row
    per key per bucket of n keys; a bucket of more than `part` keys is verified in parts
    (:func:`bucket_parts`)."""
    import pyspark.sql.functions as F

    if part < full_bucket:
        raise ValueError(f"part ({part}) must be at least full_bucket ({full_bucket})")
    require_columns(members, "near.verify",
                    {"band": None, "h": None, "n": None, "key": "binary", "shingles": "binary",
                     "bands": "array<bigint>", "windowed": "array<int>"},
                    "bucket members (near.member_sets)")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in _whole_buckets(batches):
            yield from verify_block(rb, threshold, full_bucket)

    # One bucket per task, in a pseudo-random order of its own (a windowed bucket pairs
    # neighbours in it), ties broken by key so that the order never depends on partitioning.
    return (bucket_parts(members, part).repartition("band", "h")
            .sortWithinPartitions("band", "h", F.xxhash64("key", "h"), "key")
            .select("band", "h", "n", "key", "shingles", "bands", "windowed")
            .mapInArrow(run, "key binary, other binary, similarity double"))


def near_edges(records: DataFrame, opts: Options, full_bucket: int = FULL_BUCKET,
               sides: Column | None = None, part: int = BUCKET_PART
               ) -> tuple[DataFrame, list[DataFrame]]:
    """(key, other, match="near", similarity) verified near edges, in both directions, and the
    cached frame they are read from (the caller unpersists it when done).

    With `sides` (1 or 2 per record: e.g. train and eval) only buckets holding keys of both
    sides are verified, so pairs within one side may be missing (the caller wants the others).

    Runs the stages now (a few Spark jobs) and keeps only the verified pairs cached.
    """
    import pyspark.sql.functions as F
    from pyspark import StorageLevel

    require_columns(records, "near.near_edges", _RECORDS, "records")
    level = StorageLevel.MEMORY_AND_DISK
    reps = representatives(records, sides).persist(level)
    bucketed = buckets(sign(reps, opts)).persist(level)
    sets = member_sets(reps, bucketed, opts, full_bucket)
    members = (distinct_buckets(bucketed)
               .select("band", "h", F.size("ids").alias("n"), F.explode("ids").alias("id"))
               .join(sets, "id"))
    found = verify(members, opts.threshold, full_bucket, part).persist(level)
    found.count()
    for df in (reps, bucketed):
        df.unpersist()
    both = found.unionByName(found.select(F.col("other").alias("key"),
                                          F.col("key").alias("other"), "similarity"))
    return both.select("key", "other", F.lit("near").alias("match"), "similarity"), [found]


def unit_match_edges(records: DataFrame, opts: Options, sides: Column | None = None
                     ) -> tuple[DataFrame, list[DataFrame]]:
    """Every edge near matching matches records by, between *units*: the exact edges joining
    the units of a key (:func:`leakcheck_spark.match.unit_edges`) and the verified near edges
    (:func:`near_edges`, over `records` as :func:`leakcheck_spark.match.as_units` gives them);
    and the cached frame to unpersist.  `records` carry `key` and `unit`; the caller matches
    them by unit (``as_units``)."""
    from leakcheck_spark import match

    require_columns(records, "near.unit_match_edges", {**_RECORDS, "unit": "binary"}, "records")
    near, cached = near_edges(match.as_units(records), opts, sides=sides)
    return match.unit_edges(records).unionByName(near), cached


def near_progress(found: DataFrame, opts: Options) -> str:
    """The progress line of the near stage (`found` is the cached frame of :func:`near_edges`)."""
    return (f"near pairs: {found.count():,} pairs of distinct texts at Jaccard >= "
            f"{opts.threshold:g}, verified")
