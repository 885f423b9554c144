"""The typed, frozen configuration: what to read (`Source`) and how to match (`Options`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from leakcheck_spark.errors import USAGE, LeakcheckError
from leakcheck_spark.normalize import LANGS, NORMALIZERS

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

        for what, value in (("dataset name", self.name), ("split", self.split)):
            if value is not None and (not value or "/" in value):
                raise LeakcheckError(
                    BAD_SPEC, f"bad {what} {value!r} in source {self.name}={self.path}",
                    "names and splits are non-empty and contain no '/'",
                )
        if not self.path:
            raise LeakcheckError(BAD_SPEC, f"dataset {self.name!r} has an empty SOURCE")

    @property
    def label(self) -> str:
        """How the source is named in messages: NAME[:SPLIT]=PATH."""
        split = f":{self.split}" if self.split else ""
        return f"{self.name}{split}={self.path}"

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items()
                if v is not None and v is not False}


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
