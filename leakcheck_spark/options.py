"""The typed, frozen configuration: what to read (`Source`) and how to match (`Options`)."""

from __future__ import annotations

import dataclasses
import numbers
import os
from dataclasses import dataclass
from typing import Iterable, Sequence

from leakcheck_spark.errors import USAGE, LeakcheckError
from leakcheck_spark.normalize import LANGS, NORMALIZERS
from leakcheck_spark.paths import home, resolved

FORMATS = ("parquet", "csv", "json")
DEFAULT_SPLIT = "all"
# Candidates are verified exactly, so permutations past a few hundred only move recall near the
# threshold while the cost grows with them; the bound stops a typo (P values per text) early.
MAX_NUM_PERM = 8192
# The largest --shingle, --max-chars (and check --n): a Spark string holds less than 2 GiB, so no
# text has more characters or tokens, and a larger value means the same; the bound keeps values
# inside the 64-bit arithmetic of the Python workers, where a bigger one failed mid-run.
MAX_LENGTH = 2**31 - 1


@dataclass(frozen=True)
class Source:
    """One `-d NAME[:SPLIT]=SOURCE`: a dataset name, where its rows are, and which fields to use.

    `split` puts every row in that split; otherwise `split_field` names the column holding it;
    otherwise the split is ``all``.  `text_field` may be None only for ``.txt`` sources, or with
    `noleak`: then records are read as the ``noleak`` tool reads them (SPEC section 8) -- a JSON
    value that is a string is the text, an object's text is `text_field` when given (any type,
    as ``str()`` writes it), else its first non-blank string among ``text, content, prompt,
    question, input, output``, else its values joined by spaces; ``.json`` lists may hold
    strings; a ``.txt`` line that is JSON is read as that value, any other line is its text.
    `fingerprint` without a text field and `check` read this way.
    """

    name: str
    path: str
    split: str | None = None
    text_field: str | None = None
    label_field: str | None = None
    split_field: str | None = None
    id_field: str | None = None
    config: str | None = None
    hf_split: str | None = None
    noleak: bool = False

    def __post_init__(self) -> None:
        from leakcheck_spark.errors import BAD_SPEC

        # A pathlib.Path is what a Python user naturally passes; everything downstream (listing,
        # Hadoop URIs, messages) works on the string, so keep that.
        if isinstance(self.path, os.PathLike):
            object.__setattr__(self, "path", os.fspath(self.path))
        for attr in ("name", "path", "split", "text_field", "label_field", "split_field",
                     "id_field", "config", "hf_split"):
            value = getattr(self, attr)
            if not (isinstance(value, str) or (value is None and attr not in ("name", "path"))):
                expected = "a string" if attr in ("name", "path") else "a string or None"
                raise LeakcheckError(
                    BAD_SPEC, f"Source {attr} {value!r} is not valid: expected {expected}"
                    + (" or a path" if attr == "path" else ""), f"fix Source({attr}=...)")
        # A leading ~ is the user's home, as the CLI's shell (and pandas) read it.
        object.__setattr__(self, "path", home(self.path))
        if not isinstance(self.noleak, bool):
            raise LeakcheckError(BAD_SPEC, f"Source noleak {self.noleak!r} is not valid: "
                                 "expected True or False", "fix Source(noleak=...)")
        for what, value in (("dataset name", self.name), ("split", self.split)):
            if value is not None and (not value or "/" in value):
                raise LeakcheckError(
                    BAD_SPEC, f"bad {what} {value!r} in source {self.label}",
                    "names and splits are non-empty and contain no '/'",
                )
        if not self.path:
            raise LeakcheckError(BAD_SPEC, f"dataset {self.name!r} has an empty SOURCE")
        # They pick from a Hugging Face dataset; on any other source they would be ignored.
        for attr in ("config", "hf_split"):
            if getattr(self, attr) and not self.path.startswith("hf:"):
                raise LeakcheckError(
                    USAGE, f"{attr} {getattr(self, attr)!r} given for {self.label}, which is not a "
                    "Hugging Face source (hf:ORG/NAME)", f"leave out Source({attr}=...)")

    @property
    def label(self) -> str:
        """How the source is named in messages: NAME[:SPLIT]=PATH."""
        split = f":{self.split}" if self.split else ""
        return f"{self.name}{split}={self.path}"

    def to_dict(self) -> dict:
        """The source as the report lists it: the fields in effect (a split field is read only
        when no split is given and the source is not a Hugging Face dataset)."""
        unused = ({"split_field"} if self.split is not None or self.path.startswith("hf:")
                  else set())
        return {k: v for k, v in dataclasses.asdict(self).items()
                if v is not None and v is not False and k not in unused}


@dataclass(frozen=True)
class Options:
    """How records are compared and what is written (SPEC sections 4-6).

    Raises:
        LeakcheckError(LC_E_USAGE): on a value outside its documented range.
    """

    normalizer: str = "whitespace"
    lang: str = "c"
    max_chars: int | None = None
    near: bool = False
    threshold: float = 0.8
    shingle: int = 5
    num_perm: int = 128
    max_rows: int = 0
    format: str = "parquet"

    def __post_init__(self) -> None:
        def bad(flag: str, value: object, expected: str) -> LeakcheckError:
            return LeakcheckError(USAGE, f"{flag} {value!r} is not valid: expected {expected}",
                                  f"fix {flag}")

        # Types first: a string threshold would fail on the comparison below with a TypeError,
        # a float shingle or num_perm deep inside a Python worker, and near="no" is truthy.
        if not isinstance(self.near, bool):
            raise bad("--near", self.near, "True or False")
        for flag, attr in (("--shingle", "shingle"), ("--num-perm", "num_perm"),
                           ("--max-rows", "max_rows"), ("--max-chars", "max_chars")):
            value = getattr(self, attr)
            if value is None and attr == "max_chars":
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise bad(flag, value, "an integer" + (" or None" if attr == "max_chars" else ""))
            object.__setattr__(self, attr, int(value))
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, numbers.Real):
            raise bad("--threshold", self.threshold, "a number in (0, 1]")
        object.__setattr__(self, "threshold", float(self.threshold))
        if self.normalizer not in NORMALIZERS:
            raise bad("--normalizer", self.normalizer, " | ".join(NORMALIZERS))
        if self.lang not in LANGS:
            raise bad("--lang", self.lang, " | ".join(LANGS))
        if self.format not in FORMATS:
            raise bad("--format", self.format, " | ".join(FORMATS))
        if self.max_chars is not None and not 0 < self.max_chars <= MAX_LENGTH:
            raise bad("--max-chars", self.max_chars,
                      f"an integer from 1 to {MAX_LENGTH} (leave it out for no limit)")
        if self.max_rows < 0:
            raise bad("--max-rows", self.max_rows, "0 (all rows) or a positive integer")
        if not 0.0 < self.threshold <= 1.0:
            raise bad("--threshold", self.threshold, "a number in (0, 1]")
        if not 0 < self.shingle <= MAX_LENGTH:
            raise bad("--shingle", self.shingle, f"an integer from 1 to {MAX_LENGTH}")
        if not 0 < self.num_perm <= MAX_NUM_PERM:
            raise bad("--num-perm", self.num_perm, f"an integer from 1 to {MAX_NUM_PERM}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def as_sources(sources: Source | Iterable[Source], what: str = "sources") -> list[Source]:
    """The library's `sources` argument as a list: one Source, or any iterable of them.

    Raises:
        LeakcheckError(LC_E_USAGE): anything else (a path string, a dict, ...), named.
    """
    if isinstance(sources, Source):
        return [sources]
    if isinstance(sources, (str, bytes, os.PathLike)) or not isinstance(sources, Iterable):
        items = [sources]
    else:
        items = list(sources)
    for item in items:
        if not isinstance(item, Source):
            raise LeakcheckError(USAGE, f"{what} must be Source objects, not {item!r}",
                                 "describe each dataset as leakcheck_spark.Source(name, path, ...)")
    return items


def require_sources(sources: Sequence[Source]) -> None:
    """Refuse an empty list of sources (LC_E_USAGE)."""
    if not sources:
        raise LeakcheckError(USAGE, "no datasets given",
                             "give at least one source (-d NAME[:SPLIT]=SOURCE)")


def check_sources(sources: Sequence[Source], splits: bool = True) -> None:
    """Refuse sources that would be read into groups other than the user meant, before any work.

    Every source of one dataset either gives its split (``:SPLIT``, a split column, or an
    ``hf:`` dataset's own splits) or none does: a source with none of them, next to one naming a
    split, is read into a group ``NAME/all`` beside ``NAME/SPLIT`` -- almost always a forgotten
    ``:SPLIT`` -- and its records count as within-dataset leakage (`splits`; off for ``clean``,
    whose groups are only labels).  The same source twice (dataset, split, path, and for ``hf:``
    configuration and HF split) is refused rather than read once: every record would match its own
    copy, and which of two identical specs a user meant to be something else is theirs to say.

    No source at all is refused too, before a session is started for nothing.

    Raises:
        LeakcheckError(LC_E_USAGE): naming the two specs, or for no source.
    """
    require_sources(sources)
    seen: dict[tuple, Source] = {}
    for src in sources:
        key = (src.name, src.split, _place(src.path), src.config, src.hf_split)
        if key in seen:
            raise LeakcheckError(
                USAGE, f"{src.label} is given twice: every record would be counted as a "
                "duplicate of its own copy", "give each source once")
        seen[key] = src
    if not splits:
        return
    for src in sources:
        if src.split is not None or src.split_field or src.path.startswith("hf:"):
            continue
        named = next((s for s in sources if s.name == src.name and s.split is not None), None)
        if named is not None:
            raise LeakcheckError(
                USAGE, f"dataset {src.name!r} is given as {named.label} and as {src.label}, "
                f"whose rows have no split: they would form a group {src.name}/{DEFAULT_SPLIT}",
                f"give its split too (-d {src.name}:SPLIT={src.path}), or the column holding it "
                f"(--split-field F or -o {src.name}.split=F)")


def _place(path: str) -> str:
    """`path` as two specs of one place compare equal (local paths absolute, symlinks resolved)."""
    return path if path.startswith(("hf:", "table:")) else resolved(path)


def as_options(options: Options | None) -> Options:
    """The library's `options` argument: None means the defaults.

    Raises:
        LeakcheckError(LC_E_USAGE): anything but an Options (a dict of them, say).
    """
    if options is None:
        return Options()
    if not isinstance(options, Options):
        raise LeakcheckError(USAGE, f"options must be a leakcheck_spark.Options, not {options!r}",
                             "build them as leakcheck_spark.Options(normalizer=..., near=...)")
    return options
