"""Command line: parse flags into Sources and Options, run, print, exit.

The only module that prints and chooses exit codes: 0 success, 1 a requested failure condition
(``--fail-on-overlap``), 2 an error (one line ``leakcheck-spark: error [CODE]: message (hint:
...)`` on stderr, or ``{"error": {...}}`` with ``--json``).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import dataclasses
import io
import json
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Iterator, Sequence

from leakcheck_spark import __version__, config, errors
from leakcheck_spark.errors import LeakcheckError
from leakcheck_spark.hf import PREFIX as HF_PREFIX
from leakcheck_spark.normalize import LANGS, NORMALIZERS
from leakcheck_spark.options import (
    FORMATS,
    MAX_LENGTH,
    MAX_NUM_PERM,
    Options,
    Source,
    check_sources,
)
from leakcheck_spark.paths import home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROG = "leakcheck-spark"
OVERRIDE_KEYS = ("text", "label", "split", "id", "config", "hf_split")
IMAGE_OVERRIDE_KEYS = ("split", "id")  # images read no text or label, nor hf: sources
COMMANDS = ("audit", "clean", "resplit", "images", "fingerprint", "check")
# The flags that name something a run writes (attribute of the parsed args, flag); the last two
# are single JSON files.
OUTPUT_FLAGS = (("out_dir", "--out-dir"), ("out", "--out"), ("resplit_out", "--resplit-out"),
                ("report", "--report"), ("json", "--json"))
FILE_OUTPUTS = ("--report", "--json")


class _StoreFlag(argparse.Action):
    """Store the value, and as DEST_flag the option string typed (an alias names itself in
    errors: ``check --near-threshold``)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_flag", option_string)


class _Parser(argparse.ArgumentParser):
    """argparse that raises LC_E_USAGE instead of printing usage and exiting 2 itself."""

    command = ""  # set by main() so that errors raised by the top parser name the command
    _argv: list[str] = []

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        cmd = f"{PROG} {self.command} --help" if self.command else f"{PROG} --help"
        if message.startswith("the following arguments are required"):
            # argparse checks for required options before it reports unknown ones: `--tr` for
            # --train (abbreviations are refused) would read as a missing --train.
            words = self._argv[:self._argv.index("--")] if "--" in self._argv else self._argv
            unknown = [w for w in words if w.startswith("--")
                       and w.split("=", 1)[0] not in self._option_string_actions]
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)}"
        raise LeakcheckError(errors.USAGE, message, f"run '{cmd}'")


def build_parser() -> argparse.ArgumentParser:
    top = _Parser(prog=PROG, allow_abbrev=False,
                  description="Audit train/test leakage within and across ML datasets, on Spark.")
    top.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def datasets(p: argparse.ArgumentParser, what: str = "a dataset source (repeatable)") -> None:
        p.add_argument("-d", dest="datasets", action="append", default=[],
                       metavar="NAME[:SPLIT]=SRC", help=what)

    def priority(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument("--priority", default="train,val,test", metavar="S1,S2,...",
                       help=f"split precedence{what}, highest first (default train,val,test); "
                            "other splits rank after, alphabetically")

    def fields(p: argparse.ArgumentParser, text: bool = True) -> argparse._ArgumentGroup:
        g = p.add_argument_group("fields")
        if text:
            g.add_argument("--text-field", metavar="F", help="field holding the text (not .txt)")
            g.add_argument("--label-field", metavar="F", help="field holding the label")
        g.add_argument("--split-field", metavar="F", help="field holding the split")
        g.add_argument("--id-field", metavar="F", help="field holding the id (default: "
                       + ("row index)" if text else "the image's path as given)"))
        keys = OVERRIDE_KEYS if text else IMAGE_OVERRIDE_KEYS
        g.add_argument("-o", dest="overrides", action="append", default=[],
                       metavar="NAME.KEY=VALUE",
                       help=f"per-dataset field override; KEY = {'|'.join(keys)}")
        return g

    def matching(p: argparse.ArgumentParser, *threshold_aliases: str) -> None:
        m = p.add_argument_group("matching")
        m.add_argument("--normalizer", choices=NORMALIZERS, default="whitespace",
                       help="how texts are compared (default whitespace)")
        m.add_argument("--lang", choices=LANGS, default="c",
                       help="comment syntax for --normalizer code (default c)")
        m.add_argument("--max-chars", type=int, metavar="N",
                       help=f"truncate texts to N characters (1 to {MAX_LENGTH}; "
                            "default: no limit)")
        m.add_argument("--near", action="store_true", help="also match near-duplicates")
        m.add_argument("--threshold", *threshold_aliases, type=float, default=0.8, metavar="T",
                       action=_StoreFlag,
                       help="with --near: shingle Jaccard similarity >= T matches (in (0, 1]; "
                            "default 0.8)")
        m.add_argument("--shingle", type=int, default=5, metavar="K",
                       help=f"with --near: shingle length in tokens (1 to {MAX_LENGTH}; default 5)")
        m.add_argument("--num-perm", type=int, default=128, metavar="P",
                       help=f"with --near: MinHash permutations (1 to {MAX_NUM_PERM}; "
                            "default 128)")
        m.add_argument("--max-rows", type=int, default=0, metavar="N",
                       help="read at most N rows per source (0 = all)")

    def common(p: argparse.ArgumentParser) -> None:
        fields(p)
        matching(p)
        general(p)

    def general(p: argparse.ArgumentParser) -> None:
        o = p.add_argument_group("output")
        o.add_argument("--format", choices=FORMATS, default="parquet",
                       help="format of list outputs (default parquet)")
        o.add_argument("--json", nargs="?", const="-", metavar="FILE|-",
                       help="write the report as JSON to FILE (- or no FILE: stdout)")
        o.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
        o.add_argument("--verbose", action="store_true",
                       help="keep Spark's own INFO logging (default: warnings only)")
        o.add_argument("--config", metavar="FILE",
                       help="read flags from a TOML file (flags given here win; see README)")
        s = p.add_argument_group("spark")
        s.add_argument("--master", metavar="URL", help="Spark master (default: local[*])")
        s.add_argument("--remote", metavar="sc://HOST:PORT",
                       help="run through a Spark Connect server (default: $SPARK_REMOTE)")
        s.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="a Spark setting (repeatable)")

    a = sub.add_parser("audit", allow_abbrev=False, help="overlap matrices, overlaps, conflicts")
    datasets(a)
    a.add_argument("--out-dir", metavar="DIR",
                   help="write report.json, overlaps/, label_conflicts/")
    a.add_argument("--fail-on-overlap", action="store_true",
                   help="exit 1 if any cross-group overlap exists")
    common(a)

    c = sub.add_parser("clean", allow_abbrev=False, help="a test split without leaked records")
    c.add_argument("--test", required=True, metavar="NAME[:SPLIT]=SRC", help="the split to clean")
    c.add_argument("--against", action="append", default=[], metavar="NAME[:SPLIT]=SRC",
                   help="drop test records found here (repeatable)")
    c.add_argument("--out", required=True, metavar="PATH",
                   help="one file for .jsonl/.csv/.parquet (.gz for text), else a directory")
    c.add_argument("--report", metavar="FILE", help="JSON list of every dropped id and why")
    c.add_argument("--dedup", action="store_true", help="also drop repeats inside the test split")
    c.add_argument("--drop-conflicts", action="store_true",
                   help="also drop test records whose text carries another label elsewhere")
    common(c)

    r = sub.add_parser("resplit", allow_abbrev=False,
                       help="leak-free split assignment: duplicate groups moved into one split")
    datasets(r)
    priority(r, "")
    r.add_argument("--out", required=True, metavar="PATH",
                   help="one row per record: one file for .jsonl/.csv/.parquet, else a directory")
    common(r)

    i = sub.add_parser("images", allow_abbrev=False,
                       help="near-duplicate images across splits (dHash), leak-free splits")
    datasets(i, "images: a directory, glob, image file, .txt list of paths, or a table")
    g = fields(i, text=False)
    g.add_argument("--path-field", metavar="F", help="table column holding image paths")
    g.add_argument("--bytes-field", metavar="F", help="table column holding image bytes")
    i.add_argument("--threshold", type=int, default=5, metavar="T",
                   help="near-duplicates: Hamming distance of the 64-bit hashes <= T (0..63)")
    i.add_argument("--out-dir", metavar="DIR",
                   help="write report.json, overlaps/, leaked_groups/, unreadable/, hashes/")
    i.add_argument("--resplit-out", metavar="PATH",
                   help="write the leak-free split assignment (one row per image)")
    priority(i, " for --resplit-out")
    general(i)

    f = sub.add_parser("fingerprint", allow_abbrev=False,
                       help="noleak-fp-v1 fingerprints of each group (or dataset)")
    datasets(f)
    f.add_argument("--by", choices=("group", "dataset"), default="group",
                   help="one fingerprint per group NAME/SPLIT (default) or per dataset")
    fields(f)
    general(f)

    k = sub.add_parser("check", allow_abbrev=False,
                       help="eval-vs-train contamination, as noleak counts it: exit 1 if found")
    k.add_argument("--train", action="append", required=True, metavar="SRC",
                   help="a train source: file, glob, directory or table (repeatable)")
    k.add_argument("--eval", required=True, metavar="SRC", help="the eval source")
    k.add_argument("--n", type=int, default=13, metavar="N",
                   help="word n-gram size (default 13, as noleak)")
    k.add_argument("--out-dir", metavar="DIR",
                   help="write report.json and records/ (one row per eval record)")
    g = k.add_argument_group("fields")
    g.add_argument("--field", "--text-field", dest="text_field", metavar="F",
                   help="field holding the text (default: the first non-blank of text, content, "
                        "prompt, question, input, output)")
    g.add_argument("--id-field", metavar="F", help="field holding the id (default: row index)")
    matching(k, "--near-threshold")
    general(k)

    top.set_defaults(command=None)
    top.commands = {  # type: ignore[attr-defined]
        "audit": a, "clean": c, "resplit": r, "images": i, "fingerprint": f, "check": k}
    return top


def expand_config(argv: list[str]) -> list[str]:
    """argv with ``--config FILE`` replaced by the flags the file stands for, placed right after
    the command so that the command line's own flags win."""
    path, argv = config.split_config(argv)
    if path is None:
        return argv
    commands = build_parser().commands  # type: ignore[attr-defined]
    if not argv or argv[0] not in commands:
        raise LeakcheckError(errors.USAGE, "--config needs a command before it",
                             f"write {PROG} audit --config FILE (or clean)")
    return [argv[0], *config.to_flags(config.load(path), commands[argv[0]], path), *argv[1:]]


def parse_source(spec: str, args: argparse.Namespace) -> Source:
    """``NAME[:SPLIT]=SOURCE`` plus the field flags, into a Source (overrides applied later)."""
    left, eq, path = spec.partition("=")
    if not eq or not left or not path:
        raise LeakcheckError(errors.BAD_SPEC, f"bad dataset spec {spec!r}",
                             "write -d NAME[:SPLIT]=SOURCE, e.g. -d primevul:train=train.jsonl")
    name, _, split = left.partition(":")
    if ":" in left and not split:
        raise LeakcheckError(errors.BAD_SPEC, f"empty split in dataset spec {spec!r}")
    return Source(name, home(path), split=split or None,
                  text_field=getattr(args, "text_field", None),
                  label_field=getattr(args, "label_field", None), split_field=args.split_field,
                  id_field=args.id_field)


def apply_overrides(sources: list[Source], overrides: Sequence[str],
                    keys: Sequence[str] = OVERRIDE_KEYS) -> list[Source]:
    """Apply ``-o NAME.KEY=VALUE`` to the sources of dataset NAME (empty VALUE: field off); a
    KEY not in `keys` (what the command reads) is LC_E_BAD_SPEC."""

    names = {s.name for s in sources}
    fields = {"text": "text_field", "label": "label_field", "split": "split_field",
              "id": "id_field", "config": "config", "hf_split": "hf_split"}
    for item in overrides:
        target, eq, value = item.partition("=")
        name, dot, key = target.rpartition(".")
        if not eq or not dot or not name:
            raise LeakcheckError(errors.BAD_SPEC, f"bad override {item!r}",
                                 "write -o NAME.KEY=VALUE, e.g. -o primevul.id=idx")
        if key not in keys:
            raise LeakcheckError(errors.BAD_SPEC, f"unknown key {key!r} in -o {item}",
                                 f"KEY is one of {', '.join(keys)}")
        if name not in names:
            raise LeakcheckError(errors.BAD_SPEC, f"-o {item} names dataset {name!r}, which was "
                                 "not given", f"datasets given: {', '.join(sorted(names))}")
        of_name = [s for s in sources if s.name == name]
        # An override that no source of the dataset uses would be ignored, silently.
        if value and key in ("config", "hf_split"):
            of_name = [s for s in of_name if s.path.startswith(HF_PREFIX)]
            if not of_name:
                raise LeakcheckError(
                    errors.USAGE, f"-o {item}: {key} is for Hugging Face sources (hf:ORG/NAME), "
                    f"and no source of {name!r} is one", f"drop -o {target}=")
        if value and key == "split" and all(s.split or s.path.startswith(HF_PREFIX)
                                            for s in of_name):
            raise LeakcheckError(
                errors.USAGE, f"-o {item}: no source of {name!r} reads a split column: each "
                f"gives its split (-d {name}:SPLIT=...) or is a Hugging Face dataset, whose splits "
                "are its own", f"drop -o {target}=, or give a file source as -d {name}=SOURCE to "
                "take its splits from the column")
        sources = [dataclasses.replace(s, **{fields[key]: value or None}) if s in of_name else s
                   for s in sources]
    return sources


def build_options(args: argparse.Namespace) -> Options:
    try:
        return Options(normalizer=args.normalizer, lang=args.lang, max_chars=args.max_chars,
                       near=args.near, threshold=args.threshold, shingle=args.shingle,
                       num_perm=args.num_perm, max_rows=args.max_rows, format=args.format)
    except LeakcheckError as err:
        typed = getattr(args, "threshold_flag", None) or "--threshold"
        if typed == "--threshold" or not err.message.startswith("--threshold "):
            raise
        raise LeakcheckError(err.code, typed + err.message[len("--threshold"):],
                             err.hint.replace("--threshold", typed)) from None


def _conf_pairs(items: Sequence[str]) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise LeakcheckError(errors.USAGE, f"bad --conf {item!r}", "write --conf KEY=VALUE")
        pairs.append((key.strip(), value))
    return pairs


def check_outputs(args: argparse.Namespace, inputs: Sequence[str],
                  in_place: str | None = None) -> None:
    """Refuse, before any work, an output a run must not write or could not write.

    An output path may not be empty; may not be an input, a directory holding one, or lie inside
    an input directory (or the directory an input glob searches), as replacing it would delete
    the input -- except `in_place` (``clean --out`` naming its own ``--test`` file, read before it
    is replaced); may not be, hold or lie inside another output; a local one may not be or hold
    the working directory (replacing it would empty it); a JSON file may not be an
    existing directory; an existing local output directory must be empty or an earlier output of
    ours (:func:`outputs.check_replaceable`; :func:`check_table_outputs` checks non-local ones
    once the session is up); and a local output's parent may not be a file, nor a directory
    this user may not write in.  The ``--config``
    FILE is an input too (the images a list or table names are checked by
    :func:`check_listed_images`).

    Raises:
        LeakcheckError: LC_E_USAGE, or LC_E_IO for a parent that is a file or not writable.
    """
    from leakcheck_spark.outputs import (
        check_not_cwd,
        check_not_input,
        check_replaceable,
        single_file_format,
    )
    from leakcheck_spark.paths import is_local, local_path, resolved, within

    if getattr(args, "config", None) is not None:
        inputs = [*inputs, args.config]
    outs = _outputs(args)
    for flag, path in outs:
        if not path.strip():
            raise LeakcheckError(errors.USAGE, f"{flag} is empty", f"give {flag} a path")
    seen: list[tuple[str, str, str]] = []
    for flag, path in outs:
        where = resolved(path)  # not a glob: `out[1]` is written as named, not searched
        for other_flag, other, other_where in seen:
            if within(where, other_where) or within(other_where, where):
                raise LeakcheckError(errors.USAGE, f"{flag} {path} and {other_flag} {other} "
                                     "overlap", "give each output a place of its own")
        seen.append((flag, path, where))
        _warn_if_named_as_a_file(flag, path, getattr(args, "format", None))
        check_not_input(flag, path, inputs, in_place if flag == "--out" else None)
        if not is_local(path):
            continue
        check_not_cwd(flag, path, where)
        local = local_path(path)
        # A successful run replaces what is there: only an earlier output of the same kind, not
        # a directory where a file goes or a file where a directory goes.
        one_file = flag in FILE_OUTPUTS or (flag != "--out-dir" and single_file_format(path))
        if one_file and os.path.isdir(local):
            raise LeakcheckError(errors.USAGE, f"{flag} {path} is a directory",
                                 f"give {flag} a file name")
        if not one_file and os.path.lexists(local) and not os.path.isdir(local):
            raise LeakcheckError(errors.USAGE, f"{flag} {path} is a file, and this output is a "
                                 "directory", f"give {flag} the name of a directory (or of a "
                                 "file ending in .jsonl, .csv or .parquet where one file fits)"
                                 if flag != "--out-dir" else "give --out-dir a directory name")
        if not one_file:
            check_replaceable(None, path, _output_kind(flag, path), f"{flag} {path}")
        parent = os.path.dirname(os.path.abspath(local))
        while not os.path.exists(parent) and os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise LeakcheckError(errors.IO, f"cannot write {flag} {path}: {parent} is not a "
                                 "directory", "give an output path under a directory")
        if not os.access(parent, os.W_OK | os.X_OK):  # found now, not after the whole run
            raise LeakcheckError(errors.IO, f"cannot write {flag} {path}: permission denied "
                                 f"in {parent}", "give an output path in a directory you may "
                                 "write to")


def _warn_if_named_as_a_file(flag: str, path: str, fmt: str | None) -> None:
    """Say so when a rows output whose name ends like a data file (``clean.json``,
    ``rows.csv.bz2``) becomes a directory of part files: only some endings are one file."""
    from leakcheck_spark.outputs import SINGLE_FILE, single_file_format
    from leakcheck_spark.sources import COMPRESSIONS, EXTENSIONS

    low = path.rstrip("/").lower()
    if (flag in FILE_OUTPUTS or flag == "--out-dir" or single_file_format(path)
            or not low.endswith((*EXTENSIONS, *COMPRESSIONS))):
        return
    logging.getLogger("leakcheck_spark").warning(
        "%s %s will be a directory of %s part files: a name ending in %s is one file",
        flag, path, fmt or "parquet", ", ".join(SINGLE_FILE))


def _output_kind(flag: str, path: str) -> str:
    """What the output of `flag` is, for :func:`outputs.check_replaceable`."""
    from leakcheck_spark import outputs

    if flag in FILE_OUTPUTS:
        return outputs.ONE_FILE
    return outputs.REPORT_DIR if flag == "--out-dir" else outputs.rows_kind(path)


def _expand_home(args: argparse.Namespace) -> None:
    """A leading ``~`` in each path flag (outputs, check's sources) expanded (:func:`home`);
    ``-d`` sources get theirs in :func:`parse_source`."""
    for attr in (*(attr for attr, _ in OUTPUT_FLAGS), "eval"):
        value = getattr(args, attr, None)
        if isinstance(value, str) and value != "-":
            setattr(args, attr, home(value))
    if getattr(args, "train", None) is not None:
        args.train = [home(path) for path in args.train]


def _outputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(flag, path) of each output the parsed `args` name (stdout is none)."""
    return [(flag, getattr(args, attr)) for attr, flag in OUTPUT_FLAGS
            if getattr(args, attr, None) is not None and not (flag == "--json"
                                                              and args.json == "-")]


def check_listed_images(spark: SparkSession, args: argparse.Namespace,
                        sources: Sequence[Source], options) -> None:  # noqa: ANN001
    """Refuse, before any image is hashed, an output that is or holds an image a ``.txt`` list
    or a table names (:func:`check_outputs` covers the sources' own paths).

    Raises:
        LeakcheckError: LC_E_USAGE.
    """
    from leakcheck_spark.images import listed_inside
    from leakcheck_spark.outputs import over_input
    from leakcheck_spark.paths import resolved, within

    outs = [(flag, path, resolved(path)) for flag, path in _outputs(args)]
    hit = listed_inside(spark, sources, options, [where for _, _, where in outs])
    if hit is None:
        return
    image, listed_in = hit
    flag, path, where = next(o for o in outs if within(image, o[2]))
    raise over_input(flag, path, where, image, f"{image} (listed in {listed_in})")


def check_table_outputs(spark: SparkSession, args: argparse.Namespace,
                        inputs: Sequence[str]) -> None:
    """Refuse, before any work, an output that is, holds or lies inside the files of a catalog
    table an input reads (``table:NAME``): :func:`check_outputs` runs before Spark and cannot
    know where they are, and a run's output put in place there would replace the table's data
    (a managed table lives under the warehouse directory).

    Also refuses an existing non-local output directory that is not an output of ours
    (:func:`outputs.check_replaceable`; :func:`check_outputs` checks local ones), which needs the
    session's filesystem.

    Raises:
        LeakcheckError: LC_E_USAGE.
    """
    from leakcheck_spark.outputs import check_replaceable, check_table_locations
    from leakcheck_spark.paths import is_local, resolved

    outs = [(flag, path, resolved(path)) for flag, path in _outputs(args)]
    for flag, path, _ in outs:
        if not is_local(path):
            check_replaceable(spark, path, _output_kind(flag, path), f"{flag} {path}")
    check_table_locations(spark, outs, inputs)


def _emit_json(spark: SparkSession, target: str, obj: dict) -> None:
    """`obj` as JSON on stdout (`target` ``-``) or in file `target` (written atomically, its
    parent directories created)."""
    from leakcheck_spark import outputs

    if target == "-":  # printed to the held stdout: written to the real one at the end
        print(json.dumps(obj, indent=2, ensure_ascii=not writes_unicode(sys.__stdout__)))
    else:
        outputs.write_text_file(spark, target, json.dumps(obj, indent=2, ensure_ascii=False)
                                + "\n")


def run(args: argparse.Namespace) -> int:
    """Run a parsed command; returns the exit code.  Raises LeakcheckError.

    The outputs of a run are all kept or none is: a failure after one is written removes it
    again and puts back what it replaced."""
    from leakcheck_spark import outputs

    # What goes to stdout (the report, `--json -`) is held until the outputs are in place: a
    # reader that stops early (`leakcheck-spark audit ... | head`) must not undo a finished run.
    held = io.StringIO()
    with outputs.all_or_nothing(), contextlib.redirect_stdout(held):
        code = _run(args)
    if sys.stdout is None:  # started with stdout closed (`>&-`): nowhere to say it
        return code
    try:
        sys.stdout.write(held.getvalue())
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away; what it did not read is not an error of the run.  Point stdout
        # at /dev/null so that the interpreter's final flush does not fail again.
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


def _run(args: argparse.Namespace) -> int:
    if args.command == "images":
        return run_images(args)
    if args.command == "fingerprint":
        return run_fingerprint(args)
    if args.command == "check":
        return run_check(args)
    options = build_options(args)
    if args.command in ("audit", "resplit"):
        if not args.datasets:
            raise LeakcheckError(errors.USAGE,
                                 f"{args.command} needs at least one -d NAME[:SPLIT]=SOURCE")
        sources = apply_overrides([parse_source(d, args) for d in args.datasets], args.overrides)
        check_sources(sources)
        if args.command == "resplit":
            from leakcheck_spark.resplit import parse_priority

            priority = parse_priority(args.priority)
    else:
        specs = [args.test, *args.against]
        sources = apply_overrides([parse_source(d, args) for d in specs], args.overrides)
        check_sources(sources, splits=False)
    from leakcheck_spark.sources import check_text_fields

    check_text_fields(sources)
    check_outputs(args, [s.path for s in sources],
                  in_place=sources[0].path if args.command == "clean" else None)
    spark = _session(args)
    check_table_outputs(spark, args, [s.path for s in sources])
    if args.command == "audit":
        from leakcheck_spark.audit import audit

        result = audit(sources, options, spark=spark)
        if args.out_dir is not None:
            result.write(args.out_dir)
        _print_report(spark, args, result)
        return 1 if args.fail_on_overlap and result.cross_group_overlap else 0
    if args.command == "resplit":
        from leakcheck_spark.resplit import render, resplit

        result = resplit(sources, options, priority, spark=spark)
        result.write(args.out)
        report = {**result.to_dict(), "out": args.out}
        if args.json is not None:
            _emit_json(spark, args.json, report)
        text = f"{render(report)}\nwrote {args.out}"
        print(text, file=sys.stderr if args.json == "-" else sys.stdout)
        result.unpersist()
        return 0
    from leakcheck_spark.clean import clean

    result = clean(sources[0], sources[1:], options, dedup=args.dedup,
                   drop_conflicts=args.drop_conflicts, spark=spark)
    result.write(args.out)
    if args.report is not None:
        result.write_report(args.report)
    if args.json is not None:
        _emit_json(spark, args.json, {"schema": "leakcheck-spark/clean/v1", "out": args.out,
                               **result.counts})
    line = f"{sources[0].label}: {result.summary()} -> {args.out}"
    print(line, file=sys.stderr if args.json == "-" else sys.stdout)
    result.unpersist()
    return 0


def run_fingerprint(args: argparse.Namespace) -> int:
    """The fingerprint command (SPEC section 8)."""
    from leakcheck_spark.fingerprint import fingerprint_sources, render

    if not args.datasets:
        raise LeakcheckError(errors.USAGE, "fingerprint needs at least one -d NAME[:SPLIT]=SOURCE")
    sources = apply_overrides([parse_source(d, args) for d in args.datasets], args.overrides)
    # Without a text field, records are read as noleak reads them, so that the fingerprint of a
    # file equals `noleak fingerprint FILE`'s.
    sources = [s if s.text_field else dataclasses.replace(s, noleak=True) for s in sources]
    check_sources(sources)
    check_outputs(args, [s.path for s in sources])
    spark = _session(args)
    check_table_outputs(spark, args, [s.path for s in sources])
    prints = fingerprint_sources(sources, args.by, spark=spark)
    if args.json is not None:
        _emit_json(spark, args.json, {"schema": "leakcheck-spark/fingerprint/v1", "by": args.by,
                               "fingerprints": prints})
    if args.json != "-":
        print(render(prints, args.by))
    return 0


def run_check(args: argparse.Namespace) -> int:
    """The check command (SPEC section 8): exit 1 if the eval set is contaminated."""
    from leakcheck_spark.check import EVAL, TRAIN, check, check_n

    # --id-field names the eval records in the per-record list; train ids are not used.
    train = [Source(TRAIN, path, text_field=args.text_field, noleak=True) for path in args.train]
    eval_source = Source(EVAL, args.eval, text_field=args.text_field, id_field=args.id_field,
                         noleak=True)
    check_n(args.n)  # before Spark starts
    options = build_options(args)
    check_outputs(args, [*args.train, args.eval])
    spark = _session(args)
    check_table_outputs(spark, args, [*args.train, args.eval])
    result = check(train, eval_source, args.n, options, spark=spark)
    try:
        if args.out_dir is not None:
            result.write(args.out_dir)
        if args.json is not None:
            _emit_json(spark, args.json, result.to_dict())
        print(result.summary(), file=sys.stderr if args.json == "-" else sys.stdout)
    finally:
        result.unpersist()
    return 1 if result.contaminated else 0


def run_images(args: argparse.Namespace) -> int:
    """The images command (SPEC section 7)."""
    from leakcheck_spark.images import ImageOptions, check_fields, images
    from leakcheck_spark.resplit import parse_priority

    if not args.datasets:
        raise LeakcheckError(errors.USAGE, "images needs at least one -d NAME[:SPLIT]=SOURCE")
    sources = apply_overrides([parse_source(d, args) for d in args.datasets], args.overrides,
                              IMAGE_OVERRIDE_KEYS)
    check_sources(sources)
    options = ImageOptions(threshold=args.threshold, path_field=args.path_field,
                           bytes_field=args.bytes_field, format=args.format)
    check_fields(sources, options)
    priority = parse_priority(args.priority)
    check_outputs(args, [s.path for s in sources])
    spark = _session(args)
    check_table_outputs(spark, args, [s.path for s in sources])
    check_listed_images(spark, args, sources, options)
    result = images(sources, options, spark=spark)
    if args.out_dir is not None:
        result.write(args.out_dir)
    if args.resplit_out is not None:
        result.write_resplit(args.resplit_out, priority)
    _print_report(spark, args, result)
    return 0


def _print_report(spark: SparkSession, args: argparse.Namespace,
                  result) -> None:  # noqa: ANN001 - a result
    """The report of an audit-like result: JSON (--json) and the terminal summary."""
    from leakcheck_spark.report import render

    report = result.to_dict()
    if args.json is not None:
        _emit_json(spark, args.json, report)
    if args.json != "-":
        print(render(report))
    result.unpersist()


# Exit code of a run ended by SIGTERM: 128 + the signal number, as a shell reports a child the
# signal ended (130 for Ctrl-C likewise), so a scheduler that sent it (a timeout, a pre-empted
# node) tells "stopped on request" from 2 (bad input: retrying will not help) and 1 (leakage).
# Returned rather than re-raised: main() returns its code to jobs/*.py and tests.
EXIT_SIGTERM = 128 + signal.SIGTERM
EXIT_SIGINT = 128 + signal.SIGINT


# Set by the SIGTERM handler.  `timeout` and schedulers signal the whole process group: the
# local JVM may die of the same SIGTERM first, so the run can fail on the lost JVM (a Py4J
# error) before or instead of the handler's exception -- still an interrupted run, not a bug.
_TERMINATED = threading.Event()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is: a KeyboardInterrupt, so it unwinds as Ctrl-C does --
    outputs rolled back (outputs.all_or_nothing), staging removed, nothing half written."""


def _on_sigterm(signum: int, frame: object) -> None:
    _unwinding()
    _TERMINATED.set()
    raise Terminated


def _on_sigint(signum: int, frame: object) -> None:
    # In place of PySpark's handler, which cancels all jobs from inside the handler: the main
    # thread is usually inside a JVM call on the same pinned Py4J connection, the nested call
    # fails as a reentrant read and prints a Py4J traceback (and the jobs run on).
    _unwinding()
    raise KeyboardInterrupt


def _unwinding() -> None:
    # No JVM call in a handler (see _on_sigint): an interrupted write cancels its own jobs as it
    # unwinds (outputs.staged), and the process ends right after the rollback, the JVM with it.
    # Later Ctrl-Cs and SIGTERMs are ignored while the run unwinds, so they cannot cut the
    # rollback short: it waits for the write's tasks (bounded) and then only renames and deletes.
    # Who will not wait sends SIGKILL; the next run then reports the leftovers.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _session(args: argparse.Namespace) -> SparkSession:
    """The run's session (:func:`session.get_session`; one it builds runs its Python workers
    quietly: no traceback from a worker whose task Spark killed).  Building a SparkContext
    installs PySpark's Ctrl-C handler; inside :func:`main` the CLI's own is put back."""
    from leakcheck_spark.session import get_session

    spark = get_session(args.master, _conf_pairs(args.conf), verbose=args.verbose,
                        remote=args.remote, quiet_workers=True)
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:  # inside main, on the main thread
        signal.signal(signal.SIGINT, _on_sigint)
    # A JVM that dies in the middle of the run breaks the connection of PySpark's accumulator
    # server, which prints a traceback from its own thread; the run says so in one error line
    # instead (errors.lost_jvm).
    server = getattr(getattr(spark, "_sc", None), "_accumulatorServer", None)
    if server is not None:
        server.handle_error = _no_trace
    return spark


def _no_trace(*_: object) -> None:
    pass


def _no_py4j_send_trace(record: logging.LogRecord) -> bool:
    # Py4J logs a traceback for a call cut by Ctrl-C, and for one whose JVM died under it: the
    # run reports either in one line.
    return not str(record.msg).startswith(("KeyboardInterrupt while sending command",
                                           "Exception while sending command"))


@contextlib.contextmanager
def _quiet_py4j() -> Iterator[None]:
    """No Py4J tracebacks on stderr inside the block: a JVM call cut by Ctrl-C or SIGTERM logs
    one on the root logger (and its connection's shutdown on a JVM that died with it another on
    ``py4j``); the run says "interrupted" in one line instead, and a JVM failure is one error
    line anyway."""
    root, py4j = logging.getLogger(), logging.getLogger("py4j")
    level = py4j.level
    root.addFilter(_no_py4j_send_trace)
    py4j.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        py4j.setLevel(level)
        root.removeFilter(_no_py4j_send_trace)


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` and Ctrl-C KeyboardInterrupt inside the block, once
    (see :func:`_unwinding`); the previous handlers are restored after it.  Only the CLI edge
    installs them (a library must not take over a process's signals), and only Python's main
    thread can."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _TERMINATED.clear()
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, _on_sigint),
                signal.SIGTERM: signal.signal(signal.SIGTERM, _on_sigterm)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script, ``python -m leakcheck_spark`` and ``jobs/*.py``."""
    with _quiet_py4j(), _signals_unwind():
        return _main(argv)


def writes_unicode(stream: object) -> bool:
    """Whether text `stream` can write any character: not in the C locale outside UTF-8 mode
    (``LC_ALL=C PYTHONUTF8=0``: ASCII), where JSON for it escapes every other character."""
    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name.startswith("utf")
    except LookupError:
        return False


def _plain_streams() -> None:
    """On a stdout or stderr that cannot write any character, write the others escaped
    (``caf\\xe9``) instead of failing a finished run on the first id or text that needs one."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and not writes_unicode(stream) and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _check_encoding(argv: Sequence[str]) -> None:
    """Raise USAGE for an argument this Python could not decode: outside UTF-8 mode, in the
    C locale (``LC_ALL=C PYTHONUTF8=0``), a non-ASCII byte arrives as a lone surrogate, which
    no file name or Spark call can take."""
    for word in argv:
        if any("\udc80" <= ch <= "\udcff" for ch in word):
            shown = os.fsencode(word).decode("utf-8", "replace")
            raise LeakcheckError(
                errors.USAGE, f"the argument {shown!r} holds characters this locale's encoding "
                f"({sys.getfilesystemencoding()}) cannot read",
                "run with a UTF-8 locale (LC_ALL=C.UTF-8) or with PYTHONUTF8=1")


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    def wants_json(words: Sequence[str]) -> bool:  # errors as JSON, as the report
        return any(w == "--json" or w.startswith("--json=") for w in words)

    as_json = wants_json(argv)
    config_file = None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
    log = logging.getLogger("leakcheck_spark")
    # PySpark logs a JVM stack trace for every analysis error before raising it; the error is
    # reported here as one line instead.
    logging.getLogger("DataFrameQueryContextLogger").setLevel(logging.CRITICAL)
    _plain_streams()
    confs: list[str] = []  # the run's --conf settings, once parsed
    try:
        _check_encoding(argv)
        _Parser.command = argv[0] if argv and argv[0] in COMMANDS else ""
        config_file = config.split_config(argv)[0]
        argv = expand_config(argv)
        as_json = wants_json(argv)  # also when the config file sets json
        args = build_parser().parse_args(argv)
        confs = list(getattr(args, "conf", None) or [])
        _expand_home(args)
        # expand_config takes --config FILE out of argv; the file is an input of the run all
        # the same, which check_outputs must know of.
        args.config = config_file
        if args.command is None:
            raise LeakcheckError(errors.USAGE, "no command given",
                                 "commands: audit, clean, resplit, images, fingerprint, check; "
                                 f"run '{PROG} --help'")
        log.addHandler(handler)
        log.setLevel(logging.WARNING if getattr(args, "quiet", False) else logging.INFO)
        return run(args)
    except KeyboardInterrupt as exc:
        return _interrupted(isinstance(exc, Terminated))
    except LeakcheckError as err:
        if _TERMINATED.is_set():
            return _interrupted(True)
        # An error in the config file itself is JSON too when the file sets json.
        _print_error(err, as_json or config.sets_json(config_file))
        return 2
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a stack trace
        if _TERMINATED.is_set():
            return _interrupted(True)
        # A --conf value Spark took at start may fail a query later, in words that do not
        # name it (spark.sql.files.maxPartitionBytes=0: "step cannot be 0").
        suspect = (f"it may come from --conf {', '.join(confs)}: run again without it; if the "
                   "failure stays, " if confs else "")
        err = errors.from_spark_exception(exc) or LeakcheckError(
            errors.IO, f"unexpected failure: {type(exc).__name__}: "
            f"{(str(exc).strip().splitlines() or [''])[0][:300]}",
            f"{suspect}this looks like a bug in leakcheck-spark; please report it with the "
            "command line",
        )
        _print_error(err, as_json)
        return 2
    finally:
        log.removeHandler(handler)


def job(command: str | None) -> int:
    """The spark-submit entry point of `command` (``jobs/*.py``; None: the command is the job's
    first argument): :func:`main` on the job's arguments, then the session stopped.  Left
    running, it would be torn down by the JVM's shutdown while its executors still report in
    (on ``local-cluster``, hundreds of ERROR lines after a successful run).  Not on Databricks,
    whose session belongs to the cluster."""
    code = main([*([command] if command else []), *sys.argv[1:]])
    if "DATABRICKS_RUNTIME_VERSION" not in os.environ:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
    return code


def _interrupted(terminated: bool) -> int:
    print(f"{PROG}: interrupted{' (SIGTERM)' if terminated else ''}", file=sys.stderr)
    return EXIT_SIGTERM if terminated else EXIT_SIGINT


def _print_error(err: LeakcheckError, as_json: bool) -> None:
    if as_json:
        print(json.dumps(err.to_dict(), ensure_ascii=not writes_unicode(sys.stderr)),
              file=sys.stderr)
    else:
        print(err.line(), file=sys.stderr)
