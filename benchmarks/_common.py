"""Helpers shared by the benchmark scripts: run a command and measure its memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time


def tree_pss(pid: int) -> int:
    """Proportional set size (bytes) of `pid` and all its descendants (Linux /proc).

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
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        stack.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total


SAMPLE_EVERY = 0.2  # seconds between memory samples (longer when a sample is costly)


def run(cmd: list[str], timeout: float | None = None, ok: tuple[int, ...] = (0, 1),
        stdout: str | None = None) -> tuple[float, int, int]:
    """Run `cmd`; return (wall seconds, peak PSS bytes of its process tree, exit code).
    Memory is sampled every :data:`SAMPLE_EVERY` seconds, or 20 times a sample's cost.

    Its standard output goes to the file `stdout` (default: discarded).  Raises TimeoutError
    (after killing the whole process group) past `timeout` seconds; exits with the command's
    stderr if it fails.
    """
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as err, open(stdout or os.devnull, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True,
                                start_new_session=True)
        peak = 0
        while proc.poll() is None:
            t = time.monotonic()
            peak = max(peak, tree_pss(proc.pid))
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
    return wall, peak, proc.returncode
