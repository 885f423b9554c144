"""``--config FILE``: a TOML file that stands for command-line flags (for scheduled jobs).

Every key is a flag's long name (``text-field``, ``near``, ``out-dir``; ``text_field`` works too),
and two more name the short repeatable flags: ``datasets`` (``-d``) and ``overrides`` (``-o``).
A value is what the flag takes: a string or number; ``true`` for a switch (``false`` leaves it
off); a list for a repeatable flag (``datasets``, ``against``, ``overrides``, ``conf``).  The file
becomes flags placed *before* the command line's own, so a flag given on the command line wins
over the file (and a repeatable one adds to it)::

    # audit.toml -- leakcheck-spark audit --config audit.toml
    datasets = ["primevul:train=s3a://bucket/pv_train.jsonl",
                "diversevul:test=s3a://bucket/dv_test.jsonl"]
    text-field = "func"
    near = true
    out-dir = "s3a://bucket/leak_report"
    conf = ["spark.sql.shuffle.partitions=400"]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from leakcheck_spark import errors
from leakcheck_spark.errors import LeakcheckError
from leakcheck_spark.paths import home

# Config keys for flags that have only a short form.
_ALIASES = {"datasets": "-d", "overrides": "-o"}
# What a numeric flag's value must be (a string of one, as on the command line, is accepted).
_NUMBERS = {int: "an integer", float: "a number"}


def split_config(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """(the --config FILE given, argv without it).

    >>> split_config(["audit", "--config", "a.toml", "--near"])
    ('a.toml', ['audit', '--near'])
    >>> split_config(["audit", "--config=a.toml"])
    ('a.toml', ['audit'])

    One file per run: a second ``--config`` is an error, not silently the one that counts.
    """
    rest, paths = [], []
    it = iter(argv)
    for arg in it:
        if arg == "--config":
            path = next(it, None)
            if path is None:
                raise LeakcheckError(errors.USAGE, "--config needs a FILE",
                                     "write --config job.toml")
            paths.append(path)
        elif arg.startswith("--config="):
            paths.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if len(paths) > 1:
        raise LeakcheckError(errors.USAGE, f"--config given {len(paths)} times "
                             f"({', '.join(paths)}): a run reads one config file",
                             "merge the files, or give the other file's settings as flags")
    return (home(paths[0]) if paths else None), rest


def load(path: str) -> dict:
    """The TOML table in `path`."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise LeakcheckError(errors.IO, f"cannot read config {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8-sig")  # a BOM is accepted, as in the inputs
    except UnicodeDecodeError as exc:
        raise LeakcheckError(errors.BAD_FORMAT, f"config {path} is not UTF-8 ({exc.reason} at "
                             f"byte {exc.start + 1})", "TOML files are UTF-8: convert the file "
                             "(e.g. iconv -f ITS-ENCODING -t UTF-8)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LeakcheckError(errors.BAD_FORMAT, f"bad TOML in config {path}: {exc}",
                             "see https://toml.io; the README shows an example") from None


def to_flags(table: dict, parser: argparse.ArgumentParser, path: str) -> list[str]:
    """The flags a config table stands for, checked against the command's `parser`."""
    aliases = {opt: key for key, opt in _ALIASES.items()}
    actions = {}
    for action in parser._actions:  # noqa: SLF001 - argparse has no public listing
        for opt in action.option_strings:
            if opt.startswith("--") or opt in aliases:
                actions[aliases.get(opt, opt[2:])] = (opt, action)
    for name in ("help", "config", "version"):
        actions.pop(name, None)
    flags: list[str] = []
    spelled: dict[str, str] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("_", "-")
        if key in spelled:  # text-field and text_field: which one would count is not obvious
            raise LeakcheckError(errors.USAGE, f"config {path} sets {key} twice, as "
                                 f"{spelled[key]!r} and {raw_key!r}", "keep one of them")
        spelled[key] = raw_key
        if key not in actions:
            raise LeakcheckError(errors.USAGE, f"unknown key {raw_key!r} in config {path}",
                                 f"keys are the flags' long names: {', '.join(sorted(actions))}")
        opt, action = actions[key]
        switch = isinstance(action, argparse._StoreTrueAction)  # noqa: SLF001
        repeatable = isinstance(action, argparse._AppendAction)  # noqa: SLF001
        # A flag whose value may be left out (--json: stdout): true stands for the bare flag.
        bare = action.nargs == "?" and action.const is not None
        values = value if isinstance(value, list) and repeatable else [value]
        for v in values:
            if (switch or bare) and isinstance(v, bool):
                flags += [opt] if v else []
            elif not switch and _fits(v, action.type):
                flags += [opt, str(v)]
            else:
                want = ("true or false" if switch else
                        "a list of strings" if repeatable else _NUMBERS.get(
                            action.type, "a string or a number"))
                if bare:
                    want = f"{want}, or true for {opt} alone"
                raise LeakcheckError(errors.BAD_VALUE,
                                     f"{raw_key} = {_toml(value)} in config {path}: expected "
                                     f"{want}",
                                     f"{raw_key} = true turns {opt} on" if switch else
                                     f"{raw_key} = N stands for {opt} N"
                                     if action.type in _NUMBERS else
                                     f"{raw_key} = \"VALUE\" stands for {opt} VALUE")
    return flags


def _toml(value: object) -> str:
    """`value` as TOML spells it, for messages about a config file.

    >>> _toml(True), _toml("many"), _toml([1, "a"]), _toml(1.5)
    ('true', '"many"', '[1, "a"]', '1.5')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _fits(value: object, kind: object) -> bool:
    """Whether a config value can stand for a flag's argument: a string or a number, and one
    the flag's numeric type reads (``num-perm = "x"`` is named here, not by argparse)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return False
    if kind not in _NUMBERS:
        return True
    try:
        kind(str(value))
    except ValueError:
        return False
    return True


def sets_json(path: str | None) -> bool:
    """Whether the config file at `path` turns ``json`` on (for an error found while reading
    the rest of it); False when there is none or it cannot be read."""
    if path is None:
        return False
    try:
        table = load(path)
    except LeakcheckError:
        return False
    return any(key.replace("_", "-") == "json" and value not in (False, None)
               for key, value in table.items())
