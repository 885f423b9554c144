"""The audit: read every source, key every record, match, and report (SPEC section 5)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from leakcheck_spark import match, outputs, report
from leakcheck_spark.errors import LeakcheckError, from_spark_exception
from leakcheck_spark.fingerprint import FP_COLUMN, fingerprints
from leakcheck_spark.near import near_progress, unit_match_edges
from leakcheck_spark.normalize import key_column, unit_column
from leakcheck_spark.options import Options, Source, as_options, as_sources, check_sources
from leakcheck_spark.session import release
from leakcheck_spark.sources import Derived, read_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("leakcheck_spark")


def counted(n: int, noun: str) -> str:
    """`n` and the noun, plural unless one: for progress lines.

    >>> counted(1, "source"), counted(12345, "record")
    ('1 source', '12,345 records')
    """
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


class Timer:
    """Stage timings for report.json, and one progress line per stage on the log."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._t = time.monotonic()

    def lap(self, stage: str, message: str) -> None:
        now = time.monotonic()
        self.timings[stage] = round(now - self._t, 3)
        log.info("%s (%.1f s)", message, now - self._t)
        self._t = now


def spark_action(fn):  # noqa: ANN001, ANN201 - a decorator
    """Run a function that triggers Spark actions, turning Spark's errors on bad input into
    LeakcheckErrors (a corrupt file found late is still a one-line error, not a traceback).
    The wrapper keeps `fn`'s name, docstring and signature (``help()``, IDEs)."""
    import functools

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        try:
            return fn(*args, **kwargs)
        except LeakcheckError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated or re-raised
            err = from_spark_exception(exc)
            if err is None:
                raise
            raise err from None

    return wrapped


@dataclass
class AuditResult:
    """What an audit found.  Matrices are plain dicts; overlaps and conflicts are DataFrames."""

    sources: list[Source]
    options: Options
    groups: dict[str, dict]
    split_matrix: dict[str, dict[str, dict]]
    dataset_matrix: dict[str, dict[str, dict]]
    overlaps: DataFrame
    label_conflicts: DataFrame
    overlap_count: int
    overlap_sample: list[dict]
    conflict_count: int
    conflict_sample: list[dict]
    fingerprints: dict[str, dict]
    timings: dict[str, float] = field(default_factory=dict)
    _cached: list = field(default_factory=list, repr=False)

    def unpersist(self) -> None:
        """Release the data the audit cached (the results stay usable, recomputed on demand)."""
        release(self._cached)

    def to_dict(self) -> dict:
        """The report.json object (schema ``leakcheck-spark/report/v1``)."""
        return {
            "schema": report.SCHEMA,
            "command": "audit",
            "options": {**self.options.to_dict(), "sources": [s.to_dict() for s in self.sources]},
            "groups": self.groups,
            "split_matrix": self.split_matrix,
            "dataset_matrix": self.dataset_matrix,
            "overlaps": {"count": self.overlap_count, "sample": self.overlap_sample},
            "label_conflicts": {"count": self.conflict_count, "sample": self.conflict_sample},
            "fingerprints": self.fingerprints,
            "timings": self.timings,
        }

    @property
    def cross_group_overlap(self) -> bool:
        """True if any record matches a record of another group."""
        return self.overlap_count > 0

    @spark_action
    def write(self, out_dir: str, fmt: str | None = None) -> None:
        """Write the ``--out-dir`` layout: report.json, overlaps/, label_conflicts/.

        Everything goes to a staging directory first, so a failure leaves no partial out_dir.
        """
        out_dir = outputs.output_path(out_dir, [s.path for s in self.sources],
                                     spark=self.overlaps.sparkSession)
        fmt = outputs.check_format(fmt or self.options.format)
        spark = self.overlaps.sparkSession
        t = time.monotonic()
        with outputs.staged(spark, out_dir, outputs.REPORT_DIR) as tmp:
            outputs.write_table(self.overlaps.orderBy(*match.OVERLAP_ORDER), f"{tmp}/overlaps",
                                fmt)
            outputs.write_table(self.label_conflicts.orderBy("key"), f"{tmp}/label_conflicts", fmt)
            self.timings["write"] = round(time.monotonic() - t, 3)
            report = self.to_dict()
            report["options"]["format"] = fmt  # what the lists beside it are written in
            outputs.write_json_file(spark, f"{tmp}/report.json", report)
        log.info("wrote %s (%.1f s)", out_dir, time.monotonic() - t)


def keyed(options: Options, fingerprint: bool = True, whole_text: bool = False) -> Derived:
    """What the read derives: each record's `key` (and its fingerprint digest `fp`, of the whole
    text: not cut by --max-chars, it names the data), keeping :func:`text_kept` of each text
    (all of it with `whole_text`)."""
    keys = key_columns(options)
    return Derived((*keys, FP_COLUMN) if fingerprint else keys,
                   None if whole_text else text_kept(options))


def text_kept(options: Options) -> int | None:
    """How many characters of each text the read keeps past keying (None: all).  Exact matching
    only shows a conflict's sample text (200 characters): keeping just that much keeps the cached
    input small.  ``--near`` signs the texts after --max-chars (SPEC section 4), so that much
    stays, or all of a text without --max-chars: a 300 MB text cut to 10,000 characters is not
    held whole by the cache and every stage it passes through."""
    if not options.near:
        return match.SAMPLE_TEXT_CHARS
    return None if options.max_chars is None else max(options.max_chars, match.SAMPLE_TEXT_CHARS)


def key_columns(options: Options) -> tuple:
    """The columns matching derives from each text: its `key`, and with ``--near`` its `unit`
    (records of one unit share their tokens: :func:`leakcheck_spark.match.unit_edges`)."""
    args = (options.normalizer, options.lang, options.max_chars)
    return (key_column(*args), unit_column(*args)) if options.near else (key_column(*args),)


@spark_action
def audit(sources: Sequence[Source], options: Options | None = None,
          spark: SparkSession | None = None) -> AuditResult:
    """Audit `sources` for leakage (SPEC section 5).

    Args:
        sources: the datasets to read; groups are ``NAME/SPLIT``.
        options: matching options (default: whitespace normaliser).
        spark: a session; None gets the active one or builds a local one.

    Raises:
        LeakcheckError: on bad input (SPEC section 9).
    """
    import pyspark.sql.functions as F
    from pyspark import StorageLevel

    from leakcheck_spark.session import session_or_default

    sources = as_sources(sources)
    check_sources(sources)
    options = as_options(options)
    spark = session_or_default(spark)
    timer = Timer()

    records, frames, blocks = read_records(spark, sources, options, derived=keyed(options))
    cached = [part for frame in frames for _, part in frame.parts]
    reached = None
    try:
        groups, dataset_of = group_stats(records)
        int_groups = {g for g, d in dataset_of.items() if d in blocks.int_datasets}
        n = sum(g["records"] for g in groups.values())
        timer.lap("read", f"read {counted(len(sources), 'source')}: {counted(n, 'record')} in "
                  f"{counted(len(groups), 'group')}")
        # Near matching matches records by unit (their tokens), joined within a key exactly.
        matched = match.as_units(records) if options.near else records
        # Read three times (copied keys, both sides of reach): cached, so computed once.
        kg = match.key_groups(matched).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(kg)
        if options.near:
            edges, near_cached = unit_match_edges(records, options)
            cached += near_cached
            timer.lap("near", near_progress(near_cached[0], options))
        else:
            edges = match.exact_edges(match.copied_keys(kg))
        reached = match.reach(kg, edges).persist(StorageLevel.MEMORY_AND_DISK)
        split_m, dataset_m = matrices(groups, dataset_of, reached)
        timer.lap("matrices", "matrices: split x split and dataset x dataset")
        # Counted, sampled and written: cached so each is computed once.
        overlaps = match.overlaps(matched, reached).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(overlaps)
        overlap_count = overlaps.count()
        overlap_sample = [report.native_overlap(r, int_groups)
                          for r in _sample(overlaps, match.OVERLAP_ORDER)]
        timer.lap("overlaps", f"overlaps: {overlap_count:,} (record, other group) pairs")
        conflicts = match.label_conflicts(records).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(conflicts)
        conflict_count = conflicts.count()
        conflict_sample = [report.native_conflict(r, int_groups)
                           for r in _sample(conflicts.withColumn(
                               "members", F.slice("members", 1, report.SAMPLE_MEMBERS)), ("key",))]
        timer.lap("label_conflicts", f"label conflicts: {conflict_count:,}")
        prints = fingerprints(records, counts={g: v["records"] for g, v in groups.items()})
        timer.lap("fingerprints", f"fingerprints: {counted(len(prints), 'group')}")
    except BaseException:
        release([*cached, *([reached] if reached is not None else [])])
        raise
    return AuditResult(
        sources, options, groups, split_m, dataset_m, overlaps, conflicts,
        overlap_count, overlap_sample, conflict_count, conflict_sample, prints, timer.timings,
        _cached=[reached, *cached],
    )


def group_stats(records: DataFrame) -> tuple[dict[str, dict], dict[str, str]]:
    """``{group: {"records", "empty"}}`` sorted by group name, and each group's dataset."""
    import pyspark.sql.functions as F

    rows = records.groupBy("group", "dataset").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("key").isNull().cast("long")).alias("empty"),
    ).collect()
    rows = sorted(rows, key=lambda r: r.group)
    return ({r.group: {"records": r.records, "empty": int(r.empty)} for r in rows},
            {r.group: r.dataset for r in rows})


def matrices(groups: dict[str, dict], dataset_of: dict[str, str],
             reached: DataFrame) -> tuple[dict, dict]:
    """The split x split and dataset x dataset matrices (full, zeros included)."""
    cells = {"split": [], "dataset": []}
    for r in match.matrix_counts(reached).collect():  # cells: at most (groups)^2 + (datasets)^2
        cells[r.matrix].append((r.row, r.col, r["count"]))
    totals = {g: v["records"] for g, v in groups.items()}
    split_m = report.matrix(list(groups), totals, cells["split"])
    datasets = sorted(set(dataset_of.values()))
    ds_totals = {d: sum(v["records"] for g, v in groups.items() if dataset_of[g] == d)
                 for d in datasets}
    dataset_m = report.matrix(datasets, ds_totals, cells["dataset"])
    return split_m, dataset_m


def _sample(df: DataFrame, order: tuple[str, ...]) -> list[dict]:
    return [report.jsonable(r) for r in df.orderBy(*order).limit(report.SAMPLE_ROWS).collect()]
