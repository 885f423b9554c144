"""Leak-free split reassignment (SPEC section 6, ``resplit``).

Records are the nodes of the match graph: records with equal keys match exactly, and with
``--near`` verified near pairs of texts join theirs.  Every connected component (a *duplicate
group*, transitive: A~B in train/val and B~C in val/test put A, B and C together) that spans more
than one split moves whole into the highest-priority split it touches.

Each record gets a global ordinal: its row in its dataset, after the rows of the datasets given
before it.  A group's id is the smallest ordinal among its records -- the record of the group read
first -- so it is the same on every run, master and partitioning.  The components are computed on
keys (one node per distinct normalised text, named by its first record), so copies of a text cost
nothing in the graph; only near edges link different keys.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from leakcheck_spark import errors, match, outputs
from leakcheck_spark.audit import Timer, counted, keyed, log, spark_action
from leakcheck_spark.components import connected_components
from leakcheck_spark.errors import LeakcheckError
from leakcheck_spark.near import near_edges, near_progress
from leakcheck_spark.options import Options, Source, as_options, as_sources, check_sources
from leakcheck_spark.session import release
from leakcheck_spark.sources import read_records

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

DEFAULT_PRIORITY = ("train", "val", "test")
COLUMNS = ("dataset", "id", "split", "original_split", "group_id", "reassigned")
SCHEMA = "leakcheck-spark/resplit/v1"


def parse_priority(text: str) -> tuple[str, ...]:
    """``train,val,test`` -> ('train', 'val', 'test').

    Raises:
        LeakcheckError(LC_E_USAGE): an empty or repeated name.
    """
    names = tuple(n.strip() for n in text.split(","))
    if not all(names) or len(set(names)) != len(names):
        raise LeakcheckError(errors.USAGE, f"bad --priority {text!r}",
                             "give split names, highest priority first, once each: "
                             "--priority train,val,test")
    return names


def check_priority(priority: str | Sequence[str]) -> tuple[str, ...]:
    """The library's `priority` argument: split names, highest first, each once; a string is
    read as ``--priority`` is (``"train,val,test"``), not as a sequence of characters.

    >>> check_priority("train, test"), check_priority(["test", "train"])
    (('train', 'test'), ('test', 'train'))

    Raises:
        LeakcheckError(LC_E_USAGE): an empty, repeated or non-string name.
    """
    if isinstance(priority, str):
        return parse_priority(priority)
    names = tuple(priority) if isinstance(priority, (list, tuple)) else None
    if (not names or not all(isinstance(n, str) and n.strip() == n and n and "," not in n
                             for n in names) or len(set(names)) != len(names)):
        raise LeakcheckError(errors.USAGE, f"bad priority {priority!r}",
                             "give split names, highest priority first, once each: "
                             "priority=('train', 'val', 'test')")
    return names


def split_rank(split: Column, priority: Sequence[str]) -> Column:
    """A sortable rank of a split: the named splits in `priority` order, then every other split
    alphabetically."""
    import pyspark.sql.functions as F

    pos = F.array_position(F.array(*[F.lit(p) for p in priority]), split)
    return F.struct(F.when(pos > 0, pos).otherwise(F.lit(len(priority) + 1)).alias("rank"),
                    split.alias("name"))


def reassign(members: DataFrame, priority: Sequence[str]) -> DataFrame:
    """Given (..., split, group_id) rows, add ``original_split``, the new ``split`` and
    ``reassigned``: a group that spans splits moves whole into its highest-priority split."""
    import pyspark.sql.functions as F
    from pyspark.sql import Window

    errors.require_columns(members, "resplit.reassign", {"split": None, "group_id": None},
                           "members")
    target = F.min(split_rank(F.col("split"), priority)).over(Window.partitionBy("group_id"))
    return (members.withColumn("_target", target["name"])
            .withColumnRenamed("split", "original_split")
            .withColumnRenamed("_target", "split")
            .withColumn("reassigned", F.col("split") != F.col("original_split")))


@dataclass
class ResplitResult:
    """A resplit: the per-record assignment (a DataFrame) and its summary."""

    sources: list[Source]
    options: Options
    priority: tuple[str, ...]
    assignment: DataFrame
    summary: dict
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "command": "resplit",
                "options": {**self.options.to_dict(), "priority": list(self.priority),
                            "sources": [s.to_dict() for s in self.sources]},
                **self.summary, "timings": self.timings}

    @spark_action
    def write(self, out: str, fmt: str | None = None) -> None:
        """Write one row per record (:data:`COLUMNS`) to `out`: one file if its ending names a
        format (.jsonl, .csv, .parquet, ...), else a directory in `fmt`."""
        out = outputs.output_path(out, [s.path for s in self.sources],
                                 spark=self.assignment.sparkSession)
        t = time.monotonic()
        outputs.write_rows(self.assignment, out, fmt or self.options.format, ("_order",),
                           COLUMNS)
        self.timings["write"] = round(time.monotonic() - t, 3)
        log.info("wrote %s (%.1f s)", out, time.monotonic() - t)

    def unpersist(self) -> None:
        release([self.assignment])


@spark_action
def resplit(sources: Sequence[Source], options: Options | None = None,
            priority: Sequence[str] = DEFAULT_PRIORITY,
            spark: SparkSession | None = None) -> ResplitResult:
    """Reassign splits so that no duplicate group spans two splits (SPEC section 6).

    Raises:
        LeakcheckError: on bad input (SPEC section 9).
    """
    import pyspark.sql.functions as F
    from pyspark import StorageLevel

    from leakcheck_spark.session import session_or_default

    sources = as_sources(sources)
    check_sources(sources)
    options = as_options(options)
    priority = check_priority(priority)
    spark = session_or_default(spark)
    timer = Timer()
    records, frames, blocks = read_records(spark, sources, options,
                                           derived=keyed(options, fingerprint=False))
    cached = [part for frame in frames for _, part in frame.parts]
    try:
        # Global ordinals: each dataset's rows after those of the datasets given before it.
        totals: dict[str, int] = {}
        for t in blocks.table:
            name = sources[t[0]].name
            totals[name] = max(totals.get(name, 0), t[5])
        offsets, base = {}, 0
        for name in dict.fromkeys(s.name for s in sources):
            offsets[name], base = base, base + totals.get(name, 0)
        offset = F.element_at(F.create_map(*[x for name, off in offsets.items()
                                             for x in (F.lit(name), F.lit(off))]), F.col("dataset"))
        nodes = records.select("dataset", "id", "split", "key", "text",
                               (offset + F.col("row")).alias("_order"))
        n = sum(totals.values())
        timer.lap("read", f"read {counted(len(sources), 'source')}: {counted(n, 'record')}")

        # A key is named by its first record; empty texts match nothing and stay alone.
        key_node = nodes.where(F.col("key").isNotNull()).groupBy("key").agg(
            F.min("_order").alias("node"))
        group_of_key = key_node.select("key", F.col("node").alias("group_id"))
        if options.near:
            # Near edges join units (records of one unit share their tokens); a unit lies
            # within one key, and a key's records are one group anyway, so each edge joins the
            # nodes of its units' keys.
            near, near_cached = near_edges(match.as_units(records), options)
            cached += near_cached
            timer.lap("near", near_progress(near_cached[0], options))
            unit_node = (records.where(F.col("key").isNotNull()).select("unit", "key").distinct()
                         .join(key_node, "key"))
            src = unit_node.select(F.col("unit").alias("key"), F.col("node").alias("src"))
            dst = unit_node.select(F.col("unit").alias("other"), F.col("node").alias("dst"))
            edges = near.join(src, "key").join(dst, "other").select("src", "dst")
            comp = connected_components(edges)
            group_of_key = (key_node.join(comp, "node", "left")
                            .select("key", F.coalesce("component", "node").alias("group_id")))
            timer.lap("components", "duplicate groups: connected components of the near matches")
        members = (nodes.join(group_of_key, "key", "left")
                   .withColumn("group_id", F.coalesce("group_id", "_order")))
        assignment = reassign(members, priority).select(*COLUMNS, "_order").persist(
            StorageLevel.MEMORY_AND_DISK)
        summary = _summary(assignment, n)
        timer.lap("resplit", f"resplit: {summary['groups']:,} duplicate groups, "
                             f"{summary['spanning_groups']:,} spanning splits, "
                             f"{summary['moved_records']:,} records moved")
    except BaseException:
        release(cached)
        raise
    for df in cached:  # the assignment is cached and counted: the inputs are no longer needed
        df.unpersist()
    return ResplitResult(sources, options, priority, assignment, summary, timer.timings)


def _summary(assignment: DataFrame, n: int) -> dict:
    """Counts that stay small whatever the input: groups, and records per (from, to) split."""
    import pyspark.sql.functions as F

    groups = assignment.groupBy("group_id").agg(
        F.count(F.lit(1)).alias("size"),
        F.countDistinct("original_split").alias("splits"),
    ).agg(
        F.sum((F.col("size") > 1).cast("long")).alias("groups"),
        F.sum((F.col("splits") > 1).cast("long")).alias("spanning"),
    ).first()
    flows = (assignment.groupBy("original_split", "split", "reassigned").count()
             .orderBy("original_split", "split").collect())
    before: dict[str, int] = {}
    after: dict[str, int] = {}
    moved = []
    for r in flows:
        before[r.original_split] = before.get(r.original_split, 0) + r["count"]
        after[r.split] = after.get(r.split, 0) + r["count"]
        if r.reassigned:
            moved.append({"from": r.original_split, "to": r.split, "records": r["count"]})
    return {
        "records": n,
        "groups": groups.groups or 0,
        "spanning_groups": groups.spanning or 0,
        "moved_records": sum(m["records"] for m in moved),
        "moved": moved,
        "splits": {s: {"before": before.get(s, 0), "after": after.get(s, 0)}
                   for s in sorted(set(before) | set(after))},
    }


def render(report: dict) -> str:
    """The text summary of a resplit."""
    lines = [f"resplit: {report['records']:,} records, {report['groups']:,} duplicate groups, "
             f"{report['spanning_groups']:,} spanning more than one split",
             f"moved: {report['moved_records']:,} records"]
    width = max([len(f"{m['from']} -> {m['to']}") for m in report["moved"]] + [0])
    lines += [f"  {m['from'] + ' -> ' + m['to']:<{width}}  {m['records']:,}"
              for m in report["moved"]]
    lines.append("splits (records before -> after):")
    lines += [f"  {s}: {c['before']:,} -> {c['after']:,}" for s, c in report["splits"].items()]
    return "\n".join(lines)
