"""One exception type for every failure a user can cause, and its mapping from Spark errors.

The library raises :class:`LeakcheckError`; only the CLI edge prints it and exits 2.  Bad rows
are found inside Spark tasks, where raising would surface as a Py4J traceback, so the parse
stages record a row's problem in a column (:func:`encode_row_error`) and the driver raises the
first one in read order (:func:`decode_row_error`).  Failures Spark raises itself (a path that
does not exist, a corrupt gzip or parquet file) are translated by :func:`from_spark_exception`.
A stage a user composes checks its input's schema first (:func:`require_columns`).
"""

from __future__ import annotations

import os
import re
import shlex
import traceback
import urllib.parse
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EMPTY_INPUT = "LC_E_EMPTY_INPUT"
BAD_VALUE = "LC_E_BAD_VALUE"
MISSING_FIELD = "LC_E_MISSING_FIELD"
BAD_SPEC = "LC_E_BAD_SPEC"
BAD_FORMAT = "LC_E_BAD_FORMAT"
IO = "LC_E_IO"
USAGE = "LC_E_USAGE"
CODES = (EMPTY_INPUT, BAD_VALUE, MISSING_FIELD, BAD_SPEC, BAD_FORMAT, IO, USAGE)

_HINTS = {
    EMPTY_INPUT: "give a source with at least one record",
    BAD_VALUE: "the text field must hold strings (or null)",
    MISSING_FIELD: "check the field flags (--text-field, --id-field, ...) against the data",
    BAD_SPEC: "datasets are given as -d NAME[:SPLIT]=SOURCE; -o NAME.KEY=VALUE names one of them",
    BAD_FORMAT: "inputs are .jsonl/.ndjson, .json (a list of objects, or JSON Lines), .csv, "
    ".parquet or .txt; the text formats optionally .gz, .bz2 or .zst (not .json.zst)",
    IO: "check that the path exists and is readable",
    USAGE: "run 'leakcheck-spark --help' for the commands and flags",
}


class LeakcheckError(Exception):
    """A user-facing failure: a code of SPEC section 9, a message and a hint."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        if code not in CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint or _HINTS[code]

    def line(self) -> str:
        """The one-line form printed to stderr."""
        return f"leakcheck-spark: error [{self.code}]: {self.message} (hint: {self.hint})"

    def to_dict(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "hint": self.hint}}


# A row error travels through Spark as one string column: "CODE\x1fmessage", or
# "CODE\x1eHINT\x1fmessage".  The message comes last and is cut at the first \x1f only: it may
# quote a value from the data (which may hold any character); the code and hint are ours.
_SEP = "\x1f"
_HINT_SEP = "\x1e"


def encode_row_error(code: str, message: str, hint: str | None = None) -> str:
    r"""Encode a per-row problem for the `_err` column of a parse stage.

    >>> decode_row_error(encode_row_error(BAD_VALUE, "x \x1f y", "fix it")).line()
    'leakcheck-spark: error [LC_E_BAD_VALUE]: x \x1f y (hint: fix it)'
    """
    head = f"{code}{_HINT_SEP}{hint}" if hint else code
    return f"{head}{_SEP}{message}"


def decode_row_error(value: str) -> LeakcheckError:
    """Turn an `_err` column value back into the exception to raise on the driver."""
    head, _, message = value.partition(_SEP)
    code, _, hint = head.partition(_HINT_SEP)
    return LeakcheckError(code, message, hint or None)


def require_columns(df: DataFrame, stage: str, columns: Mapping[str, str | None],
                    frame: str = "its input") -> None:
    """Check, at the entry of a stage, that `df` has the columns the stage reads.

    `columns` maps each column to the Spark type it must have (``simpleString`` form; ``a|b``
    for either), or None where any type works.  Only the schema is read (no Spark job), so a user
    composing stages gets the stage's name and the columns it expects instead of Spark's
    AnalysisException from somewhere inside it.  Names compare as Spark resolves them by default
    (ignoring case), so nothing Spark would accept is refused.

    Raises:
        LeakcheckError: MISSING_FIELD naming the absent columns and those present; BAD_VALUE for
            a column of the wrong type.
    """
    fields = df.schema.fields  # one call: on Spark Connect each schema access is a round trip
    by_name = {f.name.lower(): f for f in fields}
    hint = (f"{stage} reads {frame} with the columns {', '.join(columns)}; see its docstring for "
            "the stage that makes them")
    missing = [c for c in columns if c.lower() not in by_name]
    if missing:
        present = ", ".join(f.name for f in fields) or "(none)"
        raise LeakcheckError(MISSING_FIELD, f"stage {stage} needs column(s) "
                             f"{', '.join(missing)} in {frame}; columns present: {present}", hint)
    for name, kind in columns.items():
        got = by_name[name.lower()].dataType.simpleString()
        if kind is not None and got not in kind.split("|"):
            raise LeakcheckError(BAD_VALUE, f"stage {stage} needs column {name} of {frame} to be "
                                 f"{kind.replace('|', ' or ')}, not {got}", hint)


# What to do about a column stored as different types in two Parquet files of one source.
TYPE_CLASH_HINT = ("give the column one type in every file of the source, or give the files as "
                   "separate sources")
_PATH_NOT_FOUND = re.compile(r"Path does not exist: (.+?)\.?(?: SQLSTATE|$)", re.M)
_READ_FILE = re.compile(r"Encountered error while reading file (\S+?)\.?\s", re.M)
# A listing refused: a directory (or one inside it) the user may not read, locally or on object
# storage ("AccessDeniedException: s3a://b/k: getFileStatus on ...", locally ".../d e: Permission
# denied"): the path runs to the first ": " (it may hold spaces) or the end of the line.
_DENIED = re.compile(r"AccessDeniedException: (.+?)(?:: |:?\s*$)", re.M)
# A task could not start its Python worker: PYSPARK_PYTHON names no program it can run.
_NO_PYTHON = re.compile(r'Cannot run program "([^"]*)": error=\d+, ([^\n]*)')
# A Python worker runs an interpreter without a package the tasks need (PYSPARK_PYTHON names
# another Python than the one leakcheck-spark is installed in).
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
# A job cancelled while the run waited for it: from Spark's UI (its "kill" link), another thread
# of a notebook (cancelAllJobs), or a platform stopping the application.
_CANCELLED = re.compile(r"\bJob (\d+) cancelled ?(.*?)(?: SQLSTATE: \w+)?\s*$", re.M)
_MEMORY_HINT = ("give Spark more memory: --conf spark.driver.memory=... (local mode: the driver "
                "runs the tasks), spark.executor.memory=... on a cluster; in a notebook, start "
                "the session with more driver memory and del the results you are done with")
_WORKER_PYTHON_HINT = ("set PYSPARK_PYTHON (on a cluster: spark.pyspark.python) to a Python "
                       "that has leakcheck-spark installed, on every machine")


_DENIED_HINT = ("check that the user Spark runs as may read it (and, for object storage, the "
                "credentials)")
# Compressed inputs, and the tool that tests one.
_COMPRESSED = {".gz": "gzip", ".bz2": "bzip2", ".zst": "zstd"}
# A CSV row with more or fewer values than its header.
CSV_FIELDS_HINT = ("every row has a value for each column of the header: quote a value that "
                   'holds a comma or a line break ("a,b"), doubling each quote in it')
# Spark's message for such a row, read in FAILFAST mode: it quotes the row, not its place.
_MALFORMED_CSV = re.compile(r"\[MALFORMED_CSV_RECORD\] Malformed CSV record: (.*?)"
                            r"(?: SQLSTATE: \w+)?$", re.S)
# Causes of a failed file read that are no corrupt file, and what to do about them.
_READ_HINTS = (
    # A Parquet file that stores a column as a type Spark cannot read as the source's.
    ("SchemaColumnConvertNotSupportedException", TYPE_CLASH_HINT),
    # A CSV file whose header differs from the one the columns came from (or repeats a name).
    ("CSV header does not conform to the schema", "every CSV file of a source needs the same "
     "header: the same names, in the same order, none repeated; give a file with another header "
     "as a source of its own"),
    # A Parquet file (not the one the schema came from) with two columns differing only in case.
    ("in case-insensitive mode", "read them as two columns with --conf "
     "spark.sql.caseSensitive=true"),
)


def from_spark_exception(exc: BaseException) -> LeakcheckError | None:
    """Translate an exception raised by a Spark action into a LeakcheckError, if it is one of ours.

    Returns None when the exception is not recognised (a genuine bug: let it propagate).
    """
    lost = lost_jvm(exc)
    if lost is not None:
        return lost
    text = str(exc)
    m = re.search(r"\[(LC_E_[A-Z_]+)\] (.*)", text)
    if m and m.group(1) in CODES:
        return LeakcheckError(m.group(1), m.group(2).strip())
    m = _PATH_NOT_FOUND.search(text)
    if m:
        return LeakcheckError(IO, f"no such file or directory: {display_path(m.group(1))}")
    m = _READ_FILE.search(text)
    if m:
        path = display_path(from_spark(m.group(1)))
        cause = _cause(text)
        if cause.startswith("ChecksumException") and path.startswith("/"):
            # Hadoop's local filesystem checks a file against the .NAME.crc beside it, which
            # Spark wrote with it: the file was changed since (edited, appended to, replaced).
            # (HDFS keeps its checksums out of sight: there it is a corrupt block, said as is.)
            folder, _, name = path.rpartition("/")
            return LeakcheckError(
                BAD_FORMAT, f"cannot read {path}: it changed after Spark wrote it (it no longer "
                f"matches the checksum file {folder}/.{name}.crc beside it)",
                f"if the change was meant, delete .{name}.crc; else write the file again")
        if "Permission denied" in cause or "AccessDenied" in cause or "403 Forbidden" in cause:
            # Local files say it in a FileNotFoundException, object stores in an
            # AccessDeniedException: the file is there, and its format is not the problem.
            return LeakcheckError(IO, f"cannot read {path}: permission denied", _DENIED_HINT)
        # Spark reads every file of a source with the columns of one of them: a file that does
        # not fit them is no corrupt file, and the default hint (the supported file types) would
        # send the user looking at the wrong thing.
        hint = next((h for key, h in _READ_HINTS if key in cause), None)
        if hint is None and path.lower().endswith(tuple(_COMPRESSED)):
            tool = _COMPRESSED[next(e for e in _COMPRESSED if path.lower().endswith(e))]
            hint = (f"the file is damaged, or not compressed as its name says: check it with "
                    f"{tool} -t {shlex.quote(path)}")
        m = _MALFORMED_CSV.search(cause)
        if m:
            row = m.group(1) if len(m.group(1)) <= 80 else m.group(1)[:77] + "..."
            cause, hint = (f"a row has more or fewer values than the header: {row!r}",
                           CSV_FIELDS_HINT)
        return LeakcheckError(BAD_FORMAT, f"cannot read {path}" + (f": {cause}" if cause else ""),
                              hint)
    m = _NO_PYTHON.search(text)
    if m:
        return LeakcheckError(IO, f"Spark cannot start its Python workers: cannot run "
                              f"{m.group(1)}: {m.group(2).strip().lower()}",
                              _WORKER_PYTHON_HINT)
    m = _NO_MODULE.search(text)
    if m:
        python = os.environ.get("PYSPARK_PYTHON")
        return LeakcheckError(IO, f"Spark's Python workers cannot import {m.group(1)}: the "
                              "Python they run" + (f" ({python})" if python else "")
                              + " does not have it", _WORKER_PYTHON_HINT)
    if "Python worker exited unexpectedly" in text:
        return LeakcheckError(IO, "a Python worker of a Spark task crashed (killed, or out of "
                              "memory)", "run again; if it crashes again, give the Python "
                              "workers more memory or fewer cores (--conf "
                              "spark.executor.memory=..., spark.driver.memory=... in local "
                              "mode), or use smaller Arrow batches (--conf "
                              "spark.sql.execution.arrow.maxRecordsPerBatch=...)")
    if "java.lang.OutOfMemoryError" in text or "Not enough memory to build and broadcast" in text:
        kind = re.search(r"java\.lang\.OutOfMemoryError: ([^\n]*)", text)
        return LeakcheckError(IO, "Spark ran out of memory" + (
            f" (OutOfMemoryError: {kind.group(1).strip()[:100]})" if kind else
            " (building a broadcast table)"), _MEMORY_HINT)
    m = _CANCELLED.search(text)
    if m:
        why = m.group(2).strip()
        return LeakcheckError(IO, f"Spark job {m.group(1)} of this run was cancelled"
                              + (f" ({why[:200]})" if why else ""),
                              "run again; nothing of this run was written")
    if "PATH_NOT_FOUND" in text or "FileNotFoundException" in text:
        return LeakcheckError(IO, _first_line(text))
    m = _DENIED.search(text)
    if m:
        return LeakcheckError(IO, f"cannot read {display_path(m.group(1))}: permission denied",
                              _DENIED_HINT)
    if "AccessDeniedException" in text or "Permission denied" in text:
        return LeakcheckError(IO, _first_line(text))
    return None


def lost_jvm(exc: BaseException) -> LeakcheckError | None:
    """LC_E_IO when `exc` says the JVM behind the session is gone (it died in the middle of the
    run: killed, out of memory): Py4J's connection broke or could not be made again."""
    try:
        from py4j.protocol import Py4JNetworkError
    except ImportError:  # a Spark Connect client without Py4J
        return None
    seen: BaseException | None = exc
    chain: set[int] = set()
    while seen is not None and id(seen) not in chain:
        chain.add(id(seen))
        if isinstance(seen, Py4JNetworkError) or (
                isinstance(seen, ConnectionError)
                and any("py4j" in f.filename for f in traceback.extract_tb(seen.__traceback__))):
            return LeakcheckError(IO, "lost the connection to Spark's JVM: it stopped in the "
                                  "middle of the run (killed, or out of memory)",
                                  "run again; if it stops again, give Spark more memory "
                                  "(--conf spark.driver.memory=...) or fewer cores")
        seen = seen.__cause__ or seen.__context__
    return None


def write_failure(final: str, staging_name: str, exc: BaseException) -> LeakcheckError | None:
    """The LC_E_IO error for a Spark write of output `final` that failed on the filesystem (its
    staging path, named `staging_name`, could not be created or written), or None when the
    failure is not about that path (a failure computing the rows: let it be translated as such).

    >>> write_failure("/o", ".o.lc-tmp-1", OSError("SparkException: Lost task: "
    ...               "java.io.IOException: Mkdirs failed to create file:/.o.lc-tmp-1/x")).message
    'cannot write /o: IOException: Mkdirs failed to create file:/.o.lc-tmp-1/x'
    """
    text = str(exc)
    if staging_name not in text:
        return None
    line = next(ln for ln in text.splitlines() if staging_name in ln)
    parts = re.split(r"([\w.$]+(?:Exception|Error)): ", line)  # [.., name, message] per cause
    detail = (f"{parts[-2].rsplit('.', 1)[-1]}: {parts[-1].strip()}" if len(parts) > 2
              else line.strip())
    return LeakcheckError(IO, f"cannot write {display_path(final)}: {detail[:300]}",
                          "check that the output's place exists and can be written")


def _cause(text: str) -> str:
    causes = re.findall(r"Caused by: ([\w.$]+(?:Exception|Error)): ?([^\n]*)", text)
    if not causes:
        return ""
    name, msg = causes[-1]
    name = name.rsplit(".", 1)[-1]
    return f"{name}: {msg}".strip().rstrip(":") if msg else name


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else "I/O error"


def from_spark(uri: str) -> str:
    """A file as Spark names it in ``_metadata.file_path``, ``DataFrame.inputFiles()`` and its
    "error while reading file" messages: URL-encoded (the file ``a b`` is ``a%20b``), which
    neither a message nor a read should use.

    >>> from_spark("file:/tmp/in%20put/a+b%2541.csv")
    'file:/tmp/in put/a+b%41.csv'
    """
    return urllib.parse.unquote(uri)


def display_path(uri: str) -> str:
    """A local file (plain path or ``file:`` URI) as a plain path; other URIs as they are.

    >>> display_path("file:///tmp/a.jsonl"), display_path("file:/tmp/a"), display_path("s3a://b/k")
    ('/tmp/a.jsonl', '/tmp/a', 's3a://b/k')
    >>> display_path("FILE:///tmp/a")  # a URI's scheme is case-insensitive (paths.is_local)
    '/tmp/a'
    """
    for prefix in ("file://", "file:"):
        if uri[:len(prefix)].lower() == prefix:
            rest = uri[len(prefix):]
            return rest if rest.startswith("/") else "/" + rest
    return uri
