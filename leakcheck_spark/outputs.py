"""Writing results so that a failed run leaves nothing that looks whole.

Every output is first written to a hidden staging path next to its destination and moved into
place only when all of it is written (:func:`staged`).  What it replaces is renamed aside first
and deleted only once the new output is in place -- or, inside :func:`all_or_nothing`, once every
output of the run is: a run that fails after writing one output puts back what was there before.
Spark writes the DataFrame outputs; small artifacts (report.json) are written by the driver (see
:func:`_files` for how each kind of path is reached, including from a Spark Connect client).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

from leakcheck_spark import errors
from leakcheck_spark.errors import LeakcheckError
from leakcheck_spark.paths import is_local, local_path, spark_uri
from leakcheck_spark.session import is_connect, live, session_conf
from leakcheck_spark.sources import CSV_DIALECT, named

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# Spark's CSV and JSON writers print a timestamp to the millisecond, and its Parquet writer
# stores one with a time zone as INT96 (read back as nanoseconds): a kept row's timestamps keep
# their microseconds, and their type.
_TIME_WRITE = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
               "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}
_PARQUET_TIME = ("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
# Spark's CSV writer trims the whitespace around every value unless told not to: values are
# written as they are.
CSV_WRITE = {"header": True, **CSV_DIALECT, "ignoreLeadingWhiteSpace": False,
             "ignoreTrailingWhiteSpace": False}
# The writer options of each format.
_WRITE_OPTIONS = {"csv": {**CSV_WRITE, **_TIME_WRITE}, "json": _TIME_WRITE, "parquet": {}}
# Spark's JSON writer leaves a null field out of its object unless told not to, and a record
# without its text field is no source record (LC_E_MISSING_FIELD): a null is written as null,
# unless the session says otherwise.
_JSON_NULLS = ("spark.sql.jsonGenerator.ignoreNullFields", "ignoreNullFields")


def _write_options(spark: SparkSession, fmt: str) -> dict:
    """The options of a `fmt` writer (:data:`_WRITE_OPTIONS`, and nulls kept in JSON)."""
    key, option = _JSON_NULLS
    keep_nulls = fmt == "json" and spark.conf.get(key, None) is None
    return {**_WRITE_OPTIONS[fmt], **({option: False} if keep_nulls else {})}

log = logging.getLogger(__name__)

# The moves into place of the current all_or_nothing block: (files, final, what it replaced, set
# aside or None); a directory the block created has no aside.
_MOVES: contextvars.ContextVar[list | None] = contextvars.ContextVar("lc_moves", default=None)


@contextlib.contextmanager
def all_or_nothing() -> Iterator[None]:
    """Keep the outputs moved into place inside the block only if the whole block succeeds.

    On an exception each of them is removed again (last first), what it replaced is put back and
    the parent directories the block created are removed; on success what they replaced (kept
    aside until then) is deleted.  So a run that fails writing its second output does not leave
    its first one behind.
    """
    moves: list = []
    token = _MOVES.set(moves)
    try:
        yield
    except BaseException:
        for fs, final, aside in reversed(moves):
            with contextlib.suppress(Exception):  # put back as much as can be put back
                fs.delete(final)
            if aside is not None:
                with contextlib.suppress(Exception):
                    fs._rename(aside, final)
        raise
    else:
        for fs, _, aside in moves:
            if aside is not None:
                with contextlib.suppress(Exception):
                    fs.delete(aside)
    finally:
        _MOVES.reset(token)


# What an output is, for what an existing directory at its path may be replaced (see
# :func:`check_replaceable`): an ``--out-dir`` (report.json and lists), a directory of part files,
# or one file.
REPORT_DIR, PARTS_DIR, ONE_FILE = "report", "parts", "file"
# Every name an --out-dir of any command holds.
REPORT_NAMES = frozenset({"report.json", "overlaps", "label_conflicts", "records",
                          "leaked_groups", "unreadable", "hashes"})


# What a file browser leaves in a directory it shows (Finder, Windows Explorer): no user's data,
# so an output someone looked at stays replaceable.
DESKTOP_LITTER = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})


def output_path(path: object, inputs: Iterable[str] = (), in_place: str | None = None,
                spark: SparkSession | None = None) -> str:
    """A library ``write``'s output path, checked as the CLI checks its outputs before any work:
    a string or a path-like object, not blank, a leading ``~`` expanded (as pandas does), not
    one of the result's `inputs` (:func:`check_not_input`), not the working directory
    (:func:`check_not_cwd`) and, given the result's `spark` (which must not be stopped), not
    where a ``table:`` input keeps its files (:func:`check_table_locations`).  Returns it as a
    string.

    Raises:
        LeakcheckError(LC_E_USAGE): anything else.
    """
    from leakcheck_spark.paths import home, resolved

    if spark is not None:  # before any DataFrame is built: a stopped session fails in PySpark
        live(spark)
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise LeakcheckError(errors.USAGE, f"an output path is a string or a path, not {path!r}",
                             "give write() a path, e.g. write('out')")
    if not path.strip():
        raise LeakcheckError(errors.USAGE, f"the output path {path!r} is empty",
                             "give write() a path, e.g. write('out')")
    path = home(path)
    inputs = list(inputs)
    check_not_input("output", path, inputs, in_place)
    where = resolved(path)
    if is_local(path):
        check_not_cwd("output", path, where)
    if spark is not None:
        check_table_locations(spark, [("output", path, where)], inputs)
    return path


def check_not_cwd(name: str, path: str, where: str) -> None:
    """Refuse local output `path` (at `where`, :func:`paths.resolved`) when it is or holds the
    working directory: replacing it would empty the user's working directory.

    Raises:
        LeakcheckError(LC_E_USAGE): naming the output.
    """
    from leakcheck_spark.paths import comparable, within

    try:
        cwd = comparable(os.getcwd())
    except OSError:  # the working directory is gone: nothing to protect
        return
    if within(cwd, where):
        what = "is" if cwd == where else "holds"
        raise LeakcheckError(errors.USAGE, f"{name} {path} {what} the working directory: "
                             "replacing it would delete everything in it",
                             f"give {name} a new path, e.g. a directory under this one")


def check_table_locations(spark: SparkSession, outs: Sequence[tuple[str, str, str]],
                          inputs: Iterable[str]) -> None:
    """Refuse an output (name, path, :func:`paths.resolved` path) that is, holds or lies inside
    the location of a ``table:`` input (the CLI's and the library's check).

    Raises:
        LeakcheckError(LC_E_USAGE): naming the table and its location.
    """
    from leakcheck_spark.paths import comparable, within
    from leakcheck_spark.sources import TABLE_PREFIX

    for source in inputs if outs else ():
        if not source.startswith(TABLE_PREFIX):
            continue
        try:  # SQL, not the JVM catalog: the same over Spark Connect
            rows = spark.sql(f"DESCRIBE TABLE EXTENDED {source[len(TABLE_PREFIX):]}").where(
                "col_name = 'Location'").collect()
        except Exception:  # noqa: BLE001 - no such table, or a view: the read says what is wrong
            continue
        for row in rows:
            place = comparable(row.data_type)
            for name, path, where in outs:
                if within(where, place) or within(place, where):
                    raise over_input(name, path, where, place, f"{source} (at {row.data_type})")


def check_not_input(name: str, path: str, inputs: Iterable[str],
                    in_place: str | None = None) -> None:
    """Refuse output `path` (called `name` in the error) when it is an input, a directory
    holding one, or lies inside an input directory (or the directory an input glob searches):
    replacing it would delete the input.  `in_place` is the one input the output may be
    (``clean`` of a test file into itself: the file is read before it is replaced).  ``hf:``
    and ``table:`` inputs have no path.

    Raises:
        LeakcheckError(LC_E_USAGE): naming the input.
    """
    from leakcheck_spark.hf import PREFIX as HF
    from leakcheck_spark.paths import comparable, resolved, within
    from leakcheck_spark.sources import TABLE_PREFIX

    where = resolved(path)  # not a glob: an output is written as named, not searched
    for source in inputs:
        if source.startswith((HF, TABLE_PREFIX)):
            continue
        place = comparable(source)
        if source == in_place and where == place:
            continue
        if within(where, place) or within(place, where):
            raise over_input(name, path, where, place, source)


def over_input(name: str, path: str, where: str, place: str, source: str) -> LeakcheckError:
    """The error for output `path` (at `where`) that is, holds or lies inside the input `source`
    (at `place`; both :func:`paths.comparable`)."""
    from leakcheck_spark.paths import within

    what = "is" if where == place else "holds" if within(place, where) else "lies inside"
    return LeakcheckError(errors.USAGE, f"{name} {path} {what} the input {source}: writing it "
                          "would replace or mix with the input", "write the output somewhere else")


def rows_kind(path: str) -> str:
    """The kind of a rows output (``clean --out``, ``resplit --out``, ``--resplit-out``)."""
    return PARTS_DIR if single_file_format(path) is None else ONE_FILE


def check_replaceable(spark: SparkSession | None, path: str, kind: str,
                      name: str | None = None) -> None:
    """Refuse to replace an existing directory at `path` that is not an output of ours.

    A run replaces what is at its output's path.  A directory there may go only when it is empty
    or looks like an earlier output of the same `kind`: for an ``--out-dir``
    (:data:`REPORT_DIR`), a ``report.json`` and nothing but the names some --out-dir holds
    (:data:`REPORT_NAMES`); for a directory of part files (:data:`PARTS_DIR`), Spark's
    ``part-*`` files or its ``_SUCCESS`` marker and nothing but those, Spark's other ``_``
    markers and the ``.crc`` checksums Hadoop writes beside them; one file (:data:`ONE_FILE`) never
    replaces a directory that holds anything.  A file at `path` is replaced only by one file.
    `spark` may be None for a local path; `name` is how the error names the output (default:
    `path`).

    Raises:
        LeakcheckError(LC_E_USAGE): a directory holding something else (named in the message),
            or a file where a directory goes.
    """
    _files(spark, path).check_replaceable(path, kind, name)


@contextlib.contextmanager
def staged(spark: SparkSession, final: str, kind: str = PARTS_DIR) -> Iterator[str]:
    """Yield a staging path beside `final`; on success move it to `final` (replacing what was
    there), on failure (of the block or of the move) remove it.  Works for a file or a
    directory; an existing directory at `final` must be replaceable as an output of `kind`
    (:func:`check_replaceable`), checked before anything is written."""
    staging = _sibling(final, "lc-tmp")
    fs = _files(spark, final)
    fs.make_parents(_split(final)[0])
    fs.recover(final)
    fs.check_replaceable(final, kind)
    try:
        with _own_jobs(spark):
            yield staging
        fs.replace(staging, final)
    except BaseException as exc:
        fs.delete(staging)
        # A Spark write that fails on the filesystem raises a Py4J error holding a Java trace.
        err = (errors.write_failure(final, _split(staging)[1], exc)
               if isinstance(exc, Exception) and not isinstance(exc, LeakcheckError) else None)
        if err is not None:
            raise err from None
        raise


# How long a failed or interrupted write waits for its Spark tasks to stop before its staging is
# removed all the same (a cancelled task stops at its next record; a Python worker is killed after
# spark.python.task.killTimeout, 2 s by default).
_STOP_WAIT = 30.0


@dataclasses.dataclass
class _Jobs:
    """The Spark jobs of one :func:`_own_jobs` block: their tag, and the threads the block's
    Spark actions run in (:func:`_spark_action`)."""

    tag: str
    connect: bool
    actions: list = dataclasses.field(default_factory=list)


# The innermost _own_jobs block of this context.
_JOBS: contextvars.ContextVar[_Jobs | None] = contextvars.ContextVar("lc_jobs", default=None)


@contextlib.contextmanager
def _own_jobs(spark: SparkSession | None) -> Iterator[None]:
    """The Spark jobs the block starts carry a tag of their own; when the block fails (a write
    that failed, Ctrl-C, SIGTERM) they are cancelled, and their tasks waited for, before the
    caller removes the staging path: a task still running would otherwise go on writing into it
    (recreating it) after the rollback.  Only this block's jobs: other jobs of a shared session
    are left alone."""
    if spark is None:
        yield
        return
    jobs = _Jobs(f"leakcheck-spark-write-{uuid.uuid4().hex}", is_connect(spark))
    if jobs.connect:
        spark.addTag(jobs.tag)
    else:
        spark.sparkContext.addJobTag(jobs.tag)
    token = _JOBS.set(jobs)
    try:
        yield
    except BaseException:
        _stop_jobs(spark, jobs)
        raise
    finally:
        _JOBS.reset(token)
        with contextlib.suppress(Exception):  # the gateway may be gone (a JVM that died)
            if jobs.connect:
                spark.removeTag(jobs.tag)
            else:
                spark.sparkContext.removeJobTag(jobs.tag)


def _spark_action(action: Callable[[], object]) -> None:
    """Run `action` (a Spark call that runs jobs: a write).  Inside an :func:`_own_jobs` block it
    runs in a thread of its own, which the calling thread waits for: interrupted (Ctrl-C,
    SIGTERM), the caller is out of the JVM call at once, and the block can wait until the call
    has returned -- one cancel stops the jobs that run, not those the call goes on to start
    (a sort's sampling job, its shuffle, then the write; or a job whose planning was under way).

    The thread is a PySpark InheritableThread: the JVM side of it carries the block's job tag.
    Without pinned Py4J threads or under Spark Connect, `action` runs in the calling thread."""
    from py4j.clientserver import ClientServer
    from pyspark import SparkContext
    from pyspark.util import InheritableThread

    jobs = _JOBS.get()
    if jobs is None or jobs.connect or not isinstance(SparkContext._gateway, ClientServer):
        action()
        return
    failed: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            failed.append(exc)
        finally:
            done.set()

    jobs.actions.append(done)
    InheritableThread(run, name="leakcheck-spark-write", daemon=True).start()
    # Not Thread.join: a signal's handler that raises inside it leaves the thread marked as
    # ended while it runs (Python < 3.13).  Between waits the handler runs, and may raise.
    while not done.wait(0.5):
        pass
    if failed:
        raise failed[0]


def _stop_jobs(spark: SparkSession, jobs: _Jobs) -> None:
    """Cancel the jobs tagged ``jobs.tag`` and wait (at most :data:`_STOP_WAIT`) until the
    block's Spark actions have returned and none of their tasks runs.  The cancel is repeated
    while an action runs: it cancels the jobs there are, and the action may start another.
    Under Spark Connect the server is asked to interrupt them; it does not report when their
    tasks have stopped."""
    from py4j.protocol import Py4JNetworkError

    deadline = time.monotonic() + _STOP_WAIT
    retries = 3
    caught_up = False
    while True:
        try:
            if jobs.connect:
                spark.interruptTag(jobs.tag)
                return
            sc = spark.sparkContext
            sc.cancelJobsWithTag(jobs.tag)
            if all(done.is_set() for done in jobs.actions):
                if not caught_up:
                    # The status tracker learns of jobs from Spark's listener bus, which lags: let
                    # it take in every job the actions started before asking it.
                    caught_up = True
                    with contextlib.suppress(Exception):  # an internal API (bounded wait)
                        sc._jsc.sc().listenerBus().waitUntilEmpty(5000)
                tracker = sc._jsc.sc().statusTracker()
                if not _busy(sc.statusTracker(), tracker.getJobIdsForTag(jobs.tag)):
                    return
        except Py4JNetworkError:
            # Py4J's first connection after a JVM call cut short by a signal may get an empty
            # answer; the next one works.  A JVM that is gone fails every time.
            retries -= 1
            if not retries:
                log.debug("could not stop the jobs of tag %s", jobs.tag, exc_info=True)
                return
        except Exception:  # noqa: BLE001 - no JVM left (it died, or with this process): no tasks
            log.debug("could not stop the jobs of tag %s", jobs.tag, exc_info=True)
            return
        if time.monotonic() > deadline:
            log.warning("Spark tasks of an interrupted write still ran after %.0f s", _STOP_WAIT)
            return
        time.sleep(0.1)


def _busy(tracker, job_ids: Iterable[int]) -> bool:  # noqa: ANN001 - a StatusTracker
    """Whether one of the jobs still runs or a task of theirs has yet to end (a cancelled job
    ends at once; its running tasks end when they notice)."""
    jobs = [tracker.getJobInfo(j) for j in job_ids]
    stages = [tracker.getStageInfo(s) for job in jobs if job for s in job.stageIds]
    return (any(job and job.status == "RUNNING" for job in jobs)
            or any(stage and stage.numActiveTasks for stage in stages))


def remove(spark: SparkSession, path: str) -> None:
    """Delete a file or directory if it exists."""
    _files(spark, path).delete(path)


def write_text_file(spark: SparkSession, path: str, text: str | Iterable[str]) -> None:
    """Write a text artifact from the driver, atomically; `text` may be an iterable of chunks,
    written as they come (so a long list need not sit whole in driver memory)."""
    _files(spark, path).write_text(path, [text] if isinstance(text, str) else text)


def write_json_file(spark: SparkSession, path: str, obj: object) -> None:
    write_text_file(spark, path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def check_format(fmt: object) -> str:
    """A ``write(..., fmt=...)`` argument: one of the list formats.

    Raises:
        LeakcheckError(LC_E_USAGE): any other value (which would otherwise be written as
            Parquet while the caller asked for something else).
    """
    from leakcheck_spark.options import FORMATS

    if fmt not in FORMATS:
        raise LeakcheckError(errors.USAGE, f"format {fmt!r} is not valid: expected "
                             + " | ".join(FORMATS), "fix the fmt argument (or --format)")
    return fmt


def write_table(df: DataFrame, path: str, fmt: str) -> None:
    """Write a result DataFrame as a directory of part files in `fmt` (parquet|csv|json).

    CSV has no arrays or structs, so those columns are written as JSON text.
    """
    check_format(fmt)
    if fmt == "csv":
        df = csv_columns(df)
    writer = df.write.mode("error").options(**_write_options(df.sparkSession, fmt))
    _write(df.sparkSession, lambda: getattr(writer, fmt)(spark_uri(path)))


def _write(spark: SparkSession, action: Callable[[], None]) -> None:
    """Run the write `action` (:func:`_spark_action`) with Parquet timestamps written as
    microseconds, unless the session sets how itself (e.g. INT96 for an old reader); unset
    again after."""
    key, value = _PARQUET_TIME
    settings = {} if spark.conf.get(key, None) is not None else {key: value}  # else its choice
    with session_conf(spark, settings):
        _spark_action(action)


def write_json_lines(df: DataFrame, path: str) -> None:
    """Write the one string column of `df`, whose values are JSON texts, as they are: a
    directory of JSON Lines part files named ``.json``, as :func:`write_table` names them (Spark's
    text writer would name them ``.txt``, which a reader takes for lines of plain text)."""
    _spark_action(lambda: df.write.mode("error").text(spark_uri(path)))
    fs = _files(df.sparkSession, path)
    for part in fs.list(path):
        parent, name = _split(part)
        # A local write's checksum file (.part-*.txt.crc) follows its part file.
        renamed = re.fullmatch(r"(\.?part-.*)\.txt(\.crc)?", name)
        if renamed and (renamed[2] is None) == name.startswith("part-"):
            fs.rename(part, _join(parent, f"{renamed[1]}.json{renamed[2] or ''}"))


def csv_columns(df: DataFrame) -> DataFrame:
    """`df` with what CSV cannot hold as text: its array, struct and map columns as JSON text,
    its binary columns as base64 (as the JSON writer writes them)."""
    import pyspark.sql.functions as F
    from pyspark.sql import types as T

    def as_text(f: T.StructField) -> Column:
        col = named(f.name)
        if isinstance(f.dataType, (T.ArrayType, T.StructType, T.MapType)):
            col = F.to_json(col)
        elif isinstance(f.dataType, T.BinaryType):
            col = F.base64(col)
        return col.alias(f.name)

    return df.select(*map(as_text, df.schema.fields))


# An output path with one of these endings is written as one file: (format, compression).
SINGLE_FILE = {
    ".jsonl": ("jsonl", None), ".jsonl.gz": ("jsonl", "gzip"), ".ndjson": ("jsonl", None),
    ".ndjson.gz": ("jsonl", "gzip"),
    ".csv": ("csv", None), ".csv.gz": ("csv", "gzip"), ".parquet": ("parquet", None),
}


def single_file_format(path: str) -> tuple[str, str | None] | None:
    """(format, compression) when `path` names one file by its ending, else None (a directory).

    >>> single_file_format("out/a.csv.gz"), single_file_format("out/rows")
    (('csv', 'gzip'), None)
    """
    low = path.lower()
    return next((v for ext, v in SINGLE_FILE.items() if low.endswith(ext)), None)


def write_rows(df: DataFrame, path: str, fmt: str, order: Sequence[str],
               columns: Sequence[str]) -> None:
    """Write the `columns` of result rows to `path`, in `order`: one file when the path's ending
    names a format (:data:`SINGLE_FILE`), else a directory of part files in `fmt`."""
    single = single_file_format(path)
    if single is None:
        check_format(fmt)  # before staging creates any directory
        with staged(df.sparkSession, path) as tmp:
            write_table(df.orderBy(*order).select(*columns), tmp, fmt)
        return
    fmt, compression = single
    ordered = df.coalesce(1).sortWithinPartitions(*order).select(*columns)
    write_single_file(df.sparkSession, ordered, path, "json" if fmt == "jsonl" else fmt,
                      compression)


def write_single_file(spark: SparkSession, df: DataFrame, path: str, fmt: str,
                      compression: str | None, text_column: str | None = None) -> None:
    """Write `df` (already in the wanted row order, one partition) as exactly one file at `path`.

    CSV has no arrays or structs, so those columns are written as JSON text.  `text_column`
    writes that column's values as lines (the raw rows of line formats).
    """
    if fmt == "csv" and text_column is None:
        df = csv_columns(df)
    with staged(spark, path, ONE_FILE) as tmp_dir:
        # One partition is one file only without a record cap: a session's
        # spark.sql.files.maxRecordsPerFile would split it (the writer's option overrides it).
        writer = df.write.mode("error").option("maxRecordsPerFile", 0)
        if compression:
            writer = writer.option("compression", compression)
        if text_column is not None:
            fmt = "text"
        else:
            writer = writer.options(**_write_options(spark, fmt))
        _write(spark, lambda: getattr(writer, fmt)(spark_uri(tmp_dir)))
        fs = _files(spark, path)
        parts = [p for p in fs.list(tmp_dir) if _split(p)[1].startswith("part-")]
        if len(parts) != 1:
            raise LeakcheckError(errors.IO,
                                 f"expected one part file writing {path}, got {len(parts)}")
        tmp_file = tmp_dir + ".file"
        fs.rename(parts[0], tmp_file)
        fs.delete(tmp_dir)
        fs.rename(tmp_file, tmp_dir)


def _split(path: str) -> tuple[str, str]:
    path = path.rstrip("/")
    if "/" not in path:
        return ".", path
    parent, name = path.rsplit("/", 1)
    return parent or "/", name


def _join(parent: str, name: str) -> str:
    return name if parent == "." else f"{parent.rstrip('/')}/{name}"


def _sibling(path: str, kind: str) -> str:
    """A hidden, unique path beside `path`: ``.NAME.KIND-xxxxxxxxxx``."""
    parent, name = _split(path)
    return _join(parent, f".{name}.{kind}-{uuid.uuid4().hex[:10]}")


def _files(spark: SparkSession, path: str) -> _Files:
    """The filesystem operations outputs need, for the place `path` is in.

    Local paths (and ``file:`` URIs) go through the operating system.  Other Hadoop URIs go
    through the Hadoop FileSystem of the driver's JVM in a classic session (the connectors and
    credentials Spark itself uses), and through fsspec under Spark Connect, where this process
    has no JVM: the client then needs fsspec and the package for the scheme (s3fs for ``s3a://``,
    gcsfs for ``gs://``, adlfs for ``abfss://``), with credentials for the same storage.
    """
    if spark is not None:  # None: a local path checked before the session is up
        live(spark)
    if is_local(path):
        return _LocalFiles()
    if not is_connect(spark):
        return _HadoopFiles(spark, path)
    return _FsspecFiles(path)


class _Files:
    """Operations on files and directories named by path; each backend supplies the primitives."""

    def mkdirs(self, path: str) -> None:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def is_dir(self, path: str) -> bool:
        """Whether `path` is a directory (a local symlink to one is not: replacing it replaces
        the link)."""
        raise NotImplementedError

    def _delete(self, path: str) -> None:
        raise NotImplementedError

    def _rename(self, src: str, dst: str) -> None:
        raise NotImplementedError

    def _names(self, path: str) -> list[str]:
        raise NotImplementedError

    def _open_write(self, path: str):  # noqa: ANN202 - a text file object
        raise NotImplementedError

    def delete(self, path: str) -> None:
        if self.exists(path):
            self._delete(path)

    def rename(self, src: str, dst: str) -> None:
        try:
            self._rename(src, dst)
        except OSError as exc:
            raise LeakcheckError(errors.IO, f"cannot move {src} to {dst}: {exc}") from None

    def replace(self, src: str, dst: str) -> None:
        """Move `src` to `dst`.  An existing `dst` is renamed aside first and deleted only once
        `src` is in place (inside :func:`all_or_nothing`: once the block succeeds), so a failed
        move keeps it."""
        aside = None
        if self.exists(dst):
            aside = _sibling(dst, "lc-old")
            self.rename(dst, aside)
        try:
            self.rename(src, dst)
        except BaseException:
            if aside is not None:
                self._rename(aside, dst)
            raise
        moves = _MOVES.get()
        if moves is not None:
            moves.append((self, dst, aside))
        elif aside is not None:
            self.delete(aside)

    def recover(self, final: str) -> None:
        """Deal with what a run killed without a chance to roll back (SIGKILL, a lost machine)
        left beside `final`, before a new output is written there.

        A killed run can leave its staging (``.NAME.lc-tmp-*``), and what it replaced set aside
        (``.NAME.lc-old-*``) -- in the worst case (killed between the two renames of
        :meth:`replace`) with no `final` at all.  Exactly one ``.lc-old`` and no `final` is
        restored to `final`: it is what was there before the killed run, which that run's
        rollback would have put back, and this run then replaces it as any output (kept if this
        run fails, deleted once it succeeds).  Everything else is only reported, never deleted:
        a staging path may belong to another run writing here right now, and with several
        ``.lc-old`` (or one beside a `final`) which is the user's latest output cannot be told.
        Neither collides with this run's own siblings (their names are unique) nor is read as
        input (Spark's file listing skips hidden names).
        """
        parent, name = _split(final)
        try:
            entries = self.list(parent)
        except Exception:  # noqa: BLE001 - a parent that cannot be listed: nothing to recover
            return
        old = [p for p in entries if _split(p)[1].startswith(f".{name}.lc-old-")]
        if len(old) == 1 and not self.exists(final):
            self.rename(old[0], final)
            log.warning("restored %s from %s, left by an interrupted run", final, old[0])
            old = []
        for path in [p for p in entries if _split(p)[1].startswith(f".{name}.lc-tmp-")] + old:
            log.warning("%s was left beside %s by an interrupted run; delete it once no other "
                        "run is writing there", path, final)

    def check_replaceable(self, path: str, kind: str, name: str | None = None) -> None:
        """:func:`check_replaceable`."""
        if not self.is_dir(path):
            if kind != ONE_FILE and self.exists(path):
                raise LeakcheckError(errors.USAGE, f"{name or path} is a file, and this output "
                                     "is a directory: replacing it would delete it",
                                     "give a new path, or remove the file first")
            return
        names = [n for p in self.list(path) if (n := _split(p)[1]) not in DESKTOP_LITTER]
        if kind == REPORT_DIR:
            foreign = [n for n in names if n not in REPORT_NAMES]
            ours = "report.json" in names
        else:
            foreign = [n for n in names if not (n.startswith(("part-", "_"))
                                                or (n.startswith(".") and n.endswith(".crc")))]
            ours = kind == PARTS_DIR and any(n.startswith("part-") or n == "_SUCCESS"
                                             for n in names)
        if not names or (ours and not foreign):
            return
        named = foreign or names
        shown = named[:3]
        more = ", ..." if len(named) > len(shown) else ""
        raise LeakcheckError(errors.USAGE, f"{name or path} exists and is not a leakcheck-spark "
                             f"output (it holds {', '.join(shown)}{more}): replacing it would "
                             "delete them", "give a new path, or remove it first")

    def make_parents(self, path: str) -> None:
        """Create directory `path` and its missing parents (inside :func:`all_or_nothing`,
        local ones are removed again if the block fails)."""
        moves = _MOVES.get()
        top = None
        if moves is not None and isinstance(self, _LocalFiles):
            p = path
            while not self.exists(p):
                top, p = p, _split(p)[0]
                if p == top:
                    break
        self.mkdirs(path)
        if top is not None:
            moves.append((self, top, None))

    def list(self, path: str) -> list[str]:
        """The entries of directory `path`, as paths under it, sorted."""
        return [_join(path, name) for name in sorted(self._names(path))]

    def write_text(self, path: str, chunks: Iterable[str]) -> None:
        parent = _split(path)[0]
        tmp = _sibling(path, "lc-tmp")
        try:
            self.make_parents(parent)
            self.recover(path)
            self.check_replaceable(path, ONE_FILE)
            with self._open_write(tmp) as fh:
                fh.writelines(chunks)
            self.replace(tmp, path)
        except OSError as exc:
            raise LeakcheckError(errors.IO, f"cannot write {path}: {exc.strerror or exc}",
                                 "check that the output's directory can be written") from None
        finally:
            self.delete(tmp)


class _LocalFiles(_Files):
    def mkdirs(self, path: str) -> None:
        try:
            os.makedirs(local_path(path), exist_ok=True)
        except OSError as exc:
            raise LeakcheckError(errors.IO, f"cannot create {path}: {exc.strerror}") from None

    def exists(self, path: str) -> bool:
        return os.path.lexists(local_path(path))

    def is_dir(self, path: str) -> bool:
        p = local_path(path)
        return os.path.isdir(p) and not os.path.islink(p)

    def _delete(self, path: str) -> None:
        p = local_path(path)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            os.remove(p)

    def _rename(self, src: str, dst: str) -> None:
        os.replace(local_path(src), local_path(dst))

    def _names(self, path: str) -> list[str]:
        return os.listdir(local_path(path))

    def _open_write(self, path: str):  # noqa: ANN202
        return open(local_path(path), "w", encoding="utf-8")  # noqa: SIM115 - caller closes


class _HadoopFiles(_Files):
    """Through the Hadoop FileSystem API of a classic session's JVM."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self._jvm = spark.sparkContext._jvm
        # Hadoop's Path (not java.net.URI) parses the path: it may hold spaces.
        self._fs = self._p(path).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def _p(self, path: str):  # noqa: ANN202 - a Java Path
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def mkdirs(self, path: str) -> None:
        if not self._fs.mkdirs(self._p(path)):
            raise LeakcheckError(errors.IO, f"cannot create {path}")

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._p(path)))

    def is_dir(self, path: str) -> bool:
        return self.exists(path) and bool(self._fs.getFileStatus(self._p(path)).isDirectory())

    def _delete(self, path: str) -> None:
        self._fs.delete(self._p(path), True)

    def _rename(self, src: str, dst: str) -> None:
        if not self._fs.rename(self._p(src), self._p(dst)):
            raise OSError("the filesystem refused the rename")

    def _names(self, path: str) -> list[str]:
        return [str(s.getPath().getName()) for s in self._fs.listStatus(self._p(path))]

    def _open_write(self, path: str):  # noqa: ANN202
        return _JavaTextWriter(self._fs.create(self._p(path), True))


class _JavaTextWriter:
    """A Hadoop output stream as a Python text file (UTF-8), for ``with`` and ``writelines``."""

    def __init__(self, stream) -> None:  # noqa: ANN001 - a Java FSDataOutputStream
        self._stream = stream

    def writelines(self, chunks: Iterable[str]) -> None:
        for chunk in chunks:
            self._stream.write(bytearray(chunk.encode("utf-8")))

    def __enter__(self) -> _JavaTextWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.close()


class _FsspecFiles(_Files):
    """Through fsspec, for a Spark Connect client (which has no JVM of its own)."""

    def __init__(self, path: str) -> None:
        hint = ("under Spark Connect the client writes report files itself: install fsspec and "
                "the package for this scheme (pip install 'leakcheck-spark[connect]' s3fs / "
                "gcsfs / adlfs), or write to a path the client and the server share")
        try:
            import fsspec
        except ImportError:
            raise LeakcheckError(errors.USAGE, f"cannot write {path} from this Spark Connect "
                                 "client: fsspec is not installed", hint) from None
        try:
            self._fs = fsspec.core.url_to_fs(path)[0]
        except (ImportError, ValueError) as exc:
            raise LeakcheckError(errors.USAGE, f"cannot write {path} from this Spark Connect "
                                 f"client: {str(exc).splitlines()[0]}", hint) from None

    def mkdirs(self, path: str) -> None:
        try:
            self._fs.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise LeakcheckError(errors.IO, f"cannot create {path}: {exc}") from None

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(path))

    def is_dir(self, path: str) -> bool:
        return bool(self._fs.isdir(path))

    def _delete(self, path: str) -> None:
        self._fs.rm(path, recursive=True)

    def _rename(self, src: str, dst: str) -> None:
        self._fs.mv(src, dst, recursive=True)

    def _names(self, path: str) -> list[str]:
        return [_split(str(p))[1] for p in self._fs.ls(path, detail=False)]

    def _open_write(self, path: str):  # noqa: ANN202
        return self._fs.open(path, "w", encoding="utf-8")
