"""Near-duplicate images across splits (SPEC section 7, ``images``).

1. **Read**: image files (a directory, a glob, one file) through Spark's ``binaryFile`` source; a
   ``.txt`` list of image paths (one per line, relative to the list's directory); or a table
   (``.parquet``, ``.csv``, ``.jsonl``, ``.json``, ``table:NAME``) with a path column
   (``--path-field``) or a bytes column (``--bytes-field``).  Listed paths are read by the
   executors themselves (plain paths, or any URI fsspec can open).
2. **Hash**: the 64-bit difference hash of the ``imagehash`` library (``imagehash.dhash``, over
   Pillow), in Arrow batches of a few dozen images.  An image that cannot be read or decoded
   (missing, truncated, not an image) gets a null hash and its reason; it is counted and listed,
   never fatal.
3. **Candidates and verification**: with threshold T, the 64 bits are cut into T + 1 bands; two
   hashes within Hamming distance T agree on at least one band (pigeonhole), so equal band values
   give every candidate pair.  Each bucket of distinct hashes is verified in numpy (XOR and
   popcount); a bucket of more than :data:`FULL_BUCKET` hashes pairs each hash with its next
   neighbours in hash order only (the window of ``near.window``), which bounds the work of a
   degenerate bucket and can miss pairs only there.
4. **Groups**: connected components of the verified pairs (equal hashes are one node); a group's
   id is the smallest position of its images in read order (sources in the order given; in a
   source, images by id).  The matrices and overlaps are computed by the same stages as the text
   audit, with the hash as the key; ``similarity`` = 1 - distance / 64.
"""

from __future__ import annotations

import io
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from leakcheck_spark import errors, hf, match, outputs, report
from leakcheck_spark.audit import Timer, _sample, counted, group_stats, log, matrices, spark_action
from leakcheck_spark.components import connected_components
from leakcheck_spark.errors import LeakcheckError
from leakcheck_spark.near import _pair_steps, _whole_buckets, bucket_partners
from leakcheck_spark.options import DEFAULT_SPLIT, FORMATS, Source, as_sources, check_sources
from leakcheck_spark.paths import is_local, local_path, resolved, searched, spark_uri
from leakcheck_spark.resplit import DEFAULT_PRIORITY, check_priority, reassign
from leakcheck_spark.session import release, session_conf
from leakcheck_spark.sources import (
    BAD_SPLIT_HINT,
    TABLE_PREFIX,
    check_csv_header,
    check_csv_utf8,
    input_files,
    invalid_split,
    named,
    read_csv,
    read_inputs,
    read_parquet,
    read_table,
    renamed_by_spark,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".jfif", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp",
                    ".ppm", ".pgm", ".pbm", ".pnm", ".ico", ".tga")
# The file names of IMAGE_EXTENSIONS in any case, as a Hadoop glob (binaryFile's pathGlobFilter).
IMAGE_GLOB = "*.{%s}" % ",".join(
    "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in ext[1:])
    for ext in IMAGE_EXTENSIONS)
TABLE_EXTENSIONS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "json", ".ndjson": "json",
                    ".json": "json"}
FULL_BUCKET = 20_000  # verification is a popcount: far larger buckets than text can be whole
BATCH_IMAGES = 64  # images per Arrow batch when hashing (each row holds a whole file)
FILE_OPEN_COST = 64 * 1024  # what opening a file costs, in bytes, when files are packed in tasks
HASH_BITS = 64
RESPLIT_COLUMNS = ("path", "split", "original_split", "group_id", "reassigned")
OVERLAP_COLUMNS = (*match.OVERLAP_COLUMNS, "distance")
OVERLAP_ORDER = (*match.OVERLAP_ORDER, "distance")
# Unreadable images are listed by (dataset, id), then split: one id can be in several splits.
UNREADABLE_ORDER = ("dataset", "id", "split", "reason")


@dataclass(frozen=True)
class ImageOptions:
    """How images are read and compared (SPEC section 7)."""

    threshold: int = 5
    path_field: str | None = None
    bytes_field: str | None = None
    format: str = "parquet"

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int) or not (
                0 <= self.threshold < HASH_BITS):
            raise LeakcheckError(errors.USAGE, f"--threshold must be an integer in 0..63 for "
                                 f"images, got {self.threshold!r}",
                                 "fix --threshold: the bits two hashes may differ in (default 5)")
        if self.format not in FORMATS:
            raise LeakcheckError(errors.USAGE, f"--format must be one of {', '.join(FORMATS)}",
                                 "fix --format")
        # A table holds the image as a path or as bytes (SPEC section 7).  Both made the path the
        # id of an image hashed from the bytes -- which need not be that file -- and read the
        # file only where the bytes were null: two images under one name.
        if self.path_field and self.bytes_field:
            raise LeakcheckError(
                errors.USAGE, f"--path-field {self.path_field!r} and --bytes-field "
                f"{self.bytes_field!r} both name the image: give one",
                f"to name images read from bytes by the path column, write --bytes-field "
                f"{self.bytes_field} --id-field {self.path_field}")

    def to_dict(self) -> dict:
        return {"threshold": self.threshold, "path_field": self.path_field,
                "bytes_field": self.bytes_field, "format": self.format}


# ---------------------------------------------------------------------------------------------
# Hashes


def popcount(values: np.ndarray) -> np.ndarray:
    """Set bits of each 64-bit value.

    >>> popcount(np.array([0, 1, -1, 0xF0F0], dtype=np.int64)).tolist()
    [0, 1, 64, 8]
    """
    return np.bitwise_count(np.asarray(values).view(np.uint64)).astype(np.int64)


_HEX_HASH = re.compile(r"[0-9a-fA-F]{1,16}")


def _as_int(h: object) -> int:
    """A hash as an unsigned 64-bit integer; anything else is ``LC_E_USAGE`` (a longer string or
    a larger integer would give a distance of more than 64 bits)."""
    if hasattr(h, "hash"):  # an imagehash.ImageHash
        h = str(h)
    if isinstance(h, str):
        if _HEX_HASH.fullmatch(h):
            return int(h, 16)
    elif isinstance(h, (int, np.integer)) and not isinstance(h, bool) and -2**63 <= h < 2**64:
        return int(h) & (2**64 - 1)
    raise LeakcheckError(errors.USAGE, f"{h!r} is not a 64-bit hash",
                         "give 16 hex characters (as the outputs write them), an integer, or an "
                         "imagehash.ImageHash")


def hamming_distance(a: object, b: object) -> int | np.ndarray:
    """Bits that differ between two 64-bit hashes: 16-hex-character strings (as written in our
    outputs and by imagehash), integers (signed or not), ``imagehash.ImageHash`` objects, or
    numpy int64 arrays (element-wise).

    >>> hamming_distance("ffffffffffffffff", "fffffffffffffff0"), hamming_distance(5, 3)
    (4, 2)
    """
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return popcount(np.asarray(a, dtype=np.int64) ^ np.asarray(b, dtype=np.int64))
    return bin(_as_int(a) ^ _as_int(b)).count("1")


def dhash_bytes(content: bytes) -> int:
    """The imagehash dHash of an encoded image, as a signed 64-bit integer.

    Raises whatever Pillow raises for bytes it cannot decode."""
    import imagehash
    from PIL import Image

    with Image.open(io.BytesIO(content)) as img:
        unsigned = int(str(imagehash.dhash(img)), 16)
    return unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned


def _read_bytes(path: str) -> bytes:
    """A listed image's bytes, read by an executor: local paths directly, other URIs via fsspec."""
    if is_local(path):
        with open(local_path(path), "rb") as fh:
            return fh.read()
    import fsspec

    with fsspec.open(path, "rb") as fh:
        return fh.read()


_KEPT = ("_src", "dataset", "split", "id")  # what rides along with each image's bytes
_HASHED_DDL = "_src int, dataset string, split string, id string, hash long, error string"


def hash_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """(_src, dataset, split, id, content, path) batches -> the same rows with (hash, error) in
    place of (content, path): a null hash and the reason when an image cannot be read or
    decoded."""
    import pyarrow as pa

    try:  # outside the per-image guard: a missing library is no unreadable image
        import imagehash  # noqa: F401
        from PIL import Image  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"the executors' Python lacks {exc.name}: install leakcheck-spark"
                           "[images] there too") from None
    for rb in batches:
        contents = rb.column("content").to_pylist()
        paths = rb.column("path").to_pylist()
        hashes: list[int | None] = []
        errs: list[str | None] = []
        for content, path in zip(contents, paths):
            try:
                if content is None:
                    if path is None:
                        raise ValueError("the row's image is null (for bytes: or text that "
                                         "is not base64)")
                    content = _read_bytes(path)
                hashes.append(dhash_bytes(content))
                errs.append(None)
            except Exception as exc:  # noqa: BLE001 - any failure makes the image unreadable
                hashes.append(None)
                errs.append(_reason(exc))
        yield pa.RecordBatch.from_arrays(
            [*(rb.column(c) for c in _KEPT), pa.array(hashes, pa.int64()),
             pa.array(errs, pa.string())], names=[*_KEPT, "hash", "error"])


def _reason(exc: BaseException) -> str:
    """Why an image could not be hashed, the same on every run (Pillow names the in-memory file
    by its address: dropped)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = re.sub(r"\s*<[^<>]* at 0x[0-9a-fA-F]+>", "", text)
    return f"{type(exc).__name__}: {text}"[:300]


def band_columns(threshold: int) -> list:
    """The T + 1 band values of the `key` column (a hash), as Columns: bit ranges of the 64 bits
    as equal as can be."""
    import pyspark.sql.functions as F

    n = threshold + 1
    edges = [round(i * HASH_BITS / n) for i in range(n + 1)]
    cols = []
    for lo, hi in zip(edges, edges[1:]):
        shifted = F.shiftrightunsigned(F.col("key"), lo)
        if hi - lo < HASH_BITS:
            shifted = shifted.bitwiseAND(F.lit((1 << (hi - lo)) - 1))
        cols.append(shifted)
    return cols


def verify_buckets(threshold: int, full_bucket: int = FULL_BUCKET):  # noqa: ANN201
    """A mapInArrow function: whole (band, h) buckets of distinct hashes, sorted by key ->
    (key, other, distance) of the pairs within `threshold` (key < other)."""
    import pyarrow as pa

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in _whole_buckets(batches):
            keys = rb.column("key").to_numpy()
            for i, j in _pair_steps(bucket_partners(rb, full_bucket)[1]):
                d = popcount(keys[i] ^ keys[j])
                ok = d <= threshold
                if ok.any():
                    yield pa.RecordBatch.from_arrays(
                        [pa.array(keys[i][ok]), pa.array(keys[j][ok]), pa.array(d[ok])],
                        names=["key", "other", "distance"])

    return run


def near_pairs(keys: DataFrame, threshold: int, full_bucket: int = FULL_BUCKET) -> DataFrame:
    """(key, other, distance): pairs of distinct hashes within `threshold`, each pair once
    (key < other)."""
    import pyspark.sql.functions as F

    bands = keys.select("key", F.posexplode(F.array(*band_columns(threshold))).alias("band", "h"))
    return (bands.repartition("band", "h").sortWithinPartitions("band", "h", "key")
            .select("band", "h", "key")
            .mapInArrow(verify_buckets(threshold, full_bucket),
                        "key long, other long, distance long")
            .distinct())  # a pair close enough to share several bands is found in each


# ---------------------------------------------------------------------------------------------
# Reading


def _kind(path: str) -> str:
    low = path.lower().rstrip("/")
    if path.startswith(TABLE_PREFIX):
        return "table"
    if low.endswith(".txt"):
        return "list"
    if any(low.endswith(ext) for ext in TABLE_EXTENSIONS):
        return "table"
    return "files"


def check_fields(sources: Sequence[Source], opts: ImageOptions) -> None:
    """Refuse a field flag that only a table source reads, when no source it applies to is one:
    a directory, glob or ``.txt`` list has no columns, and the flag would be ignored silently.

    Raises:
        LeakcheckError(LC_E_USAGE): naming the flag.
    """
    tables = [s for s in sources if _kind(s.path) == "table"]
    given = [(f"{flag} {name!r}", flag, tables)  # (as shown, what to drop, the sources using it)
             for flag, name in (("--path-field", opts.path_field),
                                ("--bytes-field", opts.bytes_field)) if name]
    for flag, attr, key in (("--id-field", "id_field", "id"),
                            ("--split-field", "split_field", "split")):
        # per source: -o NAME.id=F sets it on one dataset's sources only
        using = [s for s in sources if getattr(s, attr) and not (attr == "split_field" and s.split)]
        if using:
            value = getattr(using[0], attr)
            if all(getattr(s, attr) == value for s in sources):
                given.append((f"{flag} {value!r}", flag, [s for s in using if s in tables]))
            else:  # not the flag's: an override's
                given.append((f"-o {using[0].name}.{key}={value}", f"-o {using[0].name}.{key}=",
                              [s for s in using if s in tables]))
    for shown, flag, readers in given:
        if not readers:
            raise LeakcheckError(
                errors.USAGE, f"{shown} names a table's column, and no source it applies to is a "
                "table: a directory, a glob, a .txt list or any file but an uncompressed "
                ".parquet, .csv, .jsonl or .json has no columns",
                f"drop {flag}, or give the table (.parquet, .csv, .jsonl, .json or table:NAME) "
                "as -d NAME[:SPLIT]=TABLE")


def _display(col):  # noqa: ANN001, ANN202 - a Column: file:/x and file:///x as /x
    import pyspark.sql.functions as F

    return F.regexp_replace(col, r"^file:(//)?(?=/)", "")


def _as_given(col, source: str):  # noqa: ANN001, ANN202 - a Column
    """A listed file's path the way the user named its source: relative to the working
    directory when the source was a relative local path, else absolute (or the URI)."""
    import os

    import pyspark.sql.functions as F

    given = local_path(source) if is_local(source) else source
    if not is_local(source) or os.path.isabs(given):
        return col
    # The part of the source before any glob character, as the listing spells it (absolute)
    # and relative to the working directory: also a source outside it ("../pics") keeps the
    # relative form, which stripping the working directory's prefix alone did not give.
    absolute = os.path.abspath(searched(given))
    rel = os.path.relpath(absolute)
    if absolute == "/":
        return col
    inside = F.concat(F.lit("" if rel == "." else rel + "/"),
                      col.substr(len(absolute) + 2, 1 << 30))
    return (F.when(col == absolute, F.lit(rel))
            .when(col.startswith(absolute + "/"), inside).otherwise(col))


def unscanned_images(spark: SparkSession, sources: Sequence[Source], frames: Sequence[DataFrame],
                     hashed: DataFrame) -> DataFrame | None:
    """The image files of the directory and glob sources that their scans gave no row, as rows
    of :func:`read_images` with null content, so the executors read them by path and say why
    they cannot: a file the scan could not open (it skips those, :func:`_image_files`), and a
    zero-byte file (a scan reads byte ranges and it has none).  Each is an image to count as
    unreadable, never one to leave out.  `frames` are the sources' :func:`read_images` (their
    listings are not made again), and `hashed` holds the (_src, id) of the scans' rows, hashed
    and cached: the scans are not run again to find what they gave.  None when no source is a
    directory or glob."""
    import pyarrow as pa
    import pyspark.sql.functions as F

    listings = []
    for index, (src, frame) in enumerate(zip(sources, frames)):
        if _kind(src.path) != "files":
            continue
        # The listing is the only public (and Spark Connect) way to the files a scan skips, as
        # one Arrow column: a list of row tuples cost 0.3 ms a file (schema checks and
        # pickling, one at a time) and twice the memory.  inputFiles gives URIs
        # ("my%20cat.png") where the scan's rows give Hadoop paths ("my cat.png"): compared as
        # they come, a name with a space, % or the like would never be "seen", and that image
        # would be counted a second time, as an unreadable one.
        files = [errors.from_spark(p) for p in frame.inputFiles()]
        listed = spark.createDataFrame(pa.table({"path": pa.array(files, pa.string())}))
        listings.append(listed.select(
            F.lit(index).alias("_src"), F.lit(src.name).alias("dataset"),
            F.lit(src.split or DEFAULT_SPLIT).alias("split"),
            _as_given(_display("path"), src.path).alias("id"), _display("path").alias("path"),
            F.lit(None).cast("binary").alias("content")))
    if not listings:
        return None
    listed = listings[0]
    for df in listings[1:]:
        listed = listed.unionByName(df)
    return listed.join(hashed.select("_src", "id"), ["_src", "id"], "left_anti")


def _image_files(spark: SparkSession, path: str) -> DataFrame:
    """binaryFile rows (path, content, ...) of the image files in or at `path`, searched
    recursively.  Only image files are listed (other files are never opened), and a file that
    cannot be opened (no permission, gone since the listing) gives no row instead of failing the
    run: SPEC 7 counts it as unreadable (:func:`unscanned_images`)."""
    return (spark.read.options(ignoreCorruptFiles="true", ignoreMissingFiles="true")
            .format("binaryFile").option("recursiveFileLookup", "true")
            .option("pathGlobFilter", IMAGE_GLOB).load(spark_uri(path)))


def read_images(spark: SparkSession, src: Source, index: int, opts: ImageOptions) -> DataFrame:
    """One source's images: (_src, dataset, split, id, path, content); `content` is null where
    the executors read the bytes from `path` themselves."""
    import pyspark.sql.functions as F

    kind = _kind(src.path)
    split = F.lit(src.split or DEFAULT_SPLIT)
    null_bin = F.lit(None).cast("binary")
    try:
        if kind == "files":
            df = _image_files(spark, src.path).select(
                _as_given(_display("path"), src.path).alias("id"), "path", "content",
                split.alias("split"))
        elif kind == "list":
            lines = read_inputs(spark).text(spark_uri(src.path)).select(F.trim("value").alias("p"))
            base = src.path.rsplit("/", 1)[0] if "/" in src.path else "."
            base = spark_uri(base)
            absolute = F.col("p").startswith("/") | F.col("p").rlike(r"^[A-Za-z][A-Za-z0-9+.-]*:")
            path = F.when(absolute, F.col("p")).otherwise(F.concat(F.lit(base + "/"), F.col("p")))
            df = lines.where(F.col("p") != "").select(
                F.col("p").alias("id"), path.alias("path"), null_bin.alias("content"),
                split.alias("split"))
        else:
            df = _read_table(spark, src, opts, split)
    except LeakcheckError:
        raise
    except Exception as exc:  # noqa: BLE001 - translated or re-raised
        err = errors.from_spark_exception(exc)
        if err is None:
            raise
        raise err from None
    return df.select(F.lit(index).alias("_src"), F.lit(src.name).alias("dataset"), "split",
                     "id", "path", "content")


def resolved_paths(paths: pd.Series) -> pd.Series:
    """Each path resolved as :func:`paths.resolved` resolves it (symlinks and ``..`` for local
    ones, from the executor's working directory as the executor reads it).

    >>> import pandas as pd
    >>> resolved_paths(pd.Series(["/a/./b", None, "s3a://x/y/"])).tolist()
    ['/a/b', None, 's3a://x/y']
    """
    return paths.map(resolved, na_action="ignore")


def listed_inside(spark: SparkSession, sources: Sequence[Source], opts: ImageOptions,
                  places: Sequence[str]) -> tuple[str, str] | None:
    """(an image file, the list or table naming it) where the image is one of `places`
    (:func:`paths.comparable` forms) or lies inside one, else None.

    A source's own path covers the files of a directory or glob, but not the images a ``.txt``
    list or a table names by path, which may be anywhere: an output there would delete images the
    run reads.  One Spark job over the paths only (no image is opened); its result is one row.
    """
    import pyspark.sql.functions as F

    from leakcheck_spark.udf import series_udf

    if not places:
        return None
    frames = [read_images(spark, s, i, opts).select(F.lit(s.path).alias("source"), "path")
              for i, s in enumerate(sources) if _kind(s.path) != "files"]
    if not frames:
        return None
    listed = frames[0]
    for df in frames[1:]:
        listed = listed.unionByName(df)
    path = F.col("path")
    inside = F.lit(False)
    for place in places:
        inside = inside | (path == place) | path.startswith(place.rstrip("/") + "/")
    hit = (listed.where(path.isNotNull())
           .select("source", series_udf(resolved_paths, "string")(_display("path")).alias("path"))
           .where(inside).orderBy("path", "source").limit(1).collect())
    return (hit[0].path, hit[0].source) if hit else None


def _check_csv_headers(spark: SparkSession, df: DataFrame, name: str | None) -> None:
    """`check_csv_header` on the files of CSV table `df` (its path may be a pattern; the first
    few files in path order)."""
    for file in input_files(df)[:8]:
        check_csv_header(spark, file, name)


def _read_table(spark: SparkSession, src: Source, opts: ImageOptions, split) -> DataFrame:  # noqa: ANN001
    import pyspark.sql.functions as F
    from pyspark.sql import types as T

    if src.path.startswith(TABLE_PREFIX):
        df = read_table(spark, src.path[len(TABLE_PREFIX):], src)
    else:
        low = src.path.lower()
        fmt = next(v for ext, v in TABLE_EXTENSIONS.items() if low.endswith(ext))
        reader = read_inputs(spark)
        if fmt == "csv":
            df = read_csv(spark, spark_uri(src.path), patterns=True)  # the path may be a glob
            if renamed_by_spark(df.columns):
                _check_csv_headers(spark, df, None)
            check_csv_utf8(spark, df)  # the CSV reader put U+FFFD for invalid bytes, silently
        elif fmt == "json":
            df = reader.option("multiLine", low.endswith(".json")).json(spark_uri(src.path))
        else:
            df = read_parquet(spark, [spark_uri(src.path)], src, patterns=True)
    where = f"{src.path} (columns: {', '.join(df.columns[:12])})"
    if not opts.path_field and not opts.bytes_field:
        raise LeakcheckError(errors.MISSING_FIELD, f"{src.label} is a table: say which column "
                             "holds the images", "pass --path-field F or --bytes-field F")
    for flag, name in (("--path-field", opts.path_field), ("--bytes-field", opts.bytes_field),
                       ("--id-field", src.id_field),
                       ("--split-field", None if src.split else src.split_field)):
        if name is not None and name not in df.columns:
            if src.path.lower().endswith(".csv"):
                _check_csv_headers(spark, df, name)
            raise LeakcheckError(errors.MISSING_FIELD, f"{flag} {name!r} not in {where}")
    if opts.path_field and isinstance(df.schema[opts.path_field].dataType, T.BinaryType):
        raise LeakcheckError(errors.BAD_VALUE, f"--path-field {opts.path_field!r} of {src.path} "
                             "is binary, not a path", "image bytes are read with --bytes-field F")
    if opts.bytes_field:
        col = named(opts.bytes_field)
        is_bin = isinstance(df.schema[opts.bytes_field].dataType, T.BinaryType)
        # Text that is not base64 is a null, so that image is unreadable (unbase64 would fail
        # the whole run on some such values).
        content = col if is_bin else F.try_to_binary(col.cast("string"), F.lit("base64"))
    else:
        content = F.lit(None).cast("binary")
    path = named(opts.path_field).cast("string") if opts.path_field else F.lit(None).cast(
        "string")
    if src.id_field:
        ident = named(src.id_field).cast("string")
    elif opts.path_field:
        ident = path
    else:
        raise LeakcheckError(errors.MISSING_FIELD, f"{src.label}: images given as bytes need an "
                             "id", "pass --id-field F (or --path-field F)")
    if not src.split and src.split_field:
        split = F.coalesce(named(src.split_field).cast("string"), F.lit(DEFAULT_SPLIT))
    return df.select(ident.alias("id"), path.alias("path"), content.alias("content"),
                     split.alias("split"))


def positions(df: DataFrame, order: Sequence[str], name: str = "_order") -> DataFrame:
    """`df` with `name`: each row's 0-based rank in `order` (ties in any order: rows equal in
    every `order` column are interchangeable).  One sort and a count per partition; the same on
    any partitioning."""
    import pyspark.sql.functions as F

    ranked = (df.orderBy(*order).withColumn("_pid", F.spark_partition_id())
              .withColumn("_mid", F.monotonically_increasing_id())).localCheckpoint(eager=True)
    counts = sorted(ranked.groupBy("_pid").agg(F.count(F.lit(1)).alias("n"),
                                               F.min("_mid").alias("m")).collect())
    shifts, base = [], 0
    for r in counts:
        shifts.append((r._pid, base - r.m))
        base += r.n
    table = df.sparkSession.createDataFrame(shifts, "_pid int, _shift long")
    return (ranked.join(F.broadcast(table), "_pid")
            .withColumn(name, F.col("_mid") + F.col("_shift")).drop("_pid", "_mid", "_shift"))


# ---------------------------------------------------------------------------------------------
# The audit


@dataclass
class ImagesResult:
    """What the image audit found; the lists are DataFrames, the rest plain values."""

    sources: list[Source]
    options: ImageOptions
    summary: dict
    overlaps: DataFrame
    unreadable: DataFrame
    leaked_groups: DataFrame
    images: DataFrame  # one row per image: dataset, split, id, hash, error, group_id, _order
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"schema": report.SCHEMA, "command": "images",
                "options": {**self.options.to_dict(),
                            "sources": [s.to_dict() for s in self.sources]},
                **self.summary, "timings": self.timings}

    def assignment(self, priority: Sequence[str] = DEFAULT_PRIORITY) -> DataFrame:
        """The leak-free split assignment: RESPLIT_COLUMNS plus `_order` (read order)."""
        import pyspark.sql.functions as F

        return reassign(self.images, check_priority(priority)).select(
            F.col("id").alias("path"), "split", "original_split", "group_id", "reassigned",
            "_order")

    def hashes(self) -> DataFrame:
        """One row per image, as leakaudit's ``compute_hashes`` gives them: `dataset`, `split`,
        `id`, `hash` (16 hex characters, null when unreadable), `group_id`; plus `_order`."""
        import pyspark.sql.functions as F

        # hex() of a long writes its 64 bits as unsigned (-1 is ffffffffffffffff).
        hexed = F.lpad(F.lower(F.hex("hash")), HASH_BITS // 4, "0")
        return self.images.select("dataset", "split", "id", hexed.alias("hash"), "group_id",
                                  "_order")

    @spark_action
    def write(self, out_dir: str) -> None:
        """report.json, overlaps/, leaked_groups/, unreadable/, hashes/ under `out_dir`
        (staged)."""
        out_dir = outputs.output_path(out_dir, [s.path for s in self.sources],
                                     spark=self.overlaps.sparkSession)
        fmt = self.options.format
        spark = self.overlaps.sparkSession
        t = time.monotonic()
        with outputs.staged(spark, out_dir, outputs.REPORT_DIR) as tmp:
            outputs.write_table(self.overlaps.orderBy(*OVERLAP_ORDER), f"{tmp}/overlaps", fmt)
            outputs.write_table(self.leaked_groups.orderBy("group_id"), f"{tmp}/leaked_groups",
                                fmt)
            outputs.write_table(self.unreadable.orderBy(*UNREADABLE_ORDER), f"{tmp}/unreadable",
                                fmt)
            outputs.write_table(self.hashes().orderBy("_order").drop("_order"),
                                f"{tmp}/hashes", fmt)
            self.timings["write"] = round(time.monotonic() - t, 3)
            outputs.write_json_file(spark, f"{tmp}/report.json", self.to_dict())
        log.info("wrote %s (%.1f s)", out_dir, time.monotonic() - t)

    @spark_action
    def write_resplit(self, out: str, priority: Sequence[str] = DEFAULT_PRIORITY) -> None:
        out = outputs.output_path(out, [s.path for s in self.sources],
                                 spark=self.overlaps.sparkSession)
        outputs.write_rows(self.assignment(priority), out, self.options.format, ("_order",),
                           RESPLIT_COLUMNS)
        log.info("wrote %s", out)

    def unpersist(self) -> None:
        release((self.images, self.overlaps))


@spark_action
def images(sources: Sequence[Source], options: ImageOptions | None = None,
           spark: SparkSession | None = None) -> ImagesResult:
    """Find near-duplicate images within and across splits (SPEC section 7).

    Raises:
        LeakcheckError: on bad input (SPEC section 9); unreadable images are not errors.
    """
    import pyspark.sql.functions as F
    from pyspark import StorageLevel
    from pyspark.sql import Window

    from leakcheck_spark.session import session_or_default

    options = options or ImageOptions()
    if not isinstance(options, ImageOptions):
        raise LeakcheckError(errors.USAGE, f"options must be an ImageOptions, not {options!r}",
                             "build them as leakcheck_spark.images.ImageOptions(threshold=...)")
    try:
        import imagehash  # noqa: F401
        from PIL import Image  # noqa: F401
    except ImportError as exc:
        raise LeakcheckError(errors.USAGE, f"images needs the optional {exc.name!r} package, "
                             "which is not installed",
                             "pip install 'leakcheck-spark[images]'") from None
    sources = as_sources(sources)
    check_sources(sources)
    spark = session_or_default(spark)
    for src in sources:
        if src.path.startswith(hf.PREFIX):
            raise LeakcheckError(errors.USAGE, f"images does not read Hugging Face datasets "
                                 f"({src.label})", "give a directory or glob of its image files, "
                                 "or a parquet snapshot of it with --bytes-field F")
    check_fields(sources, options)
    timer = Timer()
    level = StorageLevel.MEMORY_AND_DISK
    frames = [read_images(spark, s, i, options) for i, s in enumerate(sources)]
    everything = frames[0]
    for df in frames[1:]:
        everything = everything.unionByName(df)
    # Rows hold whole files: small Arrow batches; and many small files per task (Spark counts
    # each file as 4 MB by default, which makes a task of every 32 icons).
    with session_conf(spark, {"spark.sql.execution.arrow.maxRecordsPerBatch": BATCH_IMAGES,
                               "spark.sql.files.openCostInBytes": FILE_OPEN_COST}):
        hashes = everything.mapInArrow(hash_batches, _HASHED_DDL).persist(level)
        hashes.count()  # hash once (the sort below would run the hashing again to sample)
        unscanned = unscanned_images(spark, sources, frames, hashes)
        if unscanned is not None:
            scanned = hashes
            hashes = scanned.unionByName(unscanned.mapInArrow(hash_batches, _HASHED_DDL)
                                         ).persist(level)
            hashes.count()
            scanned.unpersist()
    # Every column of a row: a table may list one id in several splits (rows equal in all of
    # them are interchangeable), and ties in a sort follow the order shuffle blocks arrive in.
    imgs = positions(hashes, ("_src", "id", "split", "hash", "error")).persist(level)
    # With the counts, each source's first split value that cannot name a group (from a split
    # column: -d NAME:SPLIT values were checked by Source).
    bad = F.when(invalid_split(F.col("split")), F.col("split"))
    stats = imgs.groupBy("_src").agg(F.count(F.lit(1)).alias("n"),
                                     F.min(bad).alias("bad")).collect()
    per_source = {r._src: r.n for r in stats}
    hashes.unpersist()
    total = sum(per_source.values())
    for r in sorted(stats, key=lambda r: r._src):
        if r.bad is not None:
            imgs.unpersist()
            src = sources[r._src]
            raise LeakcheckError(errors.BAD_VALUE, f"split field {src.split_field!r} of "
                                 f"{src.label} holds {r.bad!r}, not a valid split", BAD_SPLIT_HINT)
    for i, src in enumerate(sources):
        if not per_source.get(i):
            imgs.unpersist()
            kind = _kind(src.path)
            hint = ("a directory or glob contributes its files with an image extension "
                    f"({', '.join(IMAGE_EXTENSIONS[:6])}, ...), and a single file must have one; "
                    "a table is a .parquet, .csv, .jsonl or .json file (not compressed) or "
                    "table:NAME" if kind == "files" else
                    "a table contributes one image per row" if kind == "table" else
                    "a list contributes one image path per non-empty line")
            raise LeakcheckError(errors.EMPTY_INPUT, f"no images in {src.label}", hint)
    timer.lap("hash", f"read and hashed {counted(total, 'image')} from "
                        f"{counted(len(sources), 'source')}")

    records = imgs.select(
        "dataset", "split", F.concat_ws("/", "dataset", "split").alias("group"), "id",
        F.lit(None).cast("long").alias("id_num"), F.col("hash").alias("key"), "error", "_order")
    distinct = records.where(F.col("key").isNotNull()).select("key").distinct()
    pairs = near_pairs(distinct, options.threshold).persist(level)
    n_pairs = pairs.count()
    timer.lap("pairs", f"near pairs: {n_pairs:,} pairs of distinct hashes within distance "
                       f"{options.threshold}, verified")

    sim = 1.0 - F.col("distance") / HASH_BITS
    near = pairs.select("key", "other", F.lit("near").alias("match"), sim.alias("similarity"))
    near = near.unionByName(pairs.select(F.col("other").alias("key"), F.col("key").alias("other"),
                                         F.lit("near").alias("match"), sim.alias("similarity")))
    kg = match.key_groups(records)
    reached = match.reach(
        kg, match.exact_edges(match.copied_keys(kg)).unionByName(near)).persist(level)
    groups, dataset_of = group_stats(records)
    groups = {g: {"images": v["records"], "unreadable": v["empty"]} for g, v in groups.items()}
    split_m, dataset_m = matrices({g: {"records": v["images"]} for g, v in groups.items()},
                                  dataset_of, reached)
    distance = F.round((1.0 - F.col("similarity")) * HASH_BITS).cast("long")
    overlaps = match.overlaps(records, reached).withColumn("distance", distance).persist(level)
    overlap_count = overlaps.count()
    timer.lap("matrices", f"matrices and overlaps: {overlap_count:,} (image, other group) pairs")

    comp = connected_components(pairs.select("key", "other"), src="key", dst="other")
    members = (records.join(comp.select(F.col("node").alias("key"), "component"), "key", "left")
               .withColumn("component", F.coalesce("component", "key")))
    first = F.min("_order").over(Window.partitionBy("component"))
    with_groups = members.withColumn(
        "group_id", F.when(F.col("key").isNull(), F.col("_order")).otherwise(first))
    final = with_groups.select("dataset", "split", "id", F.col("key").alias("hash"), "error",
                               "group_id", "_order").persist(level)
    final.count()
    imgs.unpersist()
    reached.unpersist()
    pairs.unpersist()
    summary, leaked, unreadable = _summaries(final)
    timer.lap("groups", f"duplicate groups: {summary['leaked_groups']['count']:,} leaked, "
                        f"{summary['n_leaked_images']:,} images in them")
    int_groups: set[str] = set()
    summary = {
        "groups": groups, "split_matrix": split_m, "dataset_matrix": dataset_m,
        "overlaps": {"count": overlap_count,
                     "sample": [report.native_overlap(r, int_groups)
                                for r in _sample(overlaps, OVERLAP_ORDER)]},
        **summary,
    }
    return ImagesResult(sources, options, summary, overlaps.select(*OVERLAP_COLUMNS), unreadable,
                        leaked, final, timer.timings)


def _summaries(final: DataFrame) -> tuple[dict, DataFrame, DataFrame]:
    """leakaudit's figures (small, collected), and the leaked groups and unreadable images as
    DataFrames (written in full)."""
    import pyspark.sql.functions as F

    by_group = final.groupBy("group_id").agg(
        F.array_sort(F.collect_set("split")).alias("splits"),
        F.count(F.lit(1)).alias("members"))
    leaked = by_group.where(F.size("splits") > 1)
    in_leaked = final.join(leaked.select("group_id"), "group_id", "left_semi")
    per_split = {r.split: r["count"] for r in final.groupBy("split").count().collect()}
    leaked_per_split = {r.split: r["count"] for r in in_leaked.groupBy("split").count().collect()}
    unreadable = final.where(F.col("hash").isNull()).select(
        "dataset", "split", "id", F.col("error").alias("reason"))
    n_unreadable = unreadable.count()
    leaked_count = leaked.count()
    summary = {
        "total_images": sum(per_split.values()),
        "n_leaked_images": sum(leaked_per_split.values()),
        "pct_leaked_by_split": {s: 100.0 * leaked_per_split.get(s, 0) / n
                                for s, n in sorted(per_split.items())},
        "leaked_groups": {"count": leaked_count,
                          "sample": [report.jsonable(r) for r in leaked.orderBy("group_id")
                                     .limit(report.SAMPLE_ROWS).collect()]},
        "unreadable": {"count": n_unreadable,
                       "sample": [report.jsonable(r) for r in unreadable.orderBy(*UNREADABLE_ORDER)
                                  .limit(report.SAMPLE_ROWS).collect()]},
    }
    return summary, leaked, unreadable
