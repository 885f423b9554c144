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


def home(path: str) -> str:
    """`path` with a leading ``~`` or ``~user`` expanded, as a shell expands it, which it does
    not after ``NAME=`` (``-d train=~/x.jsonl``), in a config file, nor when quoted: ``~/out``
    must not become a folder named ``~`` in the current directory.  (``./~`` names that one.)

    >>> home("~/x") == os.path.join(os.path.expanduser("~"), "x"), home("a/~"), home("s3a://~")
    (True, 'a/~', 's3a://~')
    """
    return os.path.expanduser(path) if os.fspath(path).startswith("~") else path


def local_path(path: str) -> str:
    """The OS path of a local path or ``file:`` URI."""
    return errors.display_path(path)


def spark_uri(path: str) -> str:
    """A path as Spark should be given it (absolute for local paths, so executors agree)."""
    return os.path.abspath(local_path(path)) if is_local(path) else path


_GLOB = re.compile(r"[*?\[{]")


def comparable(path: str) -> str:
    """`path` in a form in which two paths can be compared: a local one absolute with symlinks
    resolved, another URI as written without a trailing slash; a glob is cut to the directory
    it searches.

    >>> comparable("s3a://b/data/*.jsonl"), comparable("s3a://b/out/")
    ('s3a://b/data', 's3a://b/out')
    """
    return resolved(searched(path))


def searched(path: str) -> str:
    """The directory a glob searches (its part before the first glob character, up to the last
    ``/``), or `path` itself when it is no glob.

    >>> searched("data/t*/x.png"), searched("/x*.png"), searched("*.png"), searched("a/b")
    ('data', '/', '.', 'a/b')
    """
    glob = _GLOB.search(path)
    if not glob:
        return path
    head = path[:glob.start()]
    return (head.rsplit("/", 1)[0] or "/") if "/" in head else "."


def resolved(path: str) -> str:
    """:func:`comparable` for a path that is not a glob (a file a list names may hold ``[``).

    >>> resolved("s3a://b/img[1].png"), resolved("/a/b/../c/")
    ('s3a://b/img[1].png', '/a/c')
    """
    if is_local(path):
        return os.path.realpath(local_path(path))
    return path.rstrip("/") or path


def within(inner: str, outer: str) -> bool:
    """True when `inner` is `outer` or lies below it (both :func:`comparable`).

    >>> within("/a/b/c", "/a/b"), within("/a/bc", "/a/b"), within("/a", "/a"), within("/x", "/")
    (True, False, True, True)
    """
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")
