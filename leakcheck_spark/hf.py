"""``hf:ORG/NAME`` sources: a Hugging Face dataset, loaded by the optional ``datasets`` package.

``datasets`` loads a dataset into Arrow files on the driver's disk (downloading it only if it is
not cached and ``HF_HUB_OFFLINE`` is not set: we never fetch anything ourselves).  Each HF split is
then handed to Spark as an Arrow table (``createDataFrame`` of a ``pyarrow.Table``, which works the
same in a classic session and over Spark Connect).  The rows pass through the driver once, so this
suits datasets that fit on one machine -- which is what ``datasets`` itself assumes; for larger
ones, pass the Parquet files (in the HF cache or on object storage) as a glob instead.

Each HF split becomes one group (its split name), unless the source names a split
(``-d NAME:SPLIT=hf:...``); ``-o NAME.hf_split=S`` reads only HF split S and ``-o NAME.config=C``
picks a configuration.  Rows are numbered in the order ``datasets`` gives the splits, then in row
order, like files in path order: the position columns below feed the same numbering as files.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from leakcheck_spark import errors
from leakcheck_spark.errors import LeakcheckError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from leakcheck_spark.options import Source

PREFIX = "hf:"
# Hidden columns the rows carry: the source (as the "file"), the split's position (as the
# "block"), the row's position within the split, and the split's name.
POSITION_COLUMNS = ("_lc_file", "_lc_block", "_lc_seq", "_lc_split")
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def read(spark: SparkSession, src: Source) -> DataFrame:
    """The rows of every HF split of `src` (or of its ``hf_split``): the dataset's own columns
    (those Spark can represent) followed by :data:`POSITION_COLUMNS`.

    Raises:
        LeakcheckError: LC_E_BAD_SPEC for a malformed name, LC_E_USAGE when ``datasets`` is not
            installed, LC_E_IO when the dataset, configuration or split cannot be loaded.
    """
    repo = src.path[len(PREFIX):]
    if not _REPO.fullmatch(repo):
        raise LeakcheckError(errors.BAD_SPEC, f"bad Hugging Face dataset name {repo!r} in "
                             f"{src.label}", "write hf:ORG/NAME (or hf:NAME)")
    datasets = _import_datasets(src)
    try:
        loaded = datasets.load_dataset(repo, src.config, split=src.hf_split)
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds; all mean "cannot load"
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise LeakcheckError(
            errors.IO, f"cannot load {src.path} ({src.label}): {reason}",
            "is the dataset in the Hugging Face cache (with HF_HUB_OFFLINE=1 nothing is "
            "downloaded)? check -o NAME.config= and -o NAME.hf_split=") from None
    splits = [(src.hf_split, loaded)] if src.hf_split else list(loaded.items())
    out = None
    for position, (split, ds) in enumerate(splits):
        df = spark.createDataFrame(_with_position(ds.with_format("arrow")[:], src.path, position,
                                                  split))
        out = df if out is None else out.unionByName(df, allowMissingColumns=True)
    return out


def _import_datasets(src: Source):  # noqa: ANN202 - the datasets module
    try:
        import datasets
    except ImportError:
        raise LeakcheckError(
            errors.USAGE, f"{src.label} needs the optional 'datasets' package, which is not "
            "installed", "pip install 'leakcheck-spark[hf]' (or pass the dataset's Parquet "
            "files as a glob)") from None
    # Our own progress lines say what is read; the libraries' bars and notices would interleave
    # (huggingface_hub's: a warning for each retry of a Hub it cannot reach, before the error).
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        import huggingface_hub
    except ImportError:  # pragma: no cover - datasets depends on it
        pass
    else:
        huggingface_hub.utils.logging.set_verbosity_error()
    return datasets


def _with_position(table, path: str, position: int, split: str):  # noqa: ANN001, ANN202
    """`table` (a pyarrow.Table) without the columns Spark cannot represent, plus the position
    columns."""
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_type

    keep = []
    for f in table.schema:
        try:
            from_arrow_type(f.type)
        except Exception:  # noqa: BLE001, S112 - an Arrow type Spark has no type for
            continue
        if not f.name.startswith("_lc_"):
            keep.append(f.name)
    table = table.select(keep)
    n = table.num_rows
    return (table.append_column("_lc_file", pa.repeat(pa.scalar(path, pa.string()), n))
            .append_column("_lc_block", pa.array(np.full(n, position, np.int64)))
            .append_column("_lc_seq", pa.array(np.arange(n, dtype=np.int64)))
            .append_column("_lc_split", pa.repeat(pa.scalar(split, pa.string()), n)))
