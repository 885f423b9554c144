"""Read every source into one DataFrame of records (SPEC section 3).

One record per input row, with the columns of :data:`RECORD_COLUMNS`:

    dataset, split, group ("NAME/SPLIT"), id, row, text, label, label_canon, id_num

`id` is a long when every dataset's ids are integers, else a string; `id_num` is the integer id
of a dataset whose ids are all integers (null otherwise), so ids sort as their dataset's type.
`row` is the 0-based row index within the dataset in read order (sources in the order given,
files in path order, rows in file order); it is the id when no id field is given.  It is computed
without `monotonically_increasing_id` as an id and without a global sort: each parse stage numbers
rows within its (file, block) -- a block is the byte range of a file that one task reads, always
read in order -- and one small aggregate per (file, block) gives each block's offset.  The result is
the same for any partitioning, master or number of executors.

Formats: ``.jsonl``/``.ndjson`` and ``.txt`` are read as lines (splittable; the raw line is kept so
`clean` can write kept rows byte-identical), ``.json`` lists are parsed whole per file, ``.csv`` and
``.parquet`` through Spark's own readers (their original columns are kept for `clean`).  Any of the
text formats may be compressed (``.gz``, ``.bz2``; ``.zst`` but for ``.json``).

Bad rows do not raise inside Spark tasks (that would surface as a Py4J traceback): the parse stages
put the problem in the `_lc_err` column and :func:`read_records` raises the first one in read order
as a :class:`~leakcheck_spark.errors.LeakcheckError`, naming the file and line.
"""

from __future__ import annotations

import bz2
import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, TypeVar

from leakcheck_spark import errors, hf
from leakcheck_spark.errors import LeakcheckError, encode_row_error
from leakcheck_spark.labels import canonical_label, display_label, from_typed_string
from leakcheck_spark.options import DEFAULT_SPLIT, Options, Source, require_sources
from leakcheck_spark.paths import spark_uri
from leakcheck_spark.session import is_connect, release, session_conf
from leakcheck_spark.udf import series_udf

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.types import StructType

T = TypeVar("T")

RECORD_COLUMNS = ("dataset", "split", "group", "id", "row", "text", "label", "label_canon",
                  "id_num")

# File extension (after an optional .gz) -> format.
EXTENSIONS = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv",
    ".parquet": "parquet", ".txt": "txt",
}
# A compression ending (read by Spark's Hadoop codecs) -> the formats it may compress.  A .json
# list is decompressed in Python, which has no zstd before 3.14.
COMPRESSIONS = {".gz": ("jsonl", "json", "csv", "txt"), ".bz2": ("jsonl", "json", "csv", "txt"),
                ".zst": ("jsonl", "csv", "txt")}
LINE_FORMATS = ("jsonl", "txt")
# JSONL lines that are comments, as the reference leakcheck accepts them (no JSON value starts so):
# skipped like blank lines, so a comment-only file is an empty input.
JSONL_COMMENTS = ("#", "//")
# Where noleak, reading a file with str.splitlines, breaks a line that Spark's reader (at "\n")
# did not: for noleak sources a line holds a record per piece.  In JSONL only at "\r": a JSON
# string may hold a raw U+2028 (json.dumps(ensure_ascii=False) writes it so), and breaking it
# there would make a valid line two invalid ones, an error here.
_NOLEAK_BREAKS = {"txt": re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]"),
                  "jsonl": re.compile("\r")}
# RFC 4180 quoting ("" inside quotes), as Python's csv module and pandas read and write it;
# Spark's own default escapes with a backslash.
CSV_DIALECT = {"quote": '"', "escape": '"'}
TABULAR_FORMATS = ("csv", "parquet", "table", "hf")
# What read_csv(positions=True) adds to a CSV table's columns: each row's file and block.
CSV_POSITION_COLUMNS = ("_lc_file", "_lc_block")
# What read_csv(flag_malformed=True) adds before them: a row's text when it has more or fewer
# values than the header (Spark's corrupt-record column), else null.
CSV_MALFORMED = "_lc_malformed"
# The row error of such a row; scan() puts its line and counts in (`_malformed_csv_error`).
_MALFORMED_CSV = "{where} has the wrong number of fields"
# How much of a CSV file (decompressed) line_ending looks at, and what it looks for.
_ENDING_SCAN = 1 << 16
# What Spark's readers take for glob syntax in a path (Hadoop's, and its backslash escape).
_GLOB_CHARS = re.compile(r"([{}\[\]*?\\])")
_FIRST_BREAK = re.compile(rb"[\r\n]")
# A source read from the Spark catalog: table:NAME (a Hive metastore or Unity Catalog name).
TABLE_PREFIX = "table:"

# Where noleak looks for a record's text when no field is named, in order (`Source.noleak`).
NOLEAK_FIELDS = ("text", "content", "prompt", "question", "input", "output")

# A Java regex for "has a character that is not whitespace" as Python's str.strip() sees it.
_NON_BLANK = "[^" + "".join(f"\\u{c:04x}" for c in range(0x10000) if chr(c).isspace()) + "]"

# Columns every parse stage produces, besides a tabular source's own columns.
_PARSED_DDL = (
    "_lc_file string, _lc_block long, _lc_line long, _lc_seq long, split string, id string, "
    "id_int boolean, text string, label string, label_canon string, has_label boolean, "
    "has_split boolean, _lc_err string, raw string"
)
# A CSV part's flag for a row that holds a U+FFFD (`replaced_utf8`).
REPLACED_COLUMN = "_lc_fffd"
# How a parse stage names a row's position in messages, by format.
_UNIT = {"jsonl": "line", "txt": "line", "json": "element", "csv": "row", "parquet": "row",
         "table": "row", "hf": "row"}


def file_format(path: str) -> str | None:
    """The format of a file from its name, or None if it is not a supported file.

    >>> file_format("a/b.JSONL.gz"), file_format("x.parquet"), file_format("x.parquet.gz")
    ('jsonl', 'parquet', None)
    >>> file_format("a.csv.bz2"), file_format("a.jsonl.zst"), file_format("a.json.zst")
    ('csv', 'jsonl', None)
    """
    low = path.lower()
    suffix = next((c for c in COMPRESSIONS if low.endswith(c)), "")
    low = low[:len(low) - len(suffix)]
    for ext, fmt in EXTENSIONS.items():
        if low.endswith(ext):
            return fmt if not suffix or fmt in COMPRESSIONS[suffix] else None
    return None


@dataclass
class SourceFrame:
    """One source read but not yet numbered: its parsed rows, per format, and how it was read."""

    source: Source
    index: int
    parts: list[tuple[str, DataFrame]] = field(default_factory=list)  # (format, parsed rows)
    original_columns: dict[str, list[str]] = field(default_factory=dict)  # tabular formats

    def unpersist(self) -> None:
        """Release the cached parsed rows (quietly when Spark is gone: :func:`release`)."""
        release(part for _, part in self.parts)


# A column derived from each record's text: (name, ``pd.Series of texts -> pd.Series``, type).
TextColumn = tuple[str, Callable[["pd.Series"], "pd.Series"], str]


@dataclass(frozen=True)
class Derived:
    """What the read computes from each record's text (keys, digests), and how much text it keeps.

    For the formats parsed in Python (lines, JSON lists) the columns are computed in the worker
    pass that parses the rows, so a text crosses from Python to the JVM once, already cut to
    `keep_chars`, instead of crossing back to Python for a UDF; for the formats Spark reads itself
    (CSV, Parquet, tables) they are the same functions as pandas UDFs over the text column.
    """

    columns: tuple[TextColumn, ...] = ()
    keep_chars: int | None = None  # None keeps the whole text

    def ddl(self) -> str:
        """The added columns as a DDL fragment (``", key binary, fp binary"``)."""
        return "".join(f", {name} {kind}" for name, _, kind in self.columns)

    def add(self, pdf: pd.DataFrame) -> pd.DataFrame:
        """In a worker: the parsed rows `pdf` with the columns added and the texts cut."""
        for name, fn, _ in self.columns:
            pdf[name] = fn(pdf["text"])
        if self.keep_chars is not None:
            n = self.keep_chars
            pdf["text"] = [t[:n] if t is not None and len(t) > n else t for t in pdf["text"]]
        return pdf

    def add_columns(self, df: DataFrame) -> DataFrame:
        """The same on a DataFrame with a `text` column (as pandas UDFs)."""
        import pyspark.sql.functions as F

        for name, fn, kind in self.columns:
            df = df.withColumn(name, series_udf(fn, kind)("text"))
        if self.keep_chars is not None:
            df = df.withColumn("text", F.substring("text", 1, self.keep_chars))
        return df


NOTHING_DERIVED = Derived()


# ---------------------------------------------------------------------------------------------
# Listing files


def list_files(spark: SparkSession, src: Source) -> list[tuple[str, str]]:
    """Every supported file of a source as ``(uri, format)``, sorted by path.

    A directory contributes all supported files below it; a glob its matches; an explicitly named
    file must itself be supported.  Listing goes through Spark, so any Hadoop URI works.
    """
    path = src.path
    if path.startswith(TABLE_PREFIX):
        return [(path[len(TABLE_PREFIX):], "table")]
    if path.startswith(hf.PREFIX):
        return [(path, "hf")]
    try:
        listed = (
            read_inputs(spark).format("binaryFile").option("recursiveFileLookup", "true")
            .load(spark_uri(path)).select("path").collect()
        )
    except Exception as exc:  # noqa: BLE001 - translated or re-raised
        err = _translate(exc)
        if _has_glob(path) and err.message.startswith("no such file"):
            # A file named t[1].jsonl that the pattern t[1].jsonl does not match.
            err.hint = ("the path holds glob characters (*?[{), so it is a pattern: to name a "
                        "file whose name holds them, put a backslash before each (t\\[1\\].jsonl)")
        raise err from None
    files = sorted(r.path for r in listed)
    supported = [(f, fmt) for f in files if (fmt := file_format(f))]
    if len(files) == 1 and not supported and not _has_glob(path):
        raise LeakcheckError(errors.BAD_FORMAT, f"unsupported file type: {path}")
    if not supported:
        raise LeakcheckError(errors.EMPTY_INPUT,
                             f"no records in {src.label}: no non-empty supported input files")
    return supported


def read_inputs(spark: SparkSession) -> DataFrameReader:
    """``spark.read`` for the inputs of a run, whatever the session's settings: a session's
    ``spark.sql.files.ignoreCorruptFiles`` / ``ignoreMissingFiles`` would skip an unreadable
    input (a truncated .gz, a broken Parquet file) or the rest of it without a word; bad input
    is an error here (the reader's options override the session's).  A listed file is given to
    it as `literal` spells it."""
    return spark.read.options(ignoreCorruptFiles="false", ignoreMissingFiles="false")


def literal(path: str) -> str:
    """A file's path as a Spark reader must be given it to read that file: Spark takes a path
    holding any of ``{}[]*?\\`` for a glob pattern (a listed ``a[1].jsonl`` read ``a1.jsonl``
    in its place), and reads one whose glob characters are escaped as the file it names.

    >>> print(literal("file:/d/a[1]{x}*.jsonl"))
    file:/d/a\\[1\\]\\{x\\}\\*.jsonl
    """
    return _GLOB_CHARS.sub(r"\\\1", path)


def _has_glob(path: str) -> bool:
    return any(c in path for c in "*?[{")


def _translate(exc: BaseException) -> LeakcheckError:
    """The LeakcheckError for a Spark failure on bad input; re-raises anything else."""
    err = errors.from_spark_exception(exc)
    if err is None:
        raise exc
    return err


# ---------------------------------------------------------------------------------------------
# Parsing rows (runs inside Python workers)


_MISSING = object()


_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


# A UTF-16 surrogate code point: JSON may spell one alone ("\ud800"), which Python decodes into
# a string that has no UTF-8 form (Arrow, hashing and every writer refuse it).  A pair decodes
# into one character, so any surrogate left in a decoded string is a lone one.
_SURROGATE = re.compile("[\ud800-\udfff]")
# The fields of parse_object's tuple that hold strings from the data, by the flag naming them.
_STRING_FIELDS = ((3, "text"), (1, "id"), (4, "label"), (0, "split"))


def parse_object(obj: object, src: Source) -> tuple:
    """The record fields of one JSON value: (split, id, id_int, text, label, label_canon,
    has_label, has_split, err).  `err` is an encoded row error or None; messages contain
    ``{where}``, which the driver replaces with the row's file and line.
    """
    fields = _parse_object(obj, src)
    for i, flag in _STRING_FIELDS:
        value = fields[i]
        # isascii() is a flag of the string (settles most texts, code, at no cost); else the
        # UTF-8 encoder, which stops at a surrogate, is a few times faster than a regex scan.
        if value is not None and not value.isascii() and (at := _surrogate_at(value)) >= 0:
            return _row_error(
                errors.BAD_FORMAT, f"the {flag} of {{where}} holds a lone UTF-16 surrogate "
                f"(\\u{ord(value[at]):04x} at character {at}): not valid Unicode",
                "a \\uD800-\\uDFFF escape in JSON must be one of a high+low pair; fix or drop "
                "the record")
    return fields


def _surrogate_at(value: str) -> int:
    """The position of the first lone surrogate in `value`, or -1."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return -1


def _parse_object(obj: object, src: Source) -> tuple:
    if src.noleak:
        text = noleak_text(obj, src.text_field)
        if text is _MISSING:
            return _row_error(
                errors.MISSING_FIELD,
                f"field {src.text_field!r} not in {{where}}; fields present: {_fields(obj)}",
            )
        if not isinstance(obj, dict):
            if src.id_field:
                return _row_error(errors.MISSING_FIELD,
                                  f"id field {src.id_field!r} not in {{where}}, which is a "
                                  f"{type(obj).__name__}, not an object")
            return (None, None, False, text, None, None, False, False, None)
    elif not isinstance(obj, dict):
        kind = type(obj).__name__
        return _row_error(errors.BAD_FORMAT, f"{{where}} is not a JSON object ({kind})")
    else:
        text = obj.get(src.text_field, _MISSING)
        if text is _MISSING:
            return _row_error(
                errors.MISSING_FIELD,
                f"field {src.text_field!r} not in {{where}}; fields present: {_fields(obj)}",
                nested_field_hint(src.text_field, obj),
            )
        if text is not None and not isinstance(text, str):
            return _row_error(
                errors.BAD_VALUE,
                f"field {src.text_field!r} in {{where}} is {type(text).__name__}, not a string",
            )
    ident, id_int = None, False
    if src.id_field:
        value = obj.get(src.id_field)
        if value is None and src.id_field in obj:
            return _row_error(errors.MISSING_FIELD, f"id field {src.id_field!r} is null in "
                              "{where}", "every record needs an id")
        if value is None:
            return _row_error(
                errors.MISSING_FIELD,
                f"id field {src.id_field!r} not in {{where}}; fields present: {_fields(obj)}",
                nested_field_hint(src.id_field, obj),
            )
        # An integer id orders numerically as a long; one beyond a long's range (a JSON
        # number has none) is an id like any other text, not a failed cast.
        id_int = type(value) is int and _LONG_MIN <= value <= _LONG_MAX
        ident = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    label, canon, has_label = None, None, False
    if src.label_field:
        value = obj.get(src.label_field, _MISSING)
        has_label = value is not _MISSING
        if has_label:
            label, canon = display_label(value), canonical_label(value)
    split, has_split = None, False
    if src.split_field and src.split is None:
        value = obj.get(src.split_field)
        has_split = src.split_field in obj
        if value is not None:
            split = value if isinstance(value, str) else json.dumps(value)
            if not valid_split(split):
                return _row_error(errors.BAD_VALUE, bad_split_message(src, repr(split)),
                                  BAD_SPLIT_HINT)
    return (split, ident, id_int, text, label, canon, has_label, has_split, None)


# A split from the data must be one -d NAME:SPLIT=... would accept: the group is "NAME/SPLIT", and
# a '/' in it (or nothing after it) makes a group name that reads as something else.
BAD_SPLIT_HINT = ("a split is non-empty and has no '/' (the group is NAME/SPLIT), as in "
                  "-d NAME:SPLIT=SOURCE; fix the split column, or give the split with -d")


def valid_split(split: str) -> bool:
    """True for a split value that can name a group (as `Source` checks `-d NAME:SPLIT`).

    >>> valid_split("train"), valid_split(""), valid_split("a/b")
    (True, False, False)
    """
    return bool(split) and "/" not in split


def invalid_split(split: Column) -> Column:
    """:func:`valid_split`'s opposite as a column rule, for splits read by Spark (null for a
    null split: no value, nothing to check)."""
    return (split == "") | split.contains("/")


def bad_split_message(src: Source, quoted: str) -> str:
    """A row error's message for a bad split value (`quoted`); ``{where}`` comes before it."""
    return f"split field {src.split_field!r} in {{where}} is {quoted}, not a valid split"


def noleak_text(obj: object, field: str | None) -> object:
    """The text of one JSON value as the ``noleak`` tool reads it (`Source.noleak`): with a
    `field`, an object's value of it (``str()`` of a non-string; null is an empty text; absent is
    ``_MISSING``); otherwise :func:`record_text`."""
    if isinstance(obj, dict) and field is not None:
        value = obj.get(field, _MISSING)
        return value if value is None or value is _MISSING or isinstance(value, str) else str(value)
    return record_text(obj)


def record_text(obj: object) -> str:
    """noleak's text of a record without a field: a string as it is; an object's first non-blank
    string among :data:`NOLEAK_FIELDS`, else its non-null values, ``str()``-ed and joined by
    spaces; null an empty text; any other value ``str()``-ed.

    >>> record_text({"id": 3, "prompt": " ", "output": "x"}), record_text({"a": 1, "b": None})
    ('x', '1')
    """
    if isinstance(obj, str):
        return obj
    if obj is None:
        return ""
    if isinstance(obj, dict):
        for name in NOLEAK_FIELDS:
            value = obj.get(name)
            if isinstance(value, str) and value.strip():
                return value
        return " ".join(str(v) for v in obj.values() if v is not None)
    return str(obj)


def nested_field_hint(name: str, present: Iterable[str]) -> str | None:
    """The hint for a missing field `name` that looks like a path into a nested one
    (``meta.text`` where ``meta`` is present), else None (the default hint).

    >>> print(nested_field_hint("meta.text", {"meta": {}, "id": 1}).split(";")[0])
    a field flag names a top-level field: 'meta.text' is not read inside 'meta'
    >>> nested_field_hint("text", {"meta": {}}) is None
    True
    """
    head = name.split(".", 1)[0]
    if "." not in name or head not in present:
        return None
    return (f"a field flag names a top-level field: {name!r} is not read inside {head!r}; "
            "flatten the data first (e.g. pandas.json_normalize, or jq)")


def _row_error(code: str, message: str, hint: str | None = None) -> tuple:
    return (None, None, False, None, None, None, False, False,
            encode_row_error(code, message, hint))


def _fields(obj: object) -> str:
    if not isinstance(obj, dict):
        return f"none (a {type(obj).__name__}, not an object)"
    names = list(obj)
    return ", ".join(map(str, names[:12])) + (", ..." if len(names) > 12 else "") or "(none)"


def _columns() -> dict[str, list]:
    return {c.split()[0]: [] for c in _PARSED_DDL.split(", ")}


def parse_lines(
    batches: Iterator[pd.DataFrame], src: Source, fmt: str, keep_raw: bool,
    derived: Derived = NOTHING_DERIVED,
) -> Iterator[pd.DataFrame]:
    """mapInPandas body for line formats: one output row per input line, blank (and JSONL
    comment) lines included with a null `_lc_seq`, so physical line numbers stay exact across
    blocks; with the `derived` columns.

    Input columns: value (binary), _lc_file, _lc_block, in file order within each block.
    """
    import pandas as pd

    counters: dict[tuple[str, int], list[int]] = {}  # (file, block) -> [line, seq]
    breaks = _NOLEAK_BREAKS[fmt] if src.noleak else None
    for pdf in batches:
        out = _columns()
        for value, file, block in zip(pdf["value"], pdf["_lc_file"], pdf["_lc_block"]):
            pos = counters.setdefault((file, block), [0, 0])
            line_no = pos[0]
            pos[0] += 1
            try:
                line = bytes(value).decode("utf-8")
            except UnicodeDecodeError as exc:
                fields = _row_error(errors.BAD_FORMAT, f"invalid UTF-8 in {{where}} ({exc.reason})")
                seq, line = pos[1], None
                pos[1] += 1
                _append(out, file, block, line_no, seq, fields, None)
                continue
            if line_no == 0 and block == 0 and line.startswith("\ufeff"):
                line = line[1:]
            pieces = (breaks.split(line) if breaks and breaks.search(line) else (line,))
            blank = True
            for piece in pieces:
                stripped = piece.strip()
                if not stripped or (fmt == "jsonl" and stripped.startswith(JSONL_COMMENTS)):
                    continue
                blank = False
                _append(out, file, block, line_no, pos[1], _line_fields(piece, stripped, src, fmt),
                        line if keep_raw else None)
                pos[1] += 1
            if blank:
                _append(out, file, block, line_no, None, (None,) * 9, None)
        yield derived.add(pd.DataFrame(out))


def _line_fields(line: str, stripped: str, src: Source, fmt: str) -> tuple:
    """The parsed fields of one non-blank line (in noleak mode, of a piece of one)."""
    if fmt == "txt" and not src.noleak:
        text = line[:-1] if line.endswith("\r") else line
        return (None, None, False, text, None, None, False, False, None)
    try:
        # noleak parses the stripped line: str.strip() also removes the Unicode whitespace
        # (NBSP, U+3000, ...) that JSON does not allow around a value.
        obj = json.loads(stripped if src.noleak else line)
    except ValueError as exc:
        if fmt == "txt" and src.id_field:
            return _row_error(errors.MISSING_FIELD, f"id field {src.id_field!r} not in {{where}}, "
                              "which is a line of text, not an object")
        if fmt == "txt":  # noleak reads a line that is not JSON as its text
            return (None, None, False, stripped, None, None, False, False, None)
        return _row_error(errors.BAD_FORMAT, f"invalid JSON in {{where}}: {exc}",
                          "each line of a JSON Lines file is one JSON object: fix that line "
                          "(a blank line is allowed)")
    return parse_object(obj, src)


def parse_json_lists(
    batches: Iterator[pd.DataFrame], src: Source, keep_raw: bool,
    derived: Derived = NOTHING_DERIVED,
) -> Iterator[pd.DataFrame]:
    """mapInPandas body for ``.json`` files (each a list of objects, or JSON Lines; read whole by
    binaryFile).

    Input columns: path, content (binary); one output row per list element (or line), with the
    `derived` columns.
    """
    import pandas as pd

    for pdf in batches:
        for file, content in zip(pdf["path"], pdf["content"]):
            out = _columns()
            data = bytes(content)
            try:
                if file.lower().endswith(".gz"):
                    data = gzip.decompress(data)
                elif file.lower().endswith(".bz2"):
                    data = bz2.decompress(data)
                text = data.decode("utf-8-sig")
                items = _json_value(text)
                if not isinstance(items, list) and items is not None:
                    raise ValueError(f"expected a JSON list of objects, got {type(items).__name__}")
            except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError) as exc:
                fields = _row_error(errors.BAD_FORMAT, f"cannot read {{file}}: {exc}")
                _append(out, file, 0, 0, 0, fields, None)
                yield derived.add(pd.DataFrame(out))
                continue
            if items is None:  # JSON Lines in a .json file
                _json_lines(out, file, text, src, keep_raw)
                yield derived.add(pd.DataFrame(out))
                continue
            for i, obj in enumerate(items):
                raw = _json_text(obj) if keep_raw else None
                _append(out, file, 0, i, i, parse_object(obj, src), raw)
            if items:  # an empty list has no rows (and an empty frame no column types)
                yield derived.add(pd.DataFrame(out))


def _json_text(obj: object) -> str:
    """A list element as a JSONL line: its characters as they are, but a lone surrogate in a
    field that is not read (it has no UTF-8 form) as the escape it was written as."""
    text = json.dumps(obj, ensure_ascii=False)
    if text.isascii() or _surrogate_at(text) < 0:
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _json_value(text: str) -> object:
    """The JSON value a .json file holds, or None when it holds JSON Lines (one value per line,
    as Spark's and pandas' JSON writers write .json files, and Hugging Face reads them).

    One object on one line is JSON Lines of one record (a part file of one row); an object over
    several lines (a pretty-printed ``dataset_info.json`` beside the data) is no record list.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # a whole value, then more: the first line of JSON Lines
            return None
        raise
    return None if isinstance(value, dict) and "\n" not in text.strip() else value


def _json_lines(out: dict, file: str, text: str, src: Source, keep_raw: bool) -> None:
    """Append the records of a .json file that holds JSON Lines to `out`, read as a .jsonl file
    is (blank and comment lines skipped); a row error names its line."""
    seq = 0
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(JSONL_COMMENTS):
            continue
        fields = _line_fields(line, stripped, src, "jsonl")
        if fields[-1] is not None:  # the driver names a .json row by its element: name the line
            err = errors.decode_row_error(fields[-1])
            fields = _row_error(err.code, err.message.replace("{where}", f"line {n} of {{file}}",
                                                              1), err.hint)
        _append(out, file, 0, seq, seq, fields, line if keep_raw else None)
        seq += 1


def _append(out: dict, file: str, block: int, line: int, seq: int | None, fields: tuple,
            raw: str | None) -> None:
    out["_lc_file"].append(file)
    out["_lc_block"].append(block)
    out["_lc_line"].append(line)
    out["_lc_seq"].append(seq)
    for name, value in zip(("split", "id", "id_int", "text", "label", "label_canon",
                            "has_label", "has_split", "_lc_err"), fields):
        out[name].append(value)
    out["raw"].append(raw)


def canonical_label_series(values: pd.Series, kind: str) -> pd.Series:
    """Vectorised `canonical_label` for a typed column Spark cast to string (`kind` in KINDS)."""
    import pandas as pd

    return pd.Series(
        [None if v is None else canonical_label(from_typed_string(v, kind)) for v in values],
        index=values.index, dtype=object,
    )


# ---------------------------------------------------------------------------------------------
# Reading one source


def _check_bzip2(spark: SparkSession, files: list[str]) -> None:
    """Raise BAD_FORMAT for a ``.bz2`` file that is not bzip2 data: Hadoop's codec reads one as
    no lines at all, without a word, where a fake ``.gz`` is an error.  Each file's first bytes
    are read on the driver through the Hadoop FileSystem (eight at a time); an empty file is an
    empty file.  Not under Spark Connect, which has no JVM here."""
    if not files or is_connect(spark):
        return
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()

    def head(file: str) -> bytes | None:
        try:
            path = jvm.org.apache.hadoop.fs.Path(file)
            stream = path.getFileSystem(conf).open(path)
        except Exception:  # noqa: BLE001 - the read itself reports an unreadable file
            return None
        try:
            return bytes(stream.readNBytes(3))
        except Exception:  # noqa: BLE001 - as above
            return None
        finally:
            stream.close()

    for file, magic in zip(files, per_file(head, files)):
        if magic and magic != b"BZh":
            raise LeakcheckError(
                errors.BAD_FORMAT, f"cannot read {errors.display_path(file)}: its name ends in "
                ".bz2, but it is not bzip2 data", "name the file for what it holds (or compress "
                "it with bzip2)")


def per_file(fn: Callable[[str], T], files: list[str]) -> list[T]:
    """`fn` of each of `files`, in order, eight at a time: each is a driver-side open (a remote
    one on object storage), and thousands of files one after another would keep the run waiting
    before its first job."""
    if len(files) < 2:
        return [fn(f) for f in files]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(fn, files))


def need_text_field(src: Source, formats: Sequence[str]) -> None:
    """Refuse a source without a text field when one of its `formats` needs one (all but .txt).

    Raises:
        LeakcheckError(LC_E_MISSING_FIELD).
    """
    if src.text_field is None and not src.noleak and any(f != "txt" for f in formats):
        raise LeakcheckError(
            errors.MISSING_FIELD, f"no text field given for {src.label}",
            "pass --text-field NAME (or -o NAME.text=FIELD); only .txt sources need none",
        )


def check_text_fields(sources: Sequence[Source]) -> None:
    """:func:`need_text_field` for the sources whose path alone gives their format (one file,
    ``hf:``, ``table:``), before a session is started for nothing; a directory or glob is
    checked once listed."""
    for src in sources:
        fmt = ("table" if src.path.startswith(TABLE_PREFIX) else
               "hf" if src.path.startswith(hf.PREFIX) else
               None if _has_glob(src.path) else file_format(src.path))
        if fmt is not None:
            need_text_field(src, [fmt])


def read_source(spark: SparkSession, src: Source, index: int, keep_raw: bool = False,
                derived: Derived = NOTHING_DERIVED) -> SourceFrame:
    """Read one source's files into parsed (not yet numbered) rows, one part per format, with
    the `derived` columns (e.g. keys); the parts are then persisted, so the scan and everything
    after it parse the input once.
    """
    from pyspark import StorageLevel

    files = list_files(spark, src)
    need_text_field(src, [f for _, f in files])
    if src.id_field and not src.noleak and any(f == "txt" for _, f in files):
        raise LeakcheckError(
            errors.MISSING_FIELD, f"id field {src.id_field!r} given for {src.label}, but a .txt "
            "line has no fields", f"switch it off for this dataset with -o {src.name}.id= "
            "(its ids are then the row index)",
        )
    _check_bzip2(spark, [uri for uri, _ in files if uri.lower().endswith(".bz2")])
    frame = SourceFrame(src, index)
    by_format: dict[str, list[str]] = {}
    for uri, fmt in files:
        by_format.setdefault(fmt, []).append(uri)
    for fmt, files in sorted(by_format.items()):
        try:
            with session_conf(spark, _listing_conf(spark)):
                if fmt in LINE_FORMATS:
                    part = _read_lines(spark, files, src, fmt, keep_raw, derived)
                elif fmt == "json":
                    part = _read_json_lists(spark, files, src, keep_raw, derived)
                else:
                    part = derived.add_columns(_read_tabular(spark, files, src, fmt, frame))
        except LeakcheckError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated or re-raised
            raise _translate(exc) from None
        frame.parts.append((fmt, part.persist(StorageLevel.MEMORY_AND_DISK)))
    return frame


_LISTING = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def _listing_conf(spark: SparkSession) -> dict[str, str]:
    """The setting under which a source's listed files are handed to Spark's readers.  Spark
    looks each given path up again, in a job of one task per path (up to 10,000) when there are
    more than 32: 5,000 small files cost 14 s of tasks in local mode.  Two tasks per core of the
    session (at least 8) spread the same lookups over fewer tasks.  A session that sets it keeps
    its own; none under Spark Connect, which resolves the read later, on its server."""
    if is_connect(spark) or spark.conf.get(_LISTING, None) is not None:
        return {}
    return {_LISTING: str(max(8, 2 * spark.sparkContext.defaultParallelism))}


def _read_lines(spark: SparkSession, files: list[str], src: Source, fmt: str,
                keep_raw: bool, derived: Derived) -> DataFrame:
    import pyspark.sql.functions as F

    # lineSep "\n": a "\r" stays in the line, so a kept CRLF row is written back byte-identical.
    # The value is cast to binary so invalid UTF-8 reaches Python as bytes (and is reported).
    lines = read_inputs(spark).option("lineSep", "\n").text(list(map(literal, files))).select(
        F.col("value").cast("binary").alias("value"),
        *_file_position(),
    )
    return lines.mapInPandas(lambda it: parse_lines(it, src, fmt, keep_raw, derived),
                             _PARSED_DDL + derived.ddl())


def _read_json_lists(spark: SparkSession, files: list[str], src: Source,
                     keep_raw: bool, derived: Derived) -> DataFrame:
    blobs = (read_inputs(spark).format("binaryFile").load(list(map(literal, files)))
             .select("path", "content"))
    return blobs.mapInPandas(lambda it: parse_json_lists(it, src, keep_raw, derived),
                             _PARSED_DDL + derived.ddl())


def _read_tabular(spark: SparkSession, files: list[str], src: Source, fmt: str,
                  frame: SourceFrame) -> DataFrame:
    import pyspark.sql.functions as F
    from pyspark.sql import types as T

    positions: tuple[str, ...] = ()  # columns the reader adds after the table's own
    if fmt == "csv":
        df = read_csv(spark, files, positions=True, flag_malformed=True)
        positions = (CSV_MALFORMED, *CSV_POSITION_COLUMNS)
    elif fmt == "table":
        df = _catalog_table(spark, files[0], src)
    elif fmt == "hf":
        df = hf.read(spark, src)
        positions = hf.POSITION_COLUMNS
    else:
        df = read_parquet(spark, files, src)
    columns = [c for c in df.columns if c not in positions]
    if fmt == "csv" and renamed_by_spark(columns):
        check_csv_header(spark, files[0], None)
    frame.original_columns[fmt] = columns
    schema = {f.name: f.dataType for f in df.schema.fields}
    where = f"{src.path} (columns: {', '.join(columns[:12])})"

    def need(flag: str, name: str | None) -> None:
        if name is not None and name not in schema:
            if fmt == "csv":
                check_csv_header(spark, files[0], name)
            raise LeakcheckError(errors.MISSING_FIELD, f"{flag} {name!r} not in {where}",
                                 nested_field_hint(name, schema))

    need("text field", src.text_field)
    need("id field", src.id_field)
    need("label field", src.label_field)
    if src.split is None and fmt != "hf":  # an HF dataset's splits are its own
        need("split field", src.split_field)
    candidates = []
    if src.noleak and src.text_field is None:
        candidates = [c for c in NOLEAK_FIELDS
                      if c in schema and isinstance(schema[c], (T.StringType, T.NullType))]
        if not candidates:
            raise LeakcheckError(
                errors.MISSING_FIELD, f"no text column in {where}: none of "
                f"{', '.join(NOLEAK_FIELDS)} is a string column", "name it with --field NAME")
    elif not src.noleak and not isinstance(schema[src.text_field],
                                           (T.StringType, T.NullType)):
        raise LeakcheckError(
            errors.BAD_VALUE,
            f"field {src.text_field!r} of {src.path} is {schema[src.text_field].simpleString()}, "
            "not a string",
        )

    # The table's own columns travel under internal names (a user column may be called "split"
    # or "id"); `original_column` gives them back their names when kept rows are written.
    orig = [named(c).alias(original_column(i)) for i, c in enumerate(columns)]
    internal = [original_column(i) for i in range(len(columns))]
    if fmt == "hf":  # the loader numbered the rows: the split is the "block"
        df = df.select(*orig, *hf.POSITION_COLUMNS)
    else:
        df = df.select(*orig, *positions) if positions else df.select(*orig, *_file_position())
        # Not an id: within one (file, block) -- always read by one task, in order -- it
        # increases with the row, so `_lc_seq - min(_lc_seq)` over the block is the row's ordinal
        # (scan()).  The parts are cached before the scan, so every later use sees the same values.
        df = df.withColumn("_lc_seq", F.monotonically_increasing_id())
    df = df.withColumn("_lc_line", F.col("_lc_seq"))

    def col(name: str):  # noqa: ANN202 - a Column
        return F.col(original_column(columns.index(name)))

    null_str = F.lit(None).cast("string")
    if candidates:  # noleak's rule: the first non-blank candidate, else all values joined
        blank = F.lit(None).cast("string")
        text = F.coalesce(
            *[F.when(col(c).rlike(_NON_BLANK), col(c)).otherwise(blank) for c in candidates],
            F.concat_ws(" ", *[col(c).cast("string") for c in columns]))
    else:
        text = col(src.text_field).cast("string")
    if src.id_field:
        id_type = schema[src.id_field]
        ident = col(src.id_field).cast("string")
        if isinstance(id_type, T.IntegralType):
            id_int = F.lit(True)
        elif isinstance(id_type, T.DecimalType) and id_type.scale == 0:
            # Whole numbers (Parquet's uint64 reads as decimal(20,0)): integer ids where every
            # one fits 64 bits, as for a JSON number.
            id_int = col(src.id_field).between(_LONG_MIN, _LONG_MAX)
        else:  # CSV values are strings, as in the file
            id_int = F.lit(False)
        err = F.when(
            ident.isNull(),
            F.lit(encode_row_error(errors.MISSING_FIELD,
                                   f"id field {src.id_field!r} is empty in {{where}}")),
        )
    else:
        ident, id_int, err = null_str, F.lit(False), null_str
    if src.label_field:
        kind = _label_kind(schema[src.label_field])
        raw_label = col(src.label_field).cast("string")
        canon = series_udf(lambda s: canonical_label_series(s, kind), "string")(raw_label)
        label, has_label = raw_label, raw_label.isNotNull()
    else:
        label, canon, has_label = null_str, null_str, F.lit(False)
    if fmt == "hf" and src.split is None:
        split, has_split = F.col("_lc_split"), F.lit(True)
    elif src.split_field and src.split is None:
        split, has_split = col(src.split_field).cast("string"), F.lit(True)
        # The value quoted as parse_object's repr() does it (the same for a value without
        # quotes or backslashes; the check itself is exact).
        prefix, suffix = encode_row_error(errors.BAD_VALUE, bad_split_message(src, "\0"),
                                          BAD_SPLIT_HINT).split("\0")
        bad_split = F.when(invalid_split(split),
                           F.concat(F.lit(prefix + "'"), split, F.lit("'" + suffix)))
        err = F.coalesce(err, bad_split)
    else:
        split, has_split = null_str, F.lit(False)
    replaced = []
    if fmt == "csv":
        replaced = [replaced_utf8(columns, internal), CSV_MALFORMED]
        # Before any other problem of the row: its values are not in their columns.
        err = F.coalesce(F.when(F.col(CSV_MALFORMED).isNotNull(), F.lit(
            encode_row_error(errors.BAD_FORMAT, _MALFORMED_CSV, errors.CSV_FIELDS_HINT))), err)
    return df.select(
        *internal, "_lc_file", "_lc_block", "_lc_line", "_lc_seq",
        split.alias("split"), ident.alias("id"), id_int.alias("id_int"), text.alias("text"),
        label.alias("label"), canon.alias("label_canon"), has_label.alias("has_label"),
        has_split.alias("has_split"), err.alias("_lc_err"), null_str.alias("raw"), *replaced,
    )


def replaced_utf8(names: list[str], internal: list[str]) -> Column:
    """The `_lc_fffd` column of a CSV part: true for a row that holds a U+FFFD in any value
    (every row, when a header name holds one), else null.

    Spark's CSV reader decodes with Java's UTF-8 decoder, which puts a U+FFFD in place of each
    invalid byte sequence, silently (`clean` would write the altered rows).  A U+FFFD is also a
    character that valid UTF-8 may hold (EF BF BD), so a row with one only makes its file a
    suspect: :func:`scan` looks at the bytes of such files (:func:`invalid_utf8`).  The test is a
    byte search over the values the cached part holds anyway, in the pass that fills the cache,
    so valid files cost no extra job.
    """
    import operator
    from functools import reduce

    import pyspark.sql.functions as F

    if any("\ufffd" in name for name in names):
        return F.lit(True).alias(REPLACED_COLUMN)
    found = reduce(operator.or_, [F.col(c).contains("\ufffd") for c in internal])
    return F.when(found, F.lit(True)).alias(REPLACED_COLUMN)


def read_csv(spark: SparkSession, files: str | list[str], positions: bool = False,
             flag_malformed: bool = False, patterns: bool = False) -> DataFrame:
    """CSV files with a header, as the sources read them: every value a string, as in the file.

    multiLine: quoted newlines are part of a value.  Spark takes the column names from the first
    file's header and applies them to every file by position: enforceSchema=False checks each
    file's header against them, so a file whose columns differ is an error naming it, not values
    read into wrong columns.  A row with more or fewer values than the header (Spark's default
    drops the extra values or fills in nulls, silently) fails the read (FAILFAST, whose message
    quotes the row but names neither file nor line); with `flag_malformed` it is read, and its
    text is in the column :data:`CSV_MALFORMED` (null in every other row), which comes after the
    table's own columns: Spark's corrupt-record column, set in the same parse, so that the
    sources' `scan` can name the row's line.  A UTF-8 BOM before the header is not part of the
    first name.

    Line endings: each file is read with the one it ends its first line with (`line_ending`) as
    Spark's lineSep.  Left to detect it, Spark's parser turns a CRLF inside a quoted value of a
    CRLF file into LF; told it, it keeps every value byte for byte.  Files that end their lines
    differently are read apart (one scan each) and put together.  `positions`: each row also
    has its file and block (:data:`CSV_POSITION_COLUMNS`), which Spark's ``_metadata`` gives
    only before the parts are put together.  `files` are files as they are named (`literal`),
    or with `patterns`, glob patterns.  Spark's multi-line CSV reader finds a file whose path
    holds glob characters only when it is given the columns (its inference globs the path
    again, escaped or not): for such a file they are read from its header here, named as Spark
    names them (`_spark_names`).
    """
    from pyspark.sql import types as T

    files = [files] if isinstance(files, str) else files
    by_ending = _by_line_ending(spark, files)
    mode = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CSV_MALFORMED} if (
        flag_malformed) else {"mode": "FAILFAST"}

    def read(ending: str | None, part: list[str], schema: object = None) -> DataFrame:
        # A reader of its own per part: an option set on a reader stays set, and a part whose
        # ending is unknown must not inherit the previous part's lineSep.
        r = read_inputs(spark).options(header=True, multiLine=True, encoding="UTF-8",
                                       enforceSchema=False, **mode, **CSV_DIALECT)
        if ending is not None:
            r = r.option("lineSep", ending)
        df = (r if schema is None else r.schema(schema)).csv(
            part if patterns else list(map(literal, part)))
        return df.select("*", *_file_position()) if positions else df

    (ending, first), *others = by_ending.items()
    # Spark's inference cannot find a file with glob characters: its header names the columns.
    own_header = not patterns and any(_GLOB_CHARS.search(f) for f in first)
    if own_header:
        names = _csv_header(spark, first[0], bom=True)
        if not names:
            raise LeakcheckError(errors.IO, f"cannot read the header of "
                                 f"{errors.display_path(first[0])}")
        columns = _spark_names(names, case_sensitive(spark))
    else:
        df = read(ending, first)
        columns = df.columns[:len(df.columns) - len(CSV_POSITION_COLUMNS) * positions]
    # The first file's columns, which each other part's headers are checked against (every
    # value a string: nothing is inferred).
    schema = T.StructType([T.StructField(c, T.StringType()) for c in columns])
    # Spark names an empty header name _cI (as pandas' to_csv writes the index's), and then
    # fails its own header check against that name: read with the header's names as the schema.
    if any(c == f"_c{i}" for i, c in enumerate(columns)):
        # A pattern's first file (the header every file of the read must have).
        file = next(iter(input_files(df)), None) if patterns else files[0]
        header = None if file is None else _csv_header(spark, file)
        if header is not None and len(header) == len(columns) and header.count("") == 1:
            schema = T.StructType([
                T.StructField("" if c == f"_c{i}" and not h else c, T.StringType())
                for i, (c, h) in enumerate(zip(columns, header))])
    if flag_malformed:  # the header check leaves the corrupt-record column out
        schema = schema.add(CSV_MALFORMED, T.StringType())
    if flag_malformed or schema.names != columns or own_header:
        df = read(ending, first, schema)
    for ending, part in others:
        df = df.unionAll(read(ending, part, schema))
    names = [c.lstrip("\ufeff") for c in columns] + [CSV_MALFORMED] * flag_malformed
    return df.toDF(*names, *CSV_POSITION_COLUMNS) if positions else df.toDF(*names)


def _file_position() -> list:
    """The file and block of each row of a file scan (``_lc_file``, ``_lc_block``: the names
    :data:`CSV_POSITION_COLUMNS` gives them too)."""
    import pyspark.sql.functions as F

    return [F.col("_metadata.file_path").alias("_lc_file"),
            F.col("_metadata.file_block_start").alias("_lc_block")]


def _by_line_ending(spark: SparkSession, files: list[str]) -> dict[str | None, list[str]]:
    """`files` grouped by their `line_ending` (in the order each ending first appears), each
    group in the order given: the parts a CSV read uses one Spark lineSep for."""
    by_ending: dict[str | None, list[str]] = {}
    for file, ending in zip(files, per_file(lambda f: line_ending(spark, f), files)):
        by_ending.setdefault(ending, []).append(file)
    return by_ending


def line_ending(spark: SparkSession, file: str) -> str | None:
    """The line ending of CSV `file` as Spark's parser would detect it: what the first CR or LF
    in its first 64 KiB (decompressed) starts, CRLF, CR or LF (as a string).  None when
    there is none there or the file cannot be opened (the read reports it): Spark then detects
    it itself.

    Read on the driver through the Hadoop FileSystem and the codecs Spark reads the file with;
    a Spark Connect client, which has no JVM, asks its server for the file's first line instead
    (`_ending_by_query`).
    """
    if is_connect(spark):
        return _ending_by_query(spark, file)
    jvm = spark.sparkContext._jvm
    try:  # Spark's own codec streams: Hadoop's zstd codec needs a native library
        stream = jvm.org.apache.spark.io.HadoopCodecStreams.createInputStream(
            spark.sparkContext._jsc.hadoopConfiguration(), jvm.org.apache.hadoop.fs.Path(file))
    except Exception:  # noqa: BLE001 - the read itself reports an unreadable file
        return None
    try:
        head = b""
        while len(head) < _ENDING_SCAN:
            chunk = bytes(stream.readNBytes(4096))
            head += chunk
            m = _FIRST_BREAK.search(head)
            if m and (m.group() == b"\n" or m.end() < len(head) or not chunk):
                return "\r\n" if head[m.start():m.start() + 2] == b"\r\n" else m.group().decode()
            if not chunk:
                return None
    except Exception:  # noqa: BLE001 - a codec missing or a corrupt file: the read reports it
        return None
    finally:
        stream.close()
    return None


def _ending_by_query(spark: SparkSession, file: str) -> str | None:
    """`line_ending` through Spark queries (for a Spark Connect client, which has no JVM).

    The first line of `file` of at most 64 KiB, as Spark splits lines at LF (Hadoop's line
    reader passes over a longer one without holding it, and gives the next: one ending per
    file), ends with CRLF if it ends with CR, with a lone CR if it holds one before that, else
    with LF.  When there is no such line (a file of lone CRs is one line), the first two parts
    of at most 64 KiB split at CR tell it: a lone CR ends the first unless the second starts
    with LF.  None when neither tells (Spark's own detection then reads the file).
    """
    lines = _first_lines(spark, file, "\n", 1, _ENDING_SCAN)
    if lines:
        cr = lines[0].find("\r")
        return "\n" if cr < 0 else "\r\n" if cr == len(lines[0]) - 1 else "\r"
    parts = _first_lines(spark, file, "\r", 2, _ENDING_SCAN)
    if not parts or "\n" in parts[0]:
        return None
    return "\r\n" if len(parts) > 1 and parts[1].startswith("\n") else "\r"


def _first_lines(spark: SparkSession, file: str, sep: str = "\n", n: int = 1,
                 max_length: int | None = None) -> list[str]:
    """The first `n` lines of `file` split at `sep` (which they leave out); with `max_length`,
    the first of at most that many bytes (Hadoop's line reader passes over longer ones without
    holding them).  None of them when the file is empty or cannot be read (the read reports
    it).  One partition's lines, in file order: a file's first split comes first."""
    reader = read_inputs(spark).option("lineSep", sep)
    if max_length is not None:
        reader = reader.option("mapreduce.input.linerecordreader.line.maxlength", max_length)
    try:
        return [r.value for r in reader.text(literal(spark_uri(file))).limit(n).collect()]
    except Exception:  # noqa: BLE001 - the read itself reports an unreadable file
        return []


def case_sensitive(spark: SparkSession) -> bool:
    """Whether Spark tells column names apart by case (``spark.sql.caseSensitive``, off by
    default)."""
    return spark.conf.get("spark.sql.caseSensitive", "false").lower() == "true"


def read_parquet(spark: SparkSession, files: list[str], src: Source, patterns: bool = False,
                 ) -> DataFrame:
    """The Parquet files of `src` (files or directories) with the union of their columns,
    whatever ``spark.sql.parquet.mergeSchema`` says: Spark's default reads every file with the
    columns of the first one by path, so a column only other files have would be left out of
    kept rows, and a field only they have would be "missing".

    Columns are matched by name (by Spark's case rule); a file without a column reads null
    there.  Their order: the first file's (by path), then each new one in the path order of the
    file that first has it.  Merging reads every file's footer (one Spark job).  `files` are
    named as they are (`literal`), or with `patterns`, glob patterns.

    Raises:
        LeakcheckError: BAD_FORMAT when two columns differ only in case (which Spark cannot tell
            apart unless spark.sql.caseSensitive is set), or when a file stores a column as a
            type that no earlier file's type can be read as (naming that file).
    """
    def reader() -> DataFrameReader:  # a new one each time: options stick to a reader
        return read_inputs(spark)

    files = files if patterns else list(map(literal, files))
    try:
        try:
            return reader().option("mergeSchema", "true").parquet(*files)
        except Exception as exc:  # noqa: BLE001 - handled below or re-raised
            if "CANNOT_MERGE_SCHEMAS" not in str(exc):
                raise
        # Spark merges no two types (not even int and bigint, which its reader reads as one):
        # merge here, widening numbers as the reader does, or name the file that clashes.
        listing = input_files(reader().option("mergeSchema", "false").parquet(*files))
        mid = len(listing) // 2  # all of them together just failed: start from the halves
        schema = (_merge_into(spark, _merge_into(spark, None, listing[:mid]), listing[mid:])
                  if mid else _merge_into(spark, None, listing))
        return reader().schema(schema).parquet(*files)
    except LeakcheckError:
        raise
    except Exception as exc:  # noqa: BLE001 - translated or re-raised
        m = re.search(r"\[COLUMN_ALREADY_EXISTS\] The column `([^`]*)`", str(exc))
        if m is None:
            raise
        raise LeakcheckError(
            errors.BAD_FORMAT, f"the columns of {src.path} include two named {m.group(1)!r} "
            "but for case, which Spark does not tell apart by default",
            "read them as two columns with --conf spark.sql.caseSensitive=true") from None


def _merge_into(spark: SparkSession, base: StructType | None, files: list[str]) -> StructType:
    """The columns of `base` merged with those of the Parquet `files` (in path order), as
    :func:`read_parquet` describes them, columns of several types read as one that holds them
    all (:func:`_wider`: the widest integer, double, a decimal with room for both).

    Spark merges each run of files whose types agree in one job; a run it refuses is halved, so
    a source with one clash costs about 2 log2(files) jobs, not one per file.

    Raises:
        LeakcheckError: BAD_FORMAT naming the first file with a column that cannot be read as
            the type the files before it gave it.
    """
    try:
        schema = (read_inputs(spark).option("mergeSchema", "true")
                  .parquet(*map(literal, files)).schema)
    except Exception as exc:  # noqa: BLE001 - halved below or re-raised
        if "CANNOT_MERGE_SCHEMAS" not in str(exc) or len(files) == 1:
            raise
    else:
        merged, clash = _merge_fields(spark, base, schema)
        if clash is None:
            return merged
        if len(files) == 1:
            name, was, got = clash
            raise LeakcheckError(
                errors.BAD_FORMAT, f"cannot read {errors.display_path(files[0])}: its column "
                f"{name!r} is {got}, but {was} in the files of the source before it (by path)",
                errors.TYPE_CLASH_HINT)
    mid = len(files) // 2
    return _merge_into(spark, _merge_into(spark, base, files[:mid]), files[mid:])


def _merge_fields(spark: SparkSession, base: StructType | None, schema: StructType,
                  ) -> tuple[StructType, tuple[str, str, str] | None]:
    """`base` with the columns of `schema` merged in (new ones last), and None; or, when a
    column's types cannot be merged, ``(name, type in base, type in schema)``."""
    from pyspark.sql import types as T

    if base is None:
        return schema, None
    case = case_sensitive(spark)
    fields = {(f.name if case else f.name.lower()): f for f in base.fields}
    for f in schema.fields:
        key = f.name if case else f.name.lower()
        if key not in fields:
            fields[key] = f
            continue
        kind = _wider(fields[key].dataType, f.dataType, case)
        if kind is None:
            return base, (f.name, fields[key].dataType.simpleString(), f.dataType.simpleString())
        fields[key] = T.StructField(fields[key].name, kind, True)
    return T.StructType(list(fields.values())), None


def _wider(a: object, b: object, case: bool = True) -> object | None:
    """The type both Parquet column types `a` and `b` can be read as, or None.

    Integers read as the widest, float as double, decimals as one with the most digits before
    the point and the most after it (Spark's reader reads a decimal, whether stored as int32,
    int64 or bytes, as any decimal that keeps both; none holds more than 38 digits).  The
    fields of a struct are matched by name, by case only if `case` (Spark's reader matches
    nested names by its case rule, as top-level ones).  TIMESTAMP and TIMESTAMP_NTZ are not
    merged: Spark reads a file's stored value as either, but as its UTC wall clock, not in the
    session time zone as a cast does, so one file's values would shift.

    >>> from pyspark.sql import types as T
    >>> _wider(T.IntegerType(), T.LongType()), _wider(T.FloatType(), T.DoubleType())
    (LongType(), DoubleType())
    >>> _wider(T.DecimalType(10, 2), T.DecimalType(12, 6))
    DecimalType(14,6)
    >>> _wider(T.LongType(), T.StringType()) is None
    True
    """
    from pyspark.sql import types as T

    if a == b:
        return a
    ints = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
    for group in (ints, (T.FloatType, T.DoubleType)):
        if isinstance(a, group) and isinstance(b, group):
            return max(a, b, key=lambda t: [isinstance(t, g) for g in group].index(True))
    if isinstance(a, T.DecimalType) and isinstance(b, T.DecimalType):
        scale = max(a.scale, b.scale)
        digits = max(a.precision - a.scale, b.precision - b.scale) + scale
        return T.DecimalType(digits, scale) if digits <= _DECIMAL_DIGITS else None
    if isinstance(a, T.StructType) and isinstance(b, T.StructType):
        merged = {(f.name if case else f.name.lower()): f for f in a.fields}
        for f in b.fields:
            key = f.name if case else f.name.lower()
            kind = _wider(merged[key].dataType, f.dataType, case) if key in merged else f.dataType
            if kind is None:
                return None
            merged[key] = T.StructField(merged[key].name if key in merged else f.name, kind, True)
        return T.StructType(list(merged.values()))
    if isinstance(a, T.ArrayType) and isinstance(b, T.ArrayType):
        kind = _wider(a.elementType, b.elementType, case)
        return None if kind is None else T.ArrayType(kind, True)
    if isinstance(a, T.MapType) and isinstance(b, T.MapType):
        key, value = _wider(a.keyType, b.keyType, case), _wider(a.valueType, b.valueType, case)
        return None if key is None or value is None else T.MapType(key, value, True)
    return None


_DECIMAL_DIGITS = 38  # the most digits a Spark decimal holds


def _csv_header(spark: SparkSession, file: str, bom: bool = False) -> list[str] | None:
    """The names in the header line of CSV `file` (a BOM taken off unless `bom`, as Spark's
    reader keeps it; the line ends where the read ends it, `line_ending`), or None if
    unreadable."""
    import csv

    first = _first_lines(spark, file, line_ending(spark, file) or "\n")
    if not first:
        return None
    line = first[0] if bom else first[0].lstrip("\ufeff")
    try:
        return next(csv.reader([line.rstrip("\r")]), [])
    except csv.Error:  # a lone CR in an LF file's header: the read names what is wrong
        return None


def _spark_names(header: list[str], case: bool) -> list[str]:
    """The column names Spark's CSV reader gives a `header`: ``_cI`` for an empty name, NAMEI
    for a name the header repeats (by case too unless `case`), I the position.

    >>> _spark_names(["id", "", "Func", "func", "x"], False)
    ['id', '_c1', 'Func2', 'func3', 'x']
    """
    fold = (lambda n: n) if case else str.lower
    counts: dict[str, int] = {}
    for name in header:
        counts[fold(name)] = counts.get(fold(name), 0) + 1
    return [f"_c{i}" if not name else f"{name}{i}" if counts[fold(name)] > 1 else name
            for i, name in enumerate(header)]


def input_files(df: DataFrame) -> list[str]:
    """The files `df` reads (its path may be a pattern), as the user names them (decoded from
    Spark's URIs), in path order."""
    return sorted(map(errors.from_spark, df.inputFiles()))


def renamed_by_spark(columns: list[str]) -> bool:
    """Whether a CSV read's `columns` may hold a header name Spark renamed: it names the i-th
    column of a repeated name NAME + i (then `check_csv_header` looks at the header).

    >>> renamed_by_spark(["id", "func1", "func2"]), renamed_by_spark(["id", "func"])
    (True, False)
    """
    return any(c.endswith(str(i)) and c != str(i) for i, c in enumerate(columns))


def check_csv_header(spark: SparkSession, file: str, name: str | None) -> None:
    """Raise BAD_FORMAT if the header of CSV `file` names column `name` (None: any column) more
    than once.

    Spark renames repeated header names by position (``func,func`` reads as ``func0, func1``), so
    a field named by a flag is then "not in" the columns, and any repeat fails the read later
    with "CSV header does not conform to the schema".  Called only once a field is missing or a
    column looks renamed: it reads the header line (one row), and a message that names the repeat
    says what to fix.
    """
    header = _csv_header(spark, file)
    if header is None:
        return
    case = case_sensitive(spark)
    fold = (lambda h: h) if case else str.lower
    if name is None:  # the first name that is repeated, if any
        seen: set[str] = set()
        again = next((h for h in header if fold(h) in seen or seen.add(fold(h))), None)
        if again is None:
            return
        name = next(h for h in header if fold(h) == fold(again))  # as first written
    same = [h for h in header if fold(h) == fold(name)]
    if len(same) > 1:
        raise LeakcheckError(
            errors.BAD_FORMAT, f"the header of {errors.display_path(file)} repeats the column "
            f"{name!r}" + (f" ({', '.join(same)})" if name else "") + ": its columns cannot be "
            "told apart",
            "give each column of the header its own name")


def read_table(spark: SparkSession, name: str, src: Source) -> DataFrame:
    """The catalog table `name` of ``table:NAME`` source `src`.

    Raises:
        LeakcheckError: LC_E_BAD_SPEC for a name Spark cannot parse (or resolve as one), LC_E_IO
            for a table that does not exist.
    """
    try:
        return read_inputs(spark).table(name)
    except Exception as exc:  # noqa: BLE001 - translated or re-raised
        text = str(exc)
        if not name.strip() or any(k in text for k in (
                "PARSE_", "ParseException", "REQUIRES_SINGLE_PART_NAMESPACE",
                "INVALID_IDENTIFIER", "IDENTIFIER_TOO_MANY_NAME_PARTS")):
            raise LeakcheckError(errors.BAD_SPEC, f"bad table name {name!r} ({src.label})",
                                 "give table:NAME, NAME as [catalog.]schema.table (quote a part "
                                 "with `backticks` if it holds dots or spaces)") from None
        if "TABLE_OR_VIEW_NOT_FOUND" in text or "not found" in text.lower():
            raise LeakcheckError(errors.IO, f"no such table: {name} ({src.label})",
                                 "check the name with SHOW TABLES (catalog.schema.table "
                                 "names work too)") from None
        raise _translate(exc) from None


def _catalog_table(spark: SparkSession, name: str, src: Source) -> DataFrame:
    """A catalog table, checked to be backed by files: rows are numbered by their position in
    the table's files (path, then offset), which needs Spark's ``_metadata`` file columns."""
    df = read_table(spark, name, src)
    try:
        _ = df.select("_metadata.file_path", "_metadata.file_block_start").schema
    except Exception:  # noqa: BLE001 - a view or a table that is not backed by files
        raise LeakcheckError(
            errors.USAGE, f"table {name} ({src.label}) is not backed by files (a view, or a "
            "JDBC or in-memory table), so its rows have no stable order",
            "write it to a file-based table (parquet, Delta) or to files, and read that") from None
    return df


def original_column(i: int) -> str:
    """The internal name of a table's i-th own column."""
    return f"_lc_o{i}"


def named(name: str) -> Column:
    """The column called `name`, whatever it holds: ``a.b`` is not field b of a, and a
    backtick is one (as a table's or a JSON object's own columns may be called)."""
    import pyspark.sql.functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _label_kind(data_type: object) -> str:
    from pyspark.sql import types as T

    if isinstance(data_type, T.BooleanType):
        return "bool"
    if isinstance(data_type, T.IntegralType):
        return "int"
    if isinstance(data_type, (T.FloatType, T.DoubleType, T.DecimalType)):
        return "float"
    return "str"


# ---------------------------------------------------------------------------------------------
# Numbering rows and checking the whole input


@dataclass(frozen=True)
class Blocks:
    """What the one scan of the input found: per (source, file, block) offsets, and the datasets
    whose ids are all integers (row indexes, or integer id fields)."""

    table: list[tuple[int, str, int, int, int, int]]  # src, file, block, min_seq, row_base, end
    datasets: frozenset[str]
    int_datasets: frozenset[str]

    @property
    def ids_are_ints(self) -> bool:
        """True when every id is an integer: then the id column is a long, else a string."""
        return self.int_datasets == self.datasets


def scan(spark: SparkSession, frames: list[SourceFrame], opts: Options) -> Blocks:
    """One Spark job over every source: row counts per block, the first bad row, field presence.

    Raises:
        LeakcheckError: the first bad row in read order (or an empty source, or a label/split
            field present in no row).
    """
    import pyspark.sql.functions as F

    stats = None
    for frame in frames:
        for fmt, part in frame.parts:
            s = part.select(
                F.lit(frame.index).alias("src"), F.lit(fmt).alias("fmt"), "_lc_file", "_lc_block",
                "_lc_line", "_lc_seq", "_lc_err", "has_label", "has_split", "id_int",
                F.col("text").isNotNull().alias("has_text"),
                (F.col(REPLACED_COLUMN) if fmt == "csv" else F.lit(None).cast("boolean"))
                .alias("fffd"),
            )
            stats = s if stats is None else stats.unionByName(s)
    good = F.col("_lc_seq").isNotNull()
    agg = stats.groupBy("src", "fmt", "_lc_file", "_lc_block").agg(
        F.count("_lc_seq").alias("rows"),
        F.min("_lc_seq").alias("min_seq"),
        F.min("_lc_line").alias("min_line"),
        F.max("_lc_line").alias("max_line"),
        F.min(F.when(F.col("_lc_err").isNotNull(),
                     F.struct("_lc_line", "_lc_seq", "_lc_err"))).alias("err"),
        F.max(F.when(good, F.col("has_label"))).alias("has_label"),
        F.max(F.when(good, F.col("has_split"))).alias("has_split"),
        F.min(F.when(good, F.col("id_int"))).alias("id_int"),
        F.max("has_text").alias("has_text"),
        F.min(F.when(F.col("fffd"), F.col("_lc_seq"))).alias("fffd_seq"),
    )
    try:
        rows = agg.collect()
    except Exception as exc:  # noqa: BLE001 - translated or re-raised
        raise _translate(exc) from None

    by_src: dict[int, list] = {}
    for r in rows:
        by_src.setdefault(r.src, []).append(r)
    _check_no_file_twice(frames, by_src)
    table = []
    dataset_base: dict[str, int] = {}
    int_ids: dict[str, bool] = {}
    for frame in frames:
        src = frame.source
        # Files in path order (Spark's URL-encoded names sort "a{" before "a1")
        blocks = sorted(by_src.get(frame.index, []), key=lambda r: (_block_path(r), r._lc_block))
        cap = opts.max_rows or None
        src_rows, line_base, prev_file = 0, 0, None
        first_error = None
        suspects: dict[str, int] = {}  # CSV file -> the row index of its first U+FFFD
        spans: dict[str, list[int]] = {}  # file -> [row index of its first row, of the next]
        for b in blocks:
            path = _block_path(b)
            if b._lc_file != prev_file:
                line_base, prev_file = 0, b._lc_file
                spans[path] = [src_rows, src_rows]
            if b.err is not None and first_error is None:
                err_row = src_rows + (b.err._lc_seq - b.min_seq if b.err._lc_seq is not None else 0)
                if cap is None or err_row < cap:
                    first_error = (b, line_base + b.err._lc_line - b.min_line + 1, err_row)
            if b.fffd_seq is not None and (cap is None or src_rows + b.fffd_seq - b.min_seq < cap):
                suspects.setdefault(path, src_rows + b.fffd_seq - b.min_seq)
            table.append([frame.index, b._lc_file, b._lc_block, b.min_seq, src_rows])
            src_rows += b.rows
            spans[path][1] = src_rows
            line_base += b.max_line - b.min_line + 1
        if first_error is not None:  # a U+FFFD after the first bad row does not matter
            suspects = {f: row for f, row in suspects.items() if row <= first_error[2]}
        if suspects:
            # Invalid bytes count up to the first bad row (bytes in that row first: its values
            # are not what the file says) and up to --max-rows: a genuine U+FFFD before either
            # does not make later bytes an error.
            ends = ([first_error[2] + 1] if first_error else []) + ([cap] if cap else [])
            invalid_utf8(spark, list(suspects), {
                f: min(ends) - spans[f][0] for f in suspects if ends and min(ends) < spans[f][1]})
        if first_error is not None:
            b, line, _ = first_error
            err = errors.decode_row_error(b.err._lc_err)
            if b.fmt == "csv" and err.message == _MALFORMED_CSV:
                raise _malformed_csv_error(spark, frame, b._lc_file, b.err._lc_seq, err.hint)
            path = _block_path(b)
            if (b.fmt == "jsonl" and err.code == errors.BAD_FORMAT and not src.noleak
                    and line_ending(spark, path) == "\r"):
                # Lines end at LF here (a kept CRLF line is written back as it is): a file of
                # lone CRs is one line, whose JSON has "extra data" after its first object.
                raise LeakcheckError(
                    errors.BAD_FORMAT, f"the lines of {errors.display_path(path)} end "
                    "with a lone CR (\\r), not LF or CRLF as JSON Lines do",
                    "convert its line endings, e.g. tr '\\r' '\\n' < IN > OUT")
            if b.fmt == "parquet" and err.code == errors.MISSING_FIELD and src.id_field:
                # An empty id: in a file without the column, every id is (the source's columns
                # are its files' union), and "not in" says what to fix.
                _check_parquet_column(spark, src, path, "id field", src.id_field)
            file = errors.display_path(path)
            number = line - 1 if b.fmt == "json" else line  # list elements count from 0
            where = f"{_UNIT[b.fmt]} {number} of {file}"
            # Once each: a message may go on to quote a value from the data, which is left alone.
            raise LeakcheckError(
                err.code, err.message.replace("{where}", where, 1).replace("{file}", file, 1),
                err.hint)
        _check_parquet_text_column(spark, src, blocks)
        total = min(src_rows, cap) if cap else src_rows
        if total == 0:
            raise LeakcheckError(errors.EMPTY_INPUT, f"no records in {src.label}")
        nonempty = [b for b in blocks if b.rows]
        if src.label_field and not any(b.has_label for b in nonempty):
            raise LeakcheckError(
                errors.MISSING_FIELD,
                f"label field {src.label_field!r} present in no row of {src.label}",
                "check --label-field, or switch it off with -o NAME.label=")
        if src.split is None and src.split_field and not any(b.has_split for b in nonempty):
            raise LeakcheckError(
                errors.MISSING_FIELD,
                f"split field {src.split_field!r} present in no row of {src.label}",
                "check --split-field, or give the split as -d NAME:SPLIT=SOURCE")
        int_ids[src.name] = int_ids.get(src.name, True) and (
            not src.id_field or all(b.id_int for b in nonempty))
        base = dataset_base.get(src.name, 0)
        for entry in table:
            if entry[0] == frame.index:
                entry[4] += base
                entry.append(base + total)
        dataset_base[src.name] = base + total
    return Blocks([tuple(t) for t in table], frozenset(int_ids),
                  frozenset(name for name, ok in int_ids.items() if ok))


def _malformed_csv_error(spark: SparkSession, frame: SourceFrame, file: str, seq: int,
                         hint: str | None) -> LeakcheckError:
    """BAD_FORMAT for the row `seq` of CSV `file`, which has more or fewer values than the
    header: naming its line, and how many fields each has.

    Spark skips an empty line between rows, which leaves no trace in the rows, so the line is
    found by counting the others: the bad row starts on the file's ``1 + h + r + b - e``-th
    line that is not empty, for a header of `h` lines, `r` rows before it, `b` line endings in
    their values (counted as the read splits lines, `line_ending`) and `e` empty lines among
    those of the values (:func:`_nth_nonempty_line`).  One Spark job over the cached rows of the
    file up to the bad one, two over the file's lines; only the bad row's text and one row per
    block of the file reach the driver.
    """
    import csv
    import io

    import pyspark.sql.functions as F

    part = dict(frame.parts)["csv"]
    names = frame.original_columns["csv"]
    path = errors.from_spark(file)
    ending = line_ending(spark, path) or "\n"

    def breaks(c: Column) -> Column:
        return F.coalesce((F.length(c) - F.length(F.replace(c, F.lit(ending)))) / len(ending),
                          F.lit(0))

    def empty_lines(c: Column) -> Column:  # a value's lines but its first and last: quoted
        lines = F.split(c, ending, -1)
        inner = F.slice(lines, 2, F.greatest(F.size(lines) - 2, F.lit(0)))
        return F.coalesce(F.size(F.filter(inner, lambda x: x == "")), F.lit(0))

    before = F.col("_lc_seq") < seq
    columns = [F.col(original_column(i)) for i in range(len(names))]
    try:
        r = (part.where((F.col("_lc_file") == file) & (F.col("_lc_seq") <= seq))
             .agg(F.count(F.when(before, 1)).alias("rows"),
                  F.sum(F.when(before, sum(map(breaks, columns), F.lit(0)))).alias("breaks"),
                  F.sum(F.when(before, sum(map(empty_lines, columns), F.lit(0)))).alias("empty"),
                  F.max(F.when(~before, F.col(CSV_MALFORMED))).alias("text")).collect()[0])
    except Exception as exc:  # noqa: BLE001 - translated or re-raised
        raise _translate(exc) from None
    header = [name.split(ending) for name in names]
    header_lines = 1 + sum(len(parts) - 1 for parts in header)
    header_empty = sum(x == "" for parts in header for x in parts[1:-1])
    lines = header_lines + r.rows + int(r.breaks or 0) - header_empty - int(r.empty or 0)
    line = _nth_nonempty_line(spark, path, lines + 1)
    text = r.text or ""
    fields = len(next(csv.reader(io.StringIO(text, newline="")), [""]))  # RFC 4180, as read
    where = f"line {line}" if line else f"row {r.rows + 1}"
    return LeakcheckError(
        errors.BAD_FORMAT, f"{where} of {errors.display_path(path)} has {fields} "
        f"field{'s' * (fields != 1)}, its header has {len(names)}", hint)


def _nth_nonempty_line(spark: SparkSession, file: str, n: int) -> int | None:
    """The number of the `n`-th line of `file` that is not empty (as the CSV read splits
    lines), or None if it has fewer.  One Spark job for the block table, one that ranks the
    lines of the block holding it."""
    import pyspark.sql.functions as F
    from pyspark.sql import Window

    lines = _file_lines(spark, [file])
    empty = F.col("value") == ""
    for b in _line_blocks(lines, F.count(F.when(empty, 1)).alias("empty")):
        if n > b.lines - b.empty:
            n -= b.lines - b.empty
            continue
        rank = F.row_number().over(Window.partitionBy("_lc_block").orderBy("_lc_seq"))
        try:
            found = (lines.where((F.col("_lc_block") == b._lc_block) & ~empty)
                     .select((F.col("_lc_seq") - b.min_seq + b.base + 1).alias("line"),
                             rank.alias("rank"))
                     .where(F.col("rank") == n).collect())
        except Exception as exc:  # noqa: BLE001 - translated or re-raised
            raise _translate(exc) from None
        return found[0].line if found else None
    return None


def _file_lines(spark: SparkSession, files: list[str]) -> DataFrame:
    """The lines of `files`, each split where the CSV read splits its rows (`line_ending`: a
    lone CR in an LF file is no line break), as ``value`` (Spark's text reader does not decode
    them) with ``_lc_file``, ``_lc_block`` and ``_lc_seq``, which grows along a block's lines
    (:func:`_line_blocks` turns it into line numbers)."""
    import pyspark.sql.functions as F

    lines = None
    for ending, part in _by_line_ending(spark, files).items():
        reader = read_inputs(spark)
        reader = reader if ending is None else reader.option("lineSep", ending)
        df = reader.text(list(map(literal, part))).select("value", *_file_position(),
                                      F.monotonically_increasing_id().alias("_lc_seq"))
        lines = df if lines is None else lines.unionAll(df)
    return lines


def _line_blocks(lines: DataFrame, *extra: Column) -> list:
    """The blocks of `lines` (:func:`_file_lines`) in file order, each with ``lines`` (its
    count), ``min_seq``, ``base`` (the lines of its file before it: line ``base + _lc_seq -
    min_seq + 1`` of the file is a line of it) and the `extra` aggregates.  One Spark job; one
    row per block reaches the driver."""
    import pyspark.sql.functions as F
    from pyspark.sql import Row

    agg = lines.groupBy("_lc_file", "_lc_block").agg(
        F.count(F.lit(1)).alias("lines"), F.min("_lc_seq").alias("min_seq"), *extra)
    try:
        blocks = sorted(agg.collect(), key=lambda r: (r._lc_file, r._lc_block))
    except Exception as exc:  # noqa: BLE001 - translated or re-raised
        raise _translate(exc) from None
    out, base, prev_file = [], 0, None
    for b in blocks:
        if b._lc_file != prev_file:
            base, prev_file = 0, b._lc_file
        out.append(Row(**b.asDict(), base=base))
        base += b.lines
    return out


def invalid_utf8(spark: SparkSession, files: list[str], rows: dict[str, int] | None = None,
                 ) -> None:
    """Raise BAD_FORMAT naming the first line of `files` (in this order) that is not valid
    UTF-8, if any; in a file that `rows` gives a count for, only a line of its header or of its
    first that many rows counts.

    One Spark job reading the files as lines of bytes (Spark's text reader does not decode
    them), each split where the CSV read splits its rows (`line_ending`: a lone CR in an LF
    file is no line break), so the line number is the one of that read.  Run only for the CSV
    files in which :func:`replaced_utf8` found a U+FFFD; a file with a row count and invalid
    bytes costs one more job (:func:`_first_invalid_row`).
    """
    import pyspark.sql.functions as F

    lines = _file_lines(spark, files)
    invalid = ~F.is_valid_utf8("value")
    blocks = _line_blocks(lines, F.min(F.when(invalid, F.struct(
        "_lc_seq", F.col("value").cast("binary").alias("b")))).alias("bad"))
    first: dict[str, tuple[int, str]] = {}  # file -> its first invalid line, and why
    for b in blocks:
        file = errors.from_spark(b._lc_file)
        if b.bad is not None and file not in first:
            try:
                bytes(b.bad.b).decode("utf-8")
                reason = "invalid bytes"  # Spark's rule, stricter than Python's (not seen)
            except UnicodeDecodeError as exc:
                reason = f"{exc.reason} at byte {exc.start + 1} of the line"
            first[file] = (b.base + b.bad._lc_seq - b.min_seq + 1, reason)
    order = {file: i for i, file in enumerate(files)}  # Spark may spell a path otherwise
    for file in sorted(first, key=lambda f: (order.get(f, len(order)), f)):
        if rows and file in rows:
            row = _first_invalid_row(spark, file)
            if row is not None and row >= rows[file]:
                continue
        line, reason = first[file]
        raise LeakcheckError(
            errors.BAD_FORMAT,
            f"invalid UTF-8 in line {line} of {errors.display_path(file)} ({reason})",
            "CSV files are read as UTF-8: convert the file (e.g. iconv -f ITS-ENCODING "
            "-t UTF-8) or fix the line")


def check_csv_utf8(spark: SparkSession, df: DataFrame) -> None:
    """Raise BAD_FORMAT naming the first line that is not valid UTF-8 in the CSV files `df` is
    read from (by :func:`read_csv`, without positions), if any: the check of the sources'
    `scan`, for a reader that has no scan of its own (`images`).

    One Spark job that stops at the first row holding a U+FFFD (:func:`replaced_utf8`); only
    then are the files read as bytes (:func:`invalid_utf8`, in path order).
    """
    import pyspark.sql.functions as F

    internal = [original_column(i) for i in range(len(df.columns))]
    suspect = (df.toDF(*internal).select(replaced_utf8(df.columns, internal))
               .where(F.col(REPLACED_COLUMN)).take(1))
    if suspect:
        invalid_utf8(spark, input_files(df))


def _first_invalid_row(spark: SparkSession, file: str) -> int | None:
    """The index of the first row of CSV `file` (0 the one after the header, -1 the header)
    whose bytes are not valid UTF-8, or None.

    The file is parsed as `read_csv` parses it, but decoded as ISO-8859-1: each byte is one
    character, so the rows are split where the UTF-8 read splits them (the CSV syntax is all
    ASCII, which no multi-byte UTF-8 sequence holds), and encoding a row's values back gives
    their bytes.  Joined by a comma, they are valid UTF-8 just when the row's bytes are: the
    quotes the parse takes out sit between a value's bytes and the next delimiter, or leave one
    of a doubled pair, so no two bytes the file keeps apart come together.
    """
    import pyspark.sql.functions as F

    ending = line_ending(spark, file)
    reader = read_inputs(spark).options(
        header=False, multiLine=True, encoding="ISO-8859-1", **CSV_DIALECT)
    reader = reader if ending is None else reader.option("lineSep", ending)
    if _GLOB_CHARS.search(file):  # Spark's inference cannot find it (`read_csv`): as many
        # columns as the header has, which is what inference takes (its first row's)
        width = len(_csv_header(spark, file) or [""])
        reader = reader.schema(", ".join(f"_c{i} string" for i in range(width)))
    df = reader.csv(literal(file))
    raw = F.encode(F.concat_ws(",", *[named(c) for c in df.columns]), "ISO-8859-1")
    seq = F.monotonically_increasing_id()  # the file is one partition (multiLine)
    numbered = df.select(seq.alias("seq"), F.is_valid_utf8(raw.cast("string")).alias("ok"))
    try:
        r = numbered.agg(F.min("seq").alias("first"),
                         F.min(F.when(~F.col("ok"), F.col("seq"))).alias("bad")).collect()[0]
    except Exception as exc:  # noqa: BLE001 - translated or re-raised
        raise _translate(exc) from None
    return None if r.bad is None else r.bad - r.first - 1


def _block_path(block: object) -> str:
    """The file of a block of the sources' scan, as a path (`from_spark`; a Hugging Face
    dataset's own name as the loader gave it)."""
    return block._lc_file if block.fmt == "hf" else errors.from_spark(block._lc_file)


def _check_no_file_twice(frames: list[SourceFrame], by_src: dict[int, list]) -> None:
    """Raise USAGE when two sources of one group read the same file (``d`` and ``d/*.jsonl``):
    its records would be read twice, each counted as a duplicate of its own copy.  The specs
    differ, so only the files they list (one row a block, here already) can tell."""
    first: dict[tuple, Source] = {}
    for frame in frames:
        src = frame.source
        for file in sorted({_block_path(b) for b in by_src.get(frame.index, [])}):
            other = first.setdefault((src.name, src.split, file), src)
            if other is not src:
                raise LeakcheckError(
                    errors.USAGE, f"{other.label} and {src.label} both read "
                    f"{errors.display_path(file)}: its records would be counted twice",
                    "give each file to a group once")


def _check_parquet_text_column(spark: SparkSession, src: Source, blocks: list) -> None:
    """Raise MISSING_FIELD for a parquet file of `src` that lacks the text column.

    A source's columns are the union of its files' (`read_parquet`), and a file without the
    text column reads as null texts (empty records), silently.  Only a file whose texts are all
    null (rare) can lack it, so only such files' own columns are looked at.
    """
    files = {_block_path(b) for b in blocks if b.fmt == "parquet"}
    if not src.text_field or len(files) < 2:  # one file's columns were checked when it was read
        return
    with_text = {_block_path(b) for b in blocks if b.fmt == "parquet" and b.has_text}
    for file in sorted(files - with_text):
        _check_parquet_column(spark, src, file, "text field", src.text_field)


def _check_parquet_column(spark: SparkSession, src: Source, file: str, flag: str, name: str,
                          ) -> None:
    """Raise MISSING_FIELD if the Parquet `file` of `src` has no column `name` (by Spark's case
    rule); `flag` names the field ("text field").  Reads the file's footer."""
    columns = read_inputs(spark).parquet(literal(file)).columns
    fold = (lambda c: c) if case_sensitive(spark) else str.lower
    if fold(name) not in {fold(c) for c in columns}:
        raise LeakcheckError(
            errors.MISSING_FIELD, f"{flag} {name!r} not in {errors.display_path(file)} "
            f"(columns: {', '.join(columns[:12])}), one of the files of {src.label}",
            "give every file of a source the same columns")


def number_rows(spark: SparkSession, frames: list[SourceFrame], blocks: Blocks,
                extra: tuple[str, ...] = ()) -> DataFrame:
    """The sources' records with `row` and `id` assigned, blank lines and rows past
    ``--max-rows`` dropped.  `extra` names further parsed columns to keep (for `clean`).

    The parts of every source are put together first and numbered by one join with one table
    of blocks: a table per source made every query over the records join each source apart,
    with a job per source to broadcast its table (64 sources: ~20 s a query)."""
    import pandas as pd
    import pyspark.sql.functions as F

    indexes = {frame.index for frame in frames}
    # From pandas (Arrow), the JVM builds this small table itself; from a list of tuples, every
    # query that reads the records would run a Python task to unpickle it.
    table = spark.createDataFrame(
        pd.DataFrame([t for t in blocks.table if t[0] in indexes],
                     columns=["_lc_src", "_lc_file", "_lc_block", "min_seq", "row_base",
                              "row_end"]),
        "_lc_src int, _lc_file string, _lc_block long, min_seq long, row_base long, "
        "row_end long",
    )
    parts = None
    for frame in frames:
        src = frame.source
        split = F.lit(src.split) if src.split else F.coalesce("split", F.lit(DEFAULT_SPLIT))
        for fmt, part in frame.parts:
            keep = list(extra)
            if "originals" in keep:
                keep.remove("originals")
                keep += [original_column(i)
                         for i in range(len(frame.original_columns.get(fmt, [])))]
            df = part.where(F.col("_lc_seq").isNotNull()).select(
                F.lit(frame.index).alias("_lc_src"), "_lc_file", "_lc_block", "_lc_seq",
                F.lit(src.name).alias("dataset"), split.alias("split"),
                F.concat(F.lit(src.name + "/"), split).alias("group"),
                # Without an id field the id is the row, known after the join.
                (F.col("id") if src.id_field else F.lit(None).cast("string")).alias("_lc_id"),
                # `id_num` orders the ids of integer-id datasets numerically ("smallest first").
                F.lit(src.name in blocks.int_datasets).alias("_lc_int"),
                "text", "label", "label_canon",
                *[c for c in ("key", "unit", "fp") if c in part.columns], *keep,
            )
            parts = df if parts is None else parts.unionByName(df, allowMissingColumns=True)
    row = F.col("row_base") + F.col("_lc_seq") - F.col("min_seq")
    ident = F.coalesce(F.col("_lc_id"), F.col("row").cast("string"))
    numbered = (parts.join(F.broadcast(table), ["_lc_src", "_lc_file", "_lc_block"])
                .withColumn("row", row).where(F.col("row") < F.col("row_end")))
    # Read by the numbering, or selected first below.
    done = {"_lc_src", "_lc_file", "_lc_block", "_lc_seq", "_lc_id", "_lc_int", "dataset",
            "split", "group", "text", "label", "label_canon"}
    return numbered.select(
        "dataset", "split", "group",
        (ident.cast("long") if blocks.ids_are_ints else ident).alias("id"), "row",
        "text", "label", "label_canon",
        F.when(F.col("_lc_int"), ident.cast("long")).alias("id_num"),
        # key, unit, fp and the `extra` columns, after those of RECORD_COLUMNS
        *[c for c in parts.columns if c not in done],
    )


def read_records(spark: SparkSession, sources: list[Source], opts: Options,
                 derived: Derived = NOTHING_DERIVED,
                 ) -> tuple[DataFrame, list[SourceFrame], Blocks]:
    """Read and check every source; return all records as one DataFrame (RECORD_COLUMNS, plus
    `key`, `unit` and `fp` when `derived` adds them)."""
    require_sources(sources)
    frames: list[SourceFrame] = []
    try:
        for i, src in enumerate(sources):
            frames.append(read_source(spark, src, i, derived=derived))
        blocks = scan(spark, frames, opts)
        records = number_rows(spark, frames, blocks)
    except BaseException:
        # A bad row or a missing file of a later source: the sources read so far are cached,
        # and the caller never gets the frames to release them (a notebook session would keep
        # them until it ends).
        for frame in frames:
            frame.unpersist()
        raise
    return records, frames, blocks
