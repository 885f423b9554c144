"""Writing results so that a failed run leaves nothing that looks whole.

Every output is first written to a hidden staging path next to its destination and moved into
place only when all of it is written (:func:`staged`).  Spark writes the DataFrame outputs; small
artifacts (report.json) are written by the driver.  Local paths (and ``file:`` URIs) are moved with
the operating system's rename; other Hadoop URIs (``s3a://``, ``gs://``, ...) through the Hadoop
FileSystem API of the driver's JVM.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from typing import TYPE_CHECKING, Iterable, Iterator

from leakcheck_spark import errors
from leakcheck_spark.errors import LeakcheckError
from leakcheck_spark.paths import is_local, local_path, spark_uri
from leakcheck_spark.sources import CSV_DIALECT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@contextlib.contextmanager
def staged(spark: SparkSession, final: str) -> Iterator[str]:
    """Yield a staging path beside `final`; on success move it to `final` (replacing what was
    there), on failure remove it.  Works for a file or a directory."""
    parent, name = _split(final)
    staging = _join(parent, f".{name}.lc-tmp-{uuid.uuid4().hex[:10]}")
    fs = _FileSystem(spark, final)
    fs.mkdirs(parent)
    try:
        yield staging
    except BaseException:
        fs.delete(staging)
        raise
    fs.replace(staging, final)


def remove(spark: SparkSession, path: str) -> None:
    """Delete a file or directory if it exists."""
    _FileSystem(spark, path).delete(path)


def write_text_file(spark: SparkSession, path: str, text: str | Iterable[str]) -> None:
    """Write a text artifact from the driver, atomically; `text` may be an iterable of chunks,
    written as they come (so a long list need not sit whole in driver memory)."""
    _FileSystem(spark, path).write_text(path, [text] if isinstance(text, str) else text)


def write_json_file(spark: SparkSession, path: str, obj: object) -> None:
    write_text_file(spark, path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_table(df: DataFrame, path: str, fmt: str) -> None:
    """Write a result DataFrame as a directory of part files in `fmt` (parquet|csv|json).

    CSV has no arrays or structs, so those columns are written as JSON text.
    """
    import pyspark.sql.functions as F
    from pyspark.sql import types as T

    if fmt == "csv":
        df = df.select(*[
            F.to_json(f.name).alias(f.name)
            if isinstance(f.dataType, (T.ArrayType, T.StructType, T.MapType)) else F.col(f.name)
            for f in df.schema.fields
        ])
    writer = df.write.mode("error")
    if fmt == "csv":
        writer.options(header=True, **CSV_DIALECT).csv(spark_uri(path))
    elif fmt == "json":
        writer.json(spark_uri(path))
    else:
        writer.parquet(spark_uri(path))


def write_single_file(spark: SparkSession, df: DataFrame, path: str, fmt: str,
                      compression: str | None, text_column: str | None = None) -> None:
    """Write `df` (already in the wanted row order, one partition) as exactly one file at `path`.

    `text_column` writes that column's values as lines (the raw rows of line formats).
    """
    with staged(spark, path) as tmp_dir:
        writer = df.write.mode("error")
        if compression:
            writer = writer.option("compression", compression)
        if text_column is not None:
            writer.text(spark_uri(tmp_dir))
        elif fmt == "csv":
            writer.options(header=True, **CSV_DIALECT).csv(spark_uri(tmp_dir))
        elif fmt == "json":
            writer.json(spark_uri(tmp_dir))
        else:
            writer.parquet(spark_uri(tmp_dir))
        fs = _FileSystem(spark, path)
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


class _FileSystem:
    """The few filesystem operations outputs need, for local paths or any Hadoop URI."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.local = is_local(path)
        self.spark = spark
        self._fs = None
        if not self.local:
            jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None)
            if jvm is None:
                raise LeakcheckError(
                    errors.USAGE, f"cannot write {path} from this driver",
                    "write to a local path or run with a classic (non-Connect) session",
                )
            self._jvm = jvm
            conf = spark.sparkContext._jsc.hadoopConfiguration()
            uri = jvm.java.net.URI(path)
            self._fs = jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf)

    def _p(self, path: str):  # noqa: ANN202 - a Java Path
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def mkdirs(self, path: str) -> None:
        try:
            if self.local:
                os.makedirs(local_path(path), exist_ok=True)
            else:
                self._fs.mkdirs(self._p(path))
        except OSError as exc:
            raise LeakcheckError(errors.IO, f"cannot create {path}: {exc.strerror}") from None

    def exists(self, path: str) -> bool:
        if self.local:
            return os.path.lexists(local_path(path))
        return bool(self._fs.exists(self._p(path)))

    def delete(self, path: str) -> None:
        if self.local:
            p = local_path(path)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            elif os.path.lexists(p):
                os.remove(p)
        elif self.exists(path):
            self._fs.delete(self._p(path), True)

    def rename(self, src: str, dst: str) -> None:
        if self.local:
            os.replace(local_path(src), local_path(dst))
        elif not self._fs.rename(self._p(src), self._p(dst)):
            raise LeakcheckError(errors.IO, f"cannot move {src} to {dst}")

    def replace(self, src: str, dst: str) -> None:
        if self.exists(dst):
            self.delete(dst)
        self.rename(src, dst)

    def list(self, path: str) -> list[str]:
        if self.local:
            p = local_path(path)
            return [os.path.join(p, n) for n in sorted(os.listdir(p))]
        return sorted(str(s.getPath().toString()) for s in self._fs.listStatus(self._p(path)))

    def write_text(self, path: str, chunks: Iterable[str]) -> None:
        parent, name = _split(path)
        tmp = _join(parent, f".{name}.lc-tmp-{uuid.uuid4().hex[:10]}")
        try:
            if self.local:
                os.makedirs(local_path(parent), exist_ok=True)
                with open(local_path(tmp), "w", encoding="utf-8") as fh:
                    fh.writelines(chunks)
            else:
                out = self._fs.create(self._p(tmp), True)
                try:
                    for chunk in chunks:
                        out.write(bytearray(chunk.encode("utf-8")))
                finally:
                    out.close()
            self.replace(tmp, path)
        except OSError as exc:
            raise LeakcheckError(errors.IO, f"cannot write {path}: {exc.strerror}") from None
        finally:
            self.delete(tmp)
