"""Eval-vs-train contamination, as the ``noleak`` tool's ``check`` counts it, at cluster scale
(SPEC section 8).

For every eval record:

* ``exact`` -- its noleak-normalised text (:func:`~leakcheck_spark.fingerprint.normalize_series`)
  equals a train record's: the SHA-256 digests the fingerprints use are semi-joined with the
  train's distinct digests.
* ``ngram_shared`` / ``ngram_total`` -- of its distinct word n-grams
  (:func:`~leakcheck_spark.minhash.word_grams`, 64-bit hashes), how many occur in any train
  record.  The train grams are a distributed set (one row per distinct gram of each text,
  partitioned by gram in the shuffle) that the eval grams are semi-joined against: nothing that
  grows with the train corpus reaches the driver, and no machine holds all train grams.
* ``near`` -- with ``near`` options, the best similarity of a verified near-duplicate among the
  train records (SPEC section 5: the audit's near stage over train and eval keys, only buckets
  holding both; an eval record whose SPEC section 4 key equals a train key has similarity 1.0).

A text that is empty after normalisation matches nothing, and a text without words has no
n-grams (noleak counts two of those as sharing the empty gram; SPEC section 8 says they do not).
The eval set is contaminated when any count is non-zero.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from leakcheck_spark import errors, match, outputs
from leakcheck_spark.audit import Timer, counted, keyed, spark_action
from leakcheck_spark.errors import LeakcheckError
from leakcheck_spark.fingerprint import FP_COLUMN, FP_VERSION, fingerprints
from leakcheck_spark.minhash import word_grams
from leakcheck_spark.options import MAX_LENGTH, Options, Source
from leakcheck_spark.session import release
from leakcheck_spark.sources import Derived

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("leakcheck_spark")

SCHEMA = "leakcheck-spark/check/v1"
DEFAULT_N = 13
TRAIN, EVAL = "train", "eval"
SAMPLES = 16
PREVIEW_CHARS = 80
RECORD_COLUMNS = ("id", "exact", "ngram_shared", "ngram_total", "near")
NORM_VERSION = "noleak-norm-v1"
_EMPTY_DIGEST = hashlib.sha256(b"").digest()
# The characters Python's str.isspace() (and so str.split()) treats as whitespace, as a Java
# regular-expression class.
_PY_SPACE = (r"[\t\n\x{0B}\f\r\x{1C}-\x{1F} \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}"
             r"\x{2029}\x{202F}\x{205F}\x{3000}]")


@dataclass
class CheckResult:
    """What a check found: the counts (noleak's ``CheckReport`` fields) and, as a DataFrame, one
    row per eval record (:data:`RECORD_COLUMNS`, plus its 0-based `row`)."""

    train: list[Source]
    eval_source: Source
    n: int
    options: Options
    n_train: int
    n_eval: int
    fingerprint_train: dict
    fingerprint_eval: dict
    exact_hits: int
    ngram_hits: int
    near_hits: int | None  # None: near matching was not asked for
    records: DataFrame
    samples: list[dict]
    timings: dict[str, float] = field(default_factory=dict)
    _cached: list = field(default_factory=list, repr=False)

    def rate(self, hits: int | None) -> float:
        return hits / self.n_eval if hits and self.n_eval else 0.0

    @property
    def contaminated(self) -> bool:
        """True when any eval record is an exact copy, shares an n-gram or has a near match."""
        return bool(self.exact_hits or self.ngram_hits or self.near_hits)

    def unpersist(self) -> None:
        release(self._cached)

    def to_dict(self) -> dict:
        """The report (schema ``leakcheck-spark/check/v1``); noleak's ``--json`` keys included."""
        return {
            "schema": SCHEMA,
            "command": "check",
            "options": {**self.options.to_dict(), "n": self.n,
                        "train": [s.to_dict() for s in self.train],
                        "eval": self.eval_source.to_dict()},
            "n_train": self.n_train,
            "n_eval": self.n_eval,
            "fingerprint_train": self.fingerprint_train,
            "fingerprint_eval": self.fingerprint_eval,
            "exact_hits": self.exact_hits,
            "ngram_hits": self.ngram_hits,
            "near_hits": self.near_hits,
            "exact_rate": self.rate(self.exact_hits),
            "ngram_rate": self.rate(self.ngram_hits),
            "near_rate": None if self.near_hits is None else self.rate(self.near_hits),
            "contaminated": self.contaminated,
            "samples": self.samples,
            "timings": self.timings,
        }

    def summary(self) -> str:
        """The terminal summary: both fingerprints and one line of counts and the status."""
        return render(self.to_dict())

    @spark_action
    def write(self, out_dir: str, fmt: str | None = None) -> None:
        """Write ``out_dir``: report.json and records/ (one row per eval record, in read order).
        Staged, so a failure leaves no partial out_dir."""
        out_dir = outputs.output_path(out_dir, [s.path for s in (*self.train, self.eval_source)],
                                     spark=self.records.sparkSession)
        fmt = outputs.check_format(fmt or self.options.format)
        spark = self.records.sparkSession
        t = time.monotonic()
        with outputs.staged(spark, out_dir, outputs.REPORT_DIR) as tmp:
            outputs.write_table(self.records.orderBy("row").select(*RECORD_COLUMNS),
                                f"{tmp}/records", fmt)
            self.timings["write"] = round(time.monotonic() - t, 3)
            report = self.to_dict()
            report["options"]["format"] = fmt  # what records/ beside it is written in
            outputs.write_json_file(spark, f"{tmp}/report.json", report)
        log.info("wrote %s (%.1f s)", out_dir, time.monotonic() - t)


def render(report: dict) -> str:
    """noleak's summary, one count per method on one line:

    ``exact 12/500 (2.40%)  ngram 31/500 (6.20%)  status FAIL``
    """
    n_eval = report["n_eval"]
    tr, ev = report["fingerprint_train"], report["fingerprint_eval"]
    counts = [("exact", report["exact_hits"]), ("ngram", report["ngram_hits"])]
    if report["near_hits"] is not None:
        counts.append(("near", report["near_hits"]))
    line = "  ".join(f"{name} {hits}/{n_eval} ({100 * hits / n_eval if n_eval else 0:.2f}%)"
                     for name, hits in counts)
    return "\n".join([
        f"train {report['n_train']:,}  {tr['fingerprint']}  ({tr['n_unique']:,} unique)",
        f"eval  {n_eval:,}  {ev['fingerprint']}  ({ev['n_unique']:,} unique)",
        f"{line}  status {'FAIL' if report['contaminated'] else 'PASS'}",
    ])


def as_source(name: str, src: Source | str) -> Source:
    """A check input as a Source of dataset `name`, read as noleak reads records (train records
    need no ids: only eval records are listed)."""
    if isinstance(src, (str, os.PathLike)):
        return Source(name, src, noleak=True)
    if not isinstance(src, Source):
        raise LeakcheckError(errors.USAGE,
                             f"a check input must be a Source or a path, not {src!r}",
                             "pass train=[Source or path, ...] and eval_source=Source or path")
    return replace(src, name=name, split=None, split_field=None, label_field=None, noleak=True,
                   id_field=src.id_field if name == EVAL else None)


def gram_rows(batches: Iterator[pa.RecordBatch], n: int) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: (row, text) -> one (row, g) row per distinct n-gram of the text (rows
    without a `row` column give just g)."""
    import pyarrow as pa

    for rb in batches:
        grams = word_grams(rb.column("text"), n)
        arrays, names = [pa.array(grams.hashes.view(np.int64))], ["g"]
        if "row" in rb.schema.names:
            owner = np.repeat(np.arange(len(grams)), grams.sizes())
            arrays.insert(0, rb.column("row").take(pa.array(owner)))
            names.insert(0, "row")
        yield pa.RecordBatch.from_arrays(arrays, names=names)


def _derived(options: Options) -> Derived:
    """The fingerprint digest `fp` (and the SPEC section 4 `key` with near matching); the full
    text stays, for the n-grams."""
    return keyed(options, whole_text=True) if options.near else Derived((FP_COLUMN,))


def check_n(n: object) -> None:
    """Refuse an n-gram size that is not an integer from 1 to MAX_LENGTH (before Spark starts:
    the CLI calls this first).

    Raises:
        LeakcheckError: LC_E_USAGE.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= MAX_LENGTH:
        raise LeakcheckError(errors.USAGE, f"--n {n!r} is not valid: expected an integer from 1 "
                             f"to {MAX_LENGTH}", "fix --n (noleak's default is 13)")


@spark_action
def check(train: Sequence[Source | str], eval_source: Source | str, n: int = DEFAULT_N,
          options: Options | None = None, spark: SparkSession | None = None) -> CheckResult:
    """Check an eval set for contamination by a train corpus (SPEC section 8).

    Args:
        train: the train sources (paths or Sources; read as noleak reads records).
        eval_source: the eval source.
        n: the word n-gram size (noleak's default 13).
        options: ``near=True`` adds verified near matching with its threshold, shingle size and
            normaliser; ``max_rows`` and ``format`` apply as in an audit.
        spark: a session; None gets the active one or builds a local one.

    Raises:
        LeakcheckError: on bad input (SPEC section 9).
    """
    import pyspark.sql.functions as F
    from pyspark import StorageLevel

    from leakcheck_spark.near import near_progress, unit_match_edges
    from leakcheck_spark.options import as_options
    from leakcheck_spark.session import session_or_default
    from leakcheck_spark.sources import read_records

    check_n(n)
    if isinstance(train, (str, os.PathLike, Source)):
        train = [train]
    train = [as_source(TRAIN, s) for s in train]
    if not train:
        raise LeakcheckError(errors.USAGE, "check needs at least one --train SRC")
    eval_source = as_source(EVAL, eval_source)
    options = as_options(options)
    spark = session_or_default(spark)
    timer = Timer()
    records, frames, blocks = read_records(spark, [*train, eval_source], options,
                                           derived=_derived(options))
    cached = [part for frame in frames for _, part in frame.parts]
    level = StorageLevel.MEMORY_AND_DISK
    try:
        prints = fingerprints(records, by="dataset")
        n_train, n_eval = prints[TRAIN]["n_examples"], prints[EVAL]["n_examples"]
        timer.lap("read", f"read {counted(len(train), 'train source')}: "
                          f"{counted(n_train, 'record')}; eval: {counted(n_eval, 'record')}; "
                          "fingerprints")
        is_train = F.col("dataset") == TRAIN
        # Near matching matches records by unit (their tokens), joined within a key exactly.
        matched = match.as_units(records) if options.near else records
        train_rows, eval_rows = matched.where(is_train), matched.where(~is_train)
        int_ids = EVAL in blocks.int_datasets
        ident = F.col("id_num") if int_ids else F.col("id").cast("string")

        train_fps = (train_rows.select("fp").where(F.col("fp") != F.lit(_EMPTY_DIGEST))
                     .distinct())
        exact = eval_rows.select("row", "fp").join(train_fps, "fp", "left_semi").select(
            "row", F.lit(True).alias("exact"))

        # The eval grams are made once: a text's grams are a set, so its rows count its total.
        eval_grams = (eval_rows.select("row", "text")
                      .mapInArrow(lambda it: gram_rows(it, n), "row bigint, g bigint")
                      .persist(level))
        cached.append(eval_grams)
        train_grams = train_rows.select("text").mapInArrow(lambda it: gram_rows(it, n),
                                                           "g bigint")
        # Both sides shuffled by gram: the train grams as they come (a text's grams are
        # already distinct, and a distinct() of the whole train set first costs more than it
        # saves; broadcasting the eval grams instead measured no faster).
        shared = (eval_grams.join(train_grams, "g", "left_semi").groupBy("row")
                  .agg(F.count(F.lit(1)).cast("int").alias("ngram_shared")))
        totals = (eval_grams.groupBy("row")
                  .agg(F.count(F.lit(1)).cast("int").alias("ngram_total")))

        per_record = (eval_rows.select("row", ident.alias("id"), "text",
                                       *(["key"] if options.near else []))
                      .join(exact, "row", "left").join(totals, "row", "left")
                      .join(shared, "row", "left"))
        near_hits = None
        if options.near:
            sides = F.when(is_train, F.lit(1)).otherwise(F.lit(2))
            edges, near_cached = unit_match_edges(records, options, sides=sides)
            cached += near_cached
            timer.lap("near", near_progress(near_cached[0], options))
            per_record = per_record.join(_near_by_key(train_rows, eval_rows, edges), "key",
                                         "left").drop("key")
        else:
            per_record = per_record.withColumn("near", F.lit(None).cast("double"))
        per_record = per_record.select(
            "row", "id", F.coalesce("exact", F.lit(False)).alias("exact"),
            F.coalesce("ngram_shared", F.lit(0)).alias("ngram_shared"),
            F.coalesce("ngram_total", F.lit(0)).alias("ngram_total"), "near",
            "text").persist(level)
        cached.append(per_record)
        counts = per_record.agg(
            F.count_if("exact").alias("exact"),
            F.count_if(F.col("ngram_shared") > 0).alias("ngram"),
            F.count_if(F.col("near").isNotNull()).alias("near")).first()
        if options.near:
            near_hits = counts["near"]
        timer.lap("match", f"matched {n_eval:,} eval records: exact {counts['exact']:,}, "
                           f"{n}-gram {counts['ngram']:,}"
                           + ("" if near_hits is None else f", near {near_hits:,}"))
        samples = _samples(per_record, int_ids)
    except BaseException:
        release(cached)
        raise
    return CheckResult(
        train, eval_source, n, options, n_train, n_eval,
        _noleak_fingerprint(prints[TRAIN]), _noleak_fingerprint(prints[EVAL]),
        counts["exact"], counts["ngram"], near_hits, per_record.drop("text"), samples,
        timer.timings, _cached=cached)


def _near_by_key(train_rows: DataFrame, eval_rows: DataFrame, edges: DataFrame) -> DataFrame:
    """(key, near): for each eval key (a unit, with near matching) with a train match, the best
    similarity (1.0 when a train record has the same key, or an `edges` exact edge to it)."""
    import pyspark.sql.functions as F

    train_keys = train_rows.where(F.col("key").isNotNull()).select("key").distinct()
    eval_keys = eval_rows.where(F.col("key").isNotNull()).select("key").distinct()
    via_edges = (eval_keys.join(edges.select("key", "other", "similarity"), "key")
                 .join(train_keys.select(F.col("key").alias("other")), "other")
                 .select("key", "similarity"))
    same = eval_keys.join(train_keys, "key").select("key", F.lit(1.0).alias("similarity"))
    return (via_edges.unionByName(same).groupBy("key")
            .agg(F.max("similarity").alias("near")))


def _samples(per_record: DataFrame, int_ids: bool) -> list[dict]:
    """The first contaminated eval records (in read order), with a preview of their text."""
    import pyspark.sql.functions as F

    hit = F.col("exact") | (F.col("ngram_shared") > 0) | F.col("near").isNotNull()
    # noleak's preview is " ".join(text.split()): Java's \s and Spark's trim() (spaces only)
    # miss most of what str.split() splits at (tabs at the ends, NBSP, U+3000, ...).
    runs = F.regexp_replace(F.col("text"), _PY_SPACE + "+", " ")
    preview = F.regexp_replace(runs, "^ | $", "")
    rows = (per_record.where(hit).orderBy("row").limit(SAMPLES)
            .select(*RECORD_COLUMNS, F.when(F.length(preview) <= PREVIEW_CHARS, preview)
                    .otherwise(F.concat(F.substring(preview, 1, PREVIEW_CHARS - 1), F.lit("…")))
                    .alias("preview")).collect())
    return [r.asDict() for r in rows]


def _noleak_fingerprint(fp: dict) -> dict:
    """A fingerprint as :func:`fingerprints` gives it, with noleak's ``algo`` and ``norm``."""
    return {"algo": FP_VERSION, "norm": NORM_VERSION, **fp}
