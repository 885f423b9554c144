"""clean: a copy of a test split without its leaked records (SPEC section 6).

Every test record gets a decision: kept, or dropped with one reason -- ``against`` (it matches a
record of an --against source), ``duplicate`` (``--dedup``: an earlier record of the test split has
the same text) or ``conflict`` (``--drop-conflicts``: its text occurs anywhere with a different
label) -- in that order of precedence, with the ids that caused it.  Kept rows are written back as
they were read: the raw line for line formats (byte-identical), the original columns for tables.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Sequence

from leakcheck_spark import errors, match, outputs
from leakcheck_spark.audit import Timer, counted, key_columns, spark_action, text_kept
from leakcheck_spark.errors import LeakcheckError
from leakcheck_spark.near import near_progress, unit_match_edges
from leakcheck_spark.options import Options, Source, as_options, as_sources, check_sources
from leakcheck_spark.report import native_id
from leakcheck_spark.session import release
from leakcheck_spark.sources import (
    RECORD_COLUMNS,
    Derived,
    literal,
    number_rows,
    original_column,
    read_source,
    scan,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("leakcheck_spark")

REASONS = ("against", "duplicate", "conflict")
# --out endings written as one file, and their (format, compression).


@dataclass
class CleanResult:
    """The decisions of a clean.  `rows` holds every test row with `reason` (null = kept)."""

    test: Source
    options: Options
    input_format: str
    rows: DataFrame
    original_columns: list[str]
    counts: dict[str, int]
    int_ids: tuple[bool, bool] = (False, False)  # (test ids, against ids) are all integers
    timings: dict[str, float] = field(default_factory=dict)
    against: list[Source] = field(default_factory=list)
    _cached: list = field(default_factory=list, repr=False)

    def unpersist(self) -> None:
        """Release the data the clean cached (the test rows and the decisions); the results
        stay usable, recomputed on demand."""
        release(self._cached)

    @property
    def kept(self) -> DataFrame:
        """The kept rows, in input order, with `row` and `id`."""
        import pyspark.sql.functions as F

        return self.rows.where(F.col("reason").isNull()).orderBy("row")

    @property
    def dropped(self) -> DataFrame:
        """(row, id, reason, match_ids, similarity) of every dropped record, in input order;
        `similarity` is the best match's (1.0 exact, else the verified Jaccard) for `against`,
        the earliest matching record's for `duplicate`, null for `conflict`."""
        return self._dropped()

    def _dropped(self, *extra: str) -> DataFrame:
        import pyspark.sql.functions as F

        return (self.rows.where(F.col("reason").isNotNull())
                .select("row", "id", "reason", "match_ids", "similarity", *extra).orderBy("row"))

    def summary(self) -> str:
        c = self.counts
        reasons = ", ".join(f"{r} {c[r]:,}" for r in REASONS if c[r])
        detail = f" ({reasons})" if reasons else ""
        return f"kept {c['kept']:,}, dropped {c['dropped']:,}{detail}"

    @spark_action
    def write(self, out: str) -> None:
        """Write the kept rows to `out`: one file for .jsonl/.csv/.parquet (optionally .gz for
        the text formats), else a directory of part files in ``--format``."""
        from leakcheck_spark.session import session_conf

        out = outputs.output_path(out, self._inputs(), in_place=self.test.path,
                                 spark=self.rows.sparkSession)
        # Column names are case-sensitive, as in JSON: "t" and "T" are two columns of a row.
        with session_conf(self.rows.sparkSession, {"spark.sql.caseSensitive": "true"}):
            write_rows(self, out)

    def _inputs(self) -> list[str]:
        return [s.path for s in (self.test, *self.against)]

    @spark_action
    def write_report(self, path: str) -> None:
        """Write the --report JSON: ``counts`` (kept, dropped, and dropped per reason) and
        ``dropped``, every dropped record in input order as ``{"id", "reason", "match_ids"}`` and,
        for ``against`` and ``duplicate``, ``"similarity"``."""
        head = {"schema": "leakcheck-spark/clean-report/v1", "test": self.test.label,
                "options": self.options.to_dict(), "counts": self.counts}

        def chunks() -> Iterator[str]:
            yield json.dumps(head, ensure_ascii=False)[:-1] + ', "dropped": ['
            for i, r in enumerate(self._dropped("_match_nums").toLocalIterator()):
                yield ("," if i else "") + "\n  " + json.dumps(self._entry(r), ensure_ascii=False)
            yield "\n]}\n"

        path = outputs.output_path(path, self._inputs(), spark=self.rows.sparkSession)
        outputs.write_text_file(self.rows.sparkSession, path, chunks())

    def _entry(self, r) -> dict:  # noqa: ANN001 - a Row
        """One dropped record, with ids in their datasets' own types (a matching id has a
        number when its dataset's ids are integers)."""
        entry = {"id": native_id(r.id, self.int_ids[0]), "reason": r.reason,
                 "match_ids": [i if n is None else n
                               for i, n in zip(r.match_ids or [], r._match_nums or [])]}
        if r.similarity is not None:
            entry["similarity"] = r.similarity
        return entry


@spark_action
def clean(test: Source, against: Sequence[Source], options: Options | None = None,
          dedup: bool = False, drop_conflicts: bool = False,
          spark: SparkSession | None = None) -> CleanResult:
    """Decide which records of `test` to keep (SPEC section 6).

    Raises:
        LeakcheckError: on bad input (SPEC section 9).
    """
    from pyspark import StorageLevel

    from leakcheck_spark.session import session_or_default

    if not isinstance(test, Source):
        raise LeakcheckError(errors.USAGE, f"test must be one Source, not {test!r}",
                             "clean one split at a time: clean(Source(...), [Source(...), ...])")
    against = as_sources(against, "against")
    # Its groups only label the report: only the same source twice (as test and against, every
    # test record would be dropped as its own copy) is refused.
    check_sources([test, *against], splits=False)
    options = as_options(options)
    if drop_conflicts and not any(s.label_field for s in (test, *against)):
        raise LeakcheckError(
            errors.USAGE, "--drop-conflicts compares labels, but no source has a label field",
            "name it with --label-field NAME (or -o NAME.label=FIELD)")
    spark = session_or_default(spark)
    timer = Timer()
    keyed = Derived(key_columns(options), text_kept(options))
    # Everything cached on the way is released if the clean fails (a bad row of an --against
    # source, a failed near stage): in a long-lived session nothing else could release it.
    frames, near_cached, decided = [], [], None
    try:
        test_frame = read_source(spark, test, 0, keep_raw=True, derived=keyed)
        frames.append(test_frame)
        formats = [fmt for fmt, _ in test_frame.parts]
        if len(formats) != 1:
            raise LeakcheckError(errors.USAGE, f"the test source {test.label} mixes formats "
                                 f"({', '.join(formats)})",
                                 "give clean a test source of one format")
        for i, s in enumerate(against):
            frames.append(read_source(spark, s, i + 1, derived=keyed))
        blocks = scan(spark, frames, options)
        test_rows = number_rows(spark, [test_frame], blocks, extra=("raw", "originals"))
        others = number_rows(spark, frames[1:], blocks) if frames[1:] else None
        timer.lap("read", f"read {counted(len(frames), 'source')}")
        near = None
        if options.near:
            everything = test_rows.select(*RECORD_COLUMNS, "key", "unit")
            if others is not None:
                everything = everything.unionByName(
                    others.select(*RECORD_COLUMNS, "key", "unit"))
            near, near_cached = unit_match_edges(everything, options)
            timer.lap("near", near_progress(near_cached[0], options))
        decided = decide(test_rows, others, dedup, drop_conflicts, near)
        decided = decided.persist(StorageLevel.MEMORY_AND_DISK)
        counts = {r: 0 for r in REASONS}
        total = 0
        for r in decided.groupBy("reason").count().collect():
            total += r["count"]
            if r.reason is not None:
                counts[r.reason] = r["count"]
    except BaseException:
        release([*(part for frame in frames for _, part in frame.parts), *near_cached,
                 *([decided] if decided is not None else [])])
        raise
    dropped = sum(counts.values())
    counts = {"kept": total - dropped, "dropped": dropped, **counts}
    timer.lap("decide", f"clean {test.label}: kept {counts['kept']:,}, dropped {dropped:,}")
    for frame in frames[1:]:  # the test rows stay cached until the kept rows are written
        frame.unpersist()
    for df in near_cached:
        df.unpersist()
    int_ids = (test.name in blocks.int_datasets,
               all(s.name in blocks.int_datasets for s in against))
    return CleanResult(test, options, formats[0], decided,
                       test_frame.original_columns.get(formats[0], []), counts, int_ids,
                       timer.timings, list(against),
                       _cached=[decided, *(part for _, part in test_frame.parts)])


def decide(test: DataFrame, against: DataFrame | None, dedup: bool,
           drop_conflicts: bool, near: DataFrame | None = None) -> DataFrame:
    """Stage: add `reason` (null = kept), `match_ids` and `similarity` to every test record.

    Args:
        test: keyed test records (RECORD_COLUMNS + key + anything to carry along).
        against: keyed records of the --against sources, or None.
        near: with near matching, the edges between units (key, other, match, similarity):
            :func:`leakcheck_spark.match.unit_edges` and the verified near edges, over test and
            against records; then records match by `unit` (label conflicts stay on `key`).
            None for exact matching only.
    """
    import pyspark.sql.functions as F

    needs = dict.fromkeys(("key", "id", "id_num", "label_canon")
                          + (("unit",) if near is not None else ()))
    errors.require_columns(test, "clean.decide", {**needs, "row": None}, "the test records")
    if against is not None:
        errors.require_columns(against, "clean.decide", needs, "the against records")
    if near is not None:
        errors.require_columns(near, "clean.decide", {"key": None, "other": None, "match": None,
                                                      "similarity": None}, "the near edges")
    # Matching ids travel as (id_num, id) structs: `match_ids` holds the ids, `_match_nums`
    # their numbers, which tell an integer id in a column of strings (datasets mixing id types).
    null_ids = F.lit(None).cast(f"array<struct<id_num: bigint, id: {dict(test.dtypes)['id']}>>")
    nonempty = F.col("key").isNotNull()
    conflict_test, conflict_against = test, against
    if near is None:
        # Which keys match which: every key itself (exact).
        keys = test.select("key")
        if against is not None:
            keys = keys.unionByName(against.select("key"))
        edges = match.exact_edges(keys.where(nonempty))
    else:
        edges = near
        test = match.as_units(test)
        against = None if against is None else match.as_units(against)
    df = test
    sim = F.when(F.col("match") == "exact", F.lit(1.0)).otherwise(F.col("similarity"))
    # against: the 5 smallest ids of --against records matching the record's key.
    if against is not None:
        ids = match.smallest_ids(against, by=("key",)).withColumnRenamed("key", "other")
        reached = edges.select("key", "other", sim.alias("_sim")).join(match.id_rows(ids),
                                                                       "other")
        hits = (match.ranked_ids(reached, ("key",))
                .select("key", F.col("ids").alias("_against"))
                .join(reached.groupBy("key").agg(F.max("_sim").alias("_against_sim")), "key"))
        df = df.join(hits, "key", "left")
    else:
        df = df.withColumn("_against", null_ids).withColumn("_against_sim", F.lit(None))
    # duplicate: an earlier test record (input order) whose key matches this record's, and the
    # similarity to it (an exact edge beats a near one to the same record).
    first = (test.where(nonempty).groupBy("key")
             .agg(F.min(F.struct("row", "id_num", "id")).alias("_first")))
    earliest = (edges.join(first.withColumnRenamed("key", "other"), "other")
                .groupBy("key").agg(F.min(F.struct("_first", (-sim).alias("_u"))).alias("_e")))
    df = df.join(earliest, "key", "left")
    df = (df.withColumn("_first_row", F.col("_e._first.row"))
          .withColumn("_first_id", F.struct("_e._first.id_num", "_e._first.id"))
          .withColumn("_dup_sim", -F.col("_e._u")))
    is_dup = F.lit(dedup) & nonempty & (F.col("row") > F.col("_first_row"))
    # conflict: the key carries a canonical label other than this record's own.
    if drop_conflicts:
        cols = ("key", "id", "id_num", "label_canon")
        everything = conflict_test.select(*cols)
        if conflict_against is not None:
            everything = everything.unionByName(conflict_against.select(*cols))
        labelled = everything.where(nonempty & F.col("label_canon").isNotNull())
        per_label = match.smallest_ids(labelled, by=("key", "label_canon")).select(
            "key", F.col("label_canon").alias("_other_label"), "ids")
        n_labels = labelled.groupBy("key").agg(F.count_distinct("label_canon").alias("_n_labels"))
        own = (conflict_test.select("row", "key", "label_canon").where(nonempty)
               .join(per_label, "key"))
        other = ~F.col("_other_label").eqNullSafe(F.col("label_canon"))
        others = (own.join(n_labels, "key")
                  .where(other & (F.col("label_canon").isNotNull() | (F.col("_n_labels") > 1)))
                  .select("row", "ids"))
        conflicts = match.ranked_ids(match.id_rows(others), ("row",)).select(
            "row", F.col("ids").alias("_conflict"))
        df = df.join(conflicts, "row", "left")
    else:
        df = df.withColumn("_conflict", null_ids)
    reason = (
        F.when(F.col("_against").isNotNull(), F.lit("against"))
        .when(is_dup, F.lit("duplicate"))
        .when(F.col("_conflict").isNotNull(), F.lit("conflict"))
    )
    ids = (
        F.when(F.col("_against").isNotNull(), F.col("_against"))
        .when(is_dup, F.array(F.col("_first_id")))
        .when(F.col("_conflict").isNotNull(), F.col("_conflict"))
    )
    similarity = (F.when(F.col("_against").isNotNull(), F.col("_against_sim"))
                  .when(is_dup, F.col("_dup_sim")))
    return (df.withColumn("reason", reason).withColumn("match_ids", match.plain_ids(ids))
            .withColumn("_match_nums", F.transform(ids, lambda x: x["id_num"]))
            .withColumn("similarity", similarity)
            .drop("_against", "_against_sim", "_e", "_first_row", "_first_id", "_dup_sim",
                  "_conflict"))


def write_rows(result: CleanResult, out: str) -> None:
    """Write the kept rows of a clean, as read (see :meth:`CleanResult.write`)."""
    spark = result.rows.sparkSession
    t = time.monotonic()
    single = outputs.single_file_format(out)
    kept = result.kept
    as_lines = result.input_format in ("jsonl", "json")  # raw JSON lines can be written as is
    # Line formats become columns by a round trip through Spark's JSON reader, beside the output
    # (never a driver-local temp dir: executors of a cluster could not see it).
    aside = f"{out.rstrip('/')}.lc-json-{uuid.uuid4().hex[:10]}"
    # Before the round trip beside it writes anything (staging checks again).
    outputs.check_replaceable(spark, out, outputs.rows_kind(out))
    try:
        if single is not None:
            fmt, compression = single
            ordered = kept.coalesce(1).sortWithinPartitions("row")
            if as_lines and fmt == "jsonl":
                outputs.write_single_file(spark, ordered.select("raw"), out, fmt, compression,
                                          "raw")
            else:
                table = _as_table(spark, result, ordered, aside, fmt).coalesce(1)
                outputs.write_single_file(spark, table, out, "json" if fmt == "jsonl" else fmt,
                                          compression)
        else:
            with outputs.staged(spark, out) as tmp:
                if as_lines and result.options.format == "json":
                    outputs.write_json_lines(kept.select("raw"), tmp)
                else:
                    outputs.write_table(
                        _as_table(spark, result, kept, aside, result.options.format), tmp,
                        result.options.format)
    except Exception as exc:  # noqa: BLE001 - translated or re-raised
        # The round trip beside the output fails first when that place cannot be written.
        err = (None if isinstance(exc, LeakcheckError)
               else errors.write_failure(out, aside.rsplit("/", 1)[-1], exc))
        if err is not None:
            raise err from None
        raise
    finally:
        outputs.remove(spark, aside)
    log.info("wrote %s (%.1f s)", out, time.monotonic() - t)


def _as_table(spark: SparkSession, result: CleanResult, kept: DataFrame, aside: str,
              fmt: str) -> DataFrame:
    """The kept rows as columns for a `fmt` output: a table's own columns, a .txt line as
    `text`, or the JSON objects of a line format (their columns as Spark's JSON reader infers
    them from `aside`; for CSV, a nested value as its JSON text), in the order of `kept`."""
    import pyspark.sql.functions as F
    from pyspark.sql import types as T

    if result.input_format == "txt":  # the line's text: without the \r of a CRLF line
        return kept.select(F.regexp_replace("raw", r"\r\z", "").alias("text"))
    if result.input_format not in ("jsonl", "json"):
        return _case_twins_said(kept.select(*[F.col(original_column(i)).alias(c)
                                              for i, c in enumerate(result.original_columns)]),
                                fmt)
    # Spark's JSON reader infers the columns; the rows themselves are parsed in place with that
    # schema, so they stay in the order of `kept` (a read of the written part files would come
    # back largest file first).  With no row kept, the columns come from every test row: an
    # empty read has no columns, which Spark cannot write as CSV or Parquet.
    none_kept = result.counts["kept"] == 0
    source = result.rows if none_kept else result.kept  # not `kept`: maybe one task's
    source.select("raw").write.text(outputs.spark_uri(aside))
    schema = spark.read.json(literal(outputs.spark_uri(aside))).schema  # `--out` may hold "["
    # The reader sorts the columns by name; they are put back in the order the keys first
    # appear in the rows (as pandas reads JSON Lines), so `id,text,label` stays that way.  One
    # row per distinct key reaches the driver: as many as the columns.
    first = {r["key"]: r["at"] for r in
             source.select("row", F.posexplode(F.json_object_keys("raw")).alias("pos", "key"))
             .groupBy("key").agg(F.min(F.struct("row", "pos")).alias("at")).collect()}
    fields = sorted(schema.fields, key=lambda f: (
        f.name not in first, first.get(f.name, (0, 0)), f.name))
    if fmt == "csv":  # read as a string, an object or a list is its JSON text, keys in order
        fields = [T.StructField(f.name, T.StringType()) if isinstance(
            f.dataType, (T.ArrayType, T.StructType, T.MapType)) else f for f in fields]
    schema = T.StructType(fields)
    return _case_twins_said(
        kept.select(F.from_json("raw", schema).alias("_lc_obj")).select("_lc_obj.*"), fmt)


def _case_twins_said(table: DataFrame, fmt: str) -> DataFrame:
    """`table`, after a warning if it is written as `fmt` with columns whose names differ only
    in case (JSON keys ``Note`` and ``note``): kept as two columns, which Spark reads back from
    CSV or Parquet only when told that case matters."""
    if fmt in ("csv", "parquet"):
        by_case: dict[str, list[str]] = {}
        for name in table.columns:
            by_case.setdefault(name.lower(), []).append(name)
        twins = next((names for names in by_case.values() if len(names) > 1), None)
        if twins:
            log.warning("columns %s differ only in case: Spark reads this output back only with "
                        "--conf spark.sql.caseSensitive=true", " and ".join(map(repr, twins)))
    return table
