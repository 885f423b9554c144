"""Helpers shared by the benchmark scripts: run a command and measure its memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple


def tree_pss(pid: int) -> tuple[int, int, int]:
    """Proportional set size (bytes) of `pid` and all its descendants, of `pid` alone, and of
    the Java processes among its descendants (Linux /proc).

    PSS, not RSS: PySpark forks its Python workers from one daemon, and RSS would count the
    pages they share (the interpreter, pandas, pyarrow) once per worker.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    total, own, java, stack = 0, 0, 0, [pid]
    while stack:
        p = stack.pop()
        stack.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                pss = next((int(line.split()[1]) * 1024 for line in fh
                            if line.startswith("Pss:")), 0)
            with open(f"/proc/{p}/comm") as fh:
                is_java = fh.read().strip() == "java"
        except OSError:
            continue
        total += pss
        own += pss if p == pid else 0
        java += pss if is_java else 0
    return total, own, java


class Measured(NamedTuple):
    """What :func:`run` measured: wall seconds, peak PSS of the whole process tree, exit code,
    peak PSS of the command's own process and of the Java processes in its tree.  For
    ``leakcheck-spark`` in local mode the first is the Python driver (where anything collected
    would land) and the second the Spark JVM (driver and executor in one, heap capped by
    ``spark.driver.memory``); the Python workers are the rest."""

    wall: float
    peak: int
    code: int
    own_peak: int
    java_peak: int


SAMPLE_EVERY = 0.2  # seconds between memory samples (longer when a sample is costly)


def run(cmd: list[str], timeout: float | None = None, ok: tuple[int, ...] = (0, 1),
        stdout: str | None = None) -> Measured:
    """Run `cmd` and measure it (:class:`Measured`).
    Memory is sampled every :data:`SAMPLE_EVERY` seconds, or 20 times a sample's cost.

    Its standard output goes to the file `stdout` (default: discarded).  Raises TimeoutError
    (after killing the whole process group) past `timeout` seconds; exits with the command's
    stderr if it fails.
    """
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as err, open(stdout or os.devnull, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True,
                                start_new_session=True)
        peak = own_peak = java_peak = 0
        while proc.poll() is None:
            t = time.monotonic()
            total, own, java = tree_pss(proc.pid)
            peak, own_peak, java_peak = max(peak, total), max(own_peak, own), max(java_peak, java)
            cost = time.monotonic() - t
            if timeout is not None and time.monotonic() - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise TimeoutError(cmd[0])
            # Reading smaps_rollup walks the page tables of every process (about 0.1 s of CPU
            # for a Spark JVM of a few GiB, measured): sampling every 0.2 s would take a third
            # of a core from the measured command.  At most ~5% of one core goes to sampling.
            time.sleep(max(SAMPLE_EVERY, 20 * cost))
        wall = time.monotonic() - start
        if proc.returncode not in ok:
            err.seek(0)
            sys.exit(f"benchmark command failed ({proc.returncode}):\n{err.read()[-5000:]}")
    return Measured(wall, peak, proc.returncode, own_peak, java_peak)
