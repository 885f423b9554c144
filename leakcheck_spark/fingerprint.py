"""Dataset fingerprints equal to the ``noleak`` package's ``noleak-fp-v1`` (SPEC section 8).

For a collection of texts: each text is normalised (Unicode NFKC, stripped, whitespace runs
collapsed to one space, casefolded) and hashed with SHA-256; the fingerprint's digest is the
SHA-256 of ``"noleak-fp-v1\\n"`` followed by the *unique* hex digests, sorted, one per line (no
newline after the last).  Order and repeats do not change it.

On the cluster: the normalisation and the per-text SHA-256 run in a pandas UDF (Python's own
``unicodedata``, ``str.split`` and ``str.casefold``, so the bytes are noleak's; only the 32-byte
digests go back to the JVM), the unique digests are sorted by Spark, and only the final
digest -- a sequential hash, which cannot be split -- is computed on the driver, from the sorted
digests streamed to it partition by partition (``toLocalIterator``) in chunks of a few thousand:
the driver holds at most two partitions' chunks at a time (the next one is prefetched), never
the whole list.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from leakcheck_spark.minhash import arrow_bytes
from leakcheck_spark.udf import series_udf

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from leakcheck_spark.options import Source

FP_VERSION = "noleak-fp-v1"
SHORT_HEX = 12
_EMPTY = hashlib.sha256(FP_VERSION.encode() + b"\n").hexdigest()


def normalize_text(text: object) -> str:
    """noleak-norm-v1 of one text (None counts as "", as noleak reads it; other values as
    ``str()`` writes them).  noleak strips and replaces each ``\\s+`` run by one space;
    ``str.split()`` splits at exactly the characters ``\\s`` matches (``str.isspace``), so
    joining its parts is the same, in one pass and without a regex.

    >>> normalize_text("  ＡＢ\\tStraße\\u00a0 x "), normalize_text(None)
    ('ab strasse x', '')
    """
    if text is None:
        return ""
    return " ".join(unicodedata.normalize("NFKC", str(text)).split()).casefold()


def normalize_series(texts: pd.Series) -> pd.Series:
    """:func:`normalize_text` over a Series."""
    import pandas as pd

    return pd.Series([normalize_text(t) for t in texts], index=texts.index, dtype=object)


def digest_series(texts: pd.Series) -> pd.Series:
    """The 32-byte SHA-256 of every normalised text, as noleak hashes it (UTF-8)."""
    import pandas as pd

    sha256 = hashlib.sha256
    return pd.Series([sha256(normalize_text(t).encode("utf-8", "surrogatepass")).digest()
                      for t in texts], index=texts.index, dtype=object)


# The `fp` column as the read derives it from each text (a sources.TextColumn).
FP_COLUMN = ("fp", digest_series, "binary")


def digest_column(text: str = "text") -> Column:
    """The 32-byte SHA-256 of the normalised text (binary: sorts like its hex form)."""
    import pyspark.sql.functions as F

    return series_udf(digest_series, FP_COLUMN[2])(F.col(text))


def short(digest: str) -> str:
    """``noleak-fp-v1:`` and the first 12 hex characters, as noleak prints a fingerprint."""
    return f"{FP_VERSION}:{digest[:SHORT_HEX]}"


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_lines(fp: pa.Array) -> np.ndarray:
    """32-byte digests -> an (n, 65) uint8 array: each row the 64 hex characters and a newline."""
    n = len(fp)
    data, offsets = arrow_bytes(fp)  # binary or large_binary (useLargeVarTypes), sliced or not
    start = int(offsets[0])
    raw = data[start:start + 32 * n].reshape(n, 32)
    out = np.empty((n, 65), dtype=np.uint8)
    out[:, 0:64:2] = _HEX[raw >> 4]
    out[:, 1:64:2] = _HEX[raw & 15]
    out[:, 64] = ord("\n")
    return out


def _chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Sorted (by, fp) rows -> one row per run of equal `by` in a batch: the hex digests of the
    run joined by newlines."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        by = rb.column("by")
        changes = pc.not_equal(by.slice(1), by.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        cuts = np.concatenate([[0], np.flatnonzero(changes) + 1, [n]])
        lines = hex_lines(rb.column("fp"))
        yield pa.RecordBatch.from_arrays(
            [by.take(pa.array(cuts[:-1])),
             pa.array([lines[a:b].tobytes()[:-1] for a, b in zip(cuts[:-1], cuts[1:])],
                      pa.binary())],
            names=["by", "chunk"])


def fingerprints(records: DataFrame, by: str = "group", fp: str = "fp",
                 counts: dict[str, int] | None = None) -> dict[str, dict]:
    """``{name: {"fingerprint", "digest", "n_examples", "n_unique"}}`` per value of `by`,
    sorted by name.  `records` has `by` and the `fp` digest column (:func:`digest_column`);
    `counts` are the records of each value of `by` when the caller has counted them already (an
    audit's group totals), saving a pass over the records."""
    import pyspark.sql.functions as F

    from leakcheck_spark.errors import require_columns

    require_columns(records, "fingerprint.fingerprints", {by: None, fp: "binary"}, "records")
    if counts is None:
        counts = {r.by: r.n for r in records.groupBy(F.col(by).alias("by")).agg(
            F.count(F.lit(1)).alias("n")).collect()}
    unique = (records.select(F.col(by).alias("by"), F.col(fp).alias("fp")).distinct()
              .orderBy("by", "fp").mapInArrow(_chunks, "by string, chunk binary"))
    hashers: dict[str, hashlib._Hash] = {}
    n_unique: dict[str, int] = {}
    # Prefetching computes the next partition while this one is hashed (measured 4x faster
    # than one partition at a time); the driver holds at most two partitions' chunks.
    for row in unique.toLocalIterator(prefetchPartitions=True):
        h = hashers.get(row.by)
        if h is None:
            h = hashers[row.by] = hashlib.sha256(FP_VERSION.encode() + b"\n")
        else:
            h.update(b"\n")
        h.update(row.chunk)
        n_unique[row.by] = n_unique.get(row.by, 0) + (len(row.chunk) + 1) // 65
    out = {}
    for name in sorted(counts):
        digest = hashers[name].hexdigest() if name in hashers else _EMPTY
        out[name] = {"fingerprint": short(digest), "digest": digest, "n_examples": counts[name],
                     "n_unique": n_unique.get(name, 0)}
    return out


def fingerprint_sources(sources: Sequence[Source], by: str = "group",
                        spark: SparkSession | None = None) -> dict[str, dict]:
    """The fingerprint of every group (``by="group"``) or dataset (``by="dataset"``) of
    `sources`, as :func:`fingerprints` gives them.

    Raises:
        LeakcheckError: on bad input (SPEC section 9).
    """
    from leakcheck_spark.errors import USAGE, LeakcheckError
    from leakcheck_spark.options import Options, as_sources, check_sources
    from leakcheck_spark.session import session_or_default
    from leakcheck_spark.sources import Derived, read_records

    if by not in ("group", "dataset"):
        raise LeakcheckError(USAGE, f"--by must be group or dataset, not {by!r}")
    from leakcheck_spark.audit import Timer, counted

    sources = as_sources(sources)
    check_sources(sources)
    spark = session_or_default(spark)
    timer = Timer()
    records, frames, _ = read_records(spark, sources, Options(),
                                      derived=Derived((FP_COLUMN,)))
    try:
        prints = fingerprints(records, by)
        n = sum(p["n_examples"] for p in prints.values())
        timer.lap("fingerprints", f"fingerprints of {counted(len(prints), by)} from "
                                  f"{counted(len(sources), 'source')}: {counted(n, 'record')}")
        return prints
    finally:
        for frame in frames:
            frame.unpersist()


def render(prints: dict[str, dict], by: str = "group") -> str:
    """The terminal table of fingerprints."""
    rows = [[name, p["fingerprint"], f"{p['n_examples']:,}", f"{p['n_unique']:,}", p["digest"]]
            for name, p in prints.items()]
    header = [by, "fingerprint", "n_examples", "n_unique", "digest"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i in (0, 1, 4) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in [header, *rows])
