"""Paths as the user gives them, and as Spark must be given them.

A path is a plain local path, a ``file:`` URI or any other Hadoop URI (``s3a://``, ``hdfs://``,
``dbfs:/``).  Local paths are made absolute before Spark sees them: executors (separate processes,
maybe a Spark Connect server) do not share the driver's current directory.
"""

from __future__ import annotations

import os
import re

from leakcheck_spark import errors

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def is_local(path: str) -> bool:
    """True for a plain path or a ``file:`` URI (not ``s3a://``, ``hdfs:/``, ``dbfs:/`` ...).

    >>> is_local("out/report"), is_local("file:///tmp/x"), is_local("s3a://b/x")
    (True, True, False)
    """
    return not _SCHEME.match(path) or path.lower().startswith("file:")


def local_path(path: str) -> str:
    """The OS path of a local path or ``file:`` URI."""
    return errors.display_path(path)


def spark_uri(path: str) -> str:
    """A path as Spark should be given it (absolute for local paths, so executors agree)."""
    return os.path.abspath(local_path(path)) if is_local(path) else path
