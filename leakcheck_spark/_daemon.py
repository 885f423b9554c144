"""PySpark's Python daemon, without a traceback for each worker whose task Spark killed.

When one task fails (a malformed row in one input file, say), Spark kills the other running
tasks of the job and closes their workers' sockets.  Each of those workers, forked by
``pyspark.daemon``, then fails to flush its output to the closed socket, and the daemon prints a
``BrokenPipeError`` traceback per worker on its stderr, which the JVM copies onto ours: Python
tracebacks before the run's one error line (SPEC section 9).  Nobody is there to read what that
worker had to say, so this module lets such a worker end quietly, with the exit code the daemon
gives a failed worker; everything else is ``pyspark.daemon`` as it is.

Sessions the CLI builds select it with ``spark.python.daemon.module`` (session.py); Spark runs it
as ``python -m leakcheck_spark._daemon`` on every executor, which has this package anyway to run
our UDFs.  A genuine failure of a task (an exception in a UDF) is not touched: the worker sends
it to the JVM over the socket, which is open then, and Spark reports it.

Only the standard library and ``pyspark.daemon`` are imported here (and ``leakcheck_spark``'s
own ``__init__``, which ``python -m`` imports first): the daemon forks every worker, and pyarrow
or pandas imported before a fork can deadlock the child (SPARK-54456).  The workers import them
after the fork, as with PySpark's own daemon.
"""

from __future__ import annotations

import os
import socket

import pyspark.daemon

# The JVM went away from this worker's socket: it killed the task (or the job is over).
PEER_GONE = (BrokenPipeError, ConnectionResetError)
# What pyspark.daemon's manager exits a forked worker with when the worker raised.
FAILED = 1

_spark_worker = pyspark.daemon.worker


def worker(sock: socket.socket, authenticated: bool) -> int:
    """``pyspark.daemon.worker``, ending the process quietly where the JVM closed the socket.

    It exits the way the daemon ends a worker that raised (``os._exit(1)``), minus the
    traceback; returning a non-zero code instead would have the daemon wait for the socket to
    close and exit 0.  No one reads the code: the daemon ignores SIGCHLD, and the JVM, which
    closed the socket, has already moved on.
    """
    try:
        return _spark_worker(sock, authenticated)
    except PEER_GONE:
        os._exit(FAILED)


def main() -> None:
    """Run PySpark's daemon with :func:`worker` for its forked workers.

    ``pyspark.daemon.manager`` looks ``worker`` up in its module's globals at each fork, so
    replacing the module attribute is what the forked children call."""
    pyspark.daemon.worker = worker
    pyspark.daemon.manager()


if __name__ == "__main__":
    main()
