"""The only place that builds a SparkSession.

`get_session` reuses an active session (spark-submit, Databricks, a notebook, the test fixture)
and otherwise builds one: ``--master`` if given, else ``local[*]``.  A session it builds runs its
Python workers on the driver's interpreter and keeps the terminal free of JVM log noise; in local
mode it also sizes the driver and its shuffles for one machine and picks the JVM's throughput
garbage collector.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from leakcheck_spark import errors
from leakcheck_spark.errors import LeakcheckError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Shuffle partitions of a session built on one machine: at least 16 (measured on 2 cores, 4, 8
# and 16 partitions give the same walls within noise at 100k-1M records: benchmarks/RESULTS.md),
# and two per core on a bigger machine, so that the stages after a shuffle keep every core busy.
_LOCAL_SHUFFLE_PARTITIONS = 16
_LOCAL_PARTITIONS_PER_CORE = 2
_LOCAL_CORES = re.compile(
    r"local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\]|-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\])?")
_LOCAL_DRIVER_MEMORY = "4g"
# Seconds to wait for a Spark Connect server to accept a connection before the session starts.
CONNECT_TIMEOUT = 10.0
_LOG4J = Path(__file__).with_name("log4j2.properties")
# In local mode every task runs in the driver JVM, on a few cores.  The JVM's default collector
# (G1) spends them on concurrent marking, refinement threads and write barriers; the throughput
# collector does its work in short stop-the-world pauses instead, which suits a batch job's
# short-lived garbage.  Measured on 2 cores (benchmarks/RESULTS.md): the 501k near audit
# 67-71 s instead of 75-80 s, alternating.
_LOCAL_GC = "-XX:+UseParallelGC"
# What, in a user's own JVM options, takes the place of one of ours: a collector of their own
# (the JVM refuses to start with two), a log4j configuration of their own.
_TAKES_THE_PLACE_OF = {
    _LOCAL_GC: re.compile(r"-XX:[+-]Use\w*GC\b"),
    "-Dlog4j2.configurationFile=": re.compile(r"-Dlog4j2?\.configurationFile="),
}
_JAVA_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")

# Settings a session we build gets unless the user sets them: a quiet console and Arrow on.
_DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}
# The Python daemon of the sessions the CLI builds (see _daemon.py): a worker whose task Spark
# killed ends without printing a traceback before the run's one error line.
DAEMON_MODULE = ("spark.python.daemon.module", "leakcheck_spark._daemon")


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session: this process then has no JVM to call."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def get_session(
    master: str | None = None,
    conf: Iterable[tuple[str, str]] = (),
    app_name: str = "leakcheck-spark",
    verbose: bool = False,
    remote: str | None = None,
    quiet_workers: bool = False,
) -> SparkSession:
    """Return the active SparkSession, or build one.

    Args:
        master: the Spark master; None keeps an active session's or spark-submit's master and
            falls back to ``local[*]``.
        conf: extra ``(key, value)`` settings (``--conf``).
        app_name: the application name shown by Spark.
        verbose: keep Spark's own logging (INFO) instead of warnings only.
        remote: a Spark Connect URL (``sc://HOST:PORT``); None falls back to ``SPARK_REMOTE``.
        quiet_workers: a session built here forks its Python workers from
            ``leakcheck_spark._daemon`` (:data:`DAEMON_MODULE`), unless ``conf`` or spark-submit
            names a daemon module.  The CLI's: a session running a user's other work keeps
            PySpark's own daemon.
    """
    from pyspark.sql import SparkSession

    conf = list(conf)
    flag = "--remote" if remote else "SPARK_REMOTE"
    remote = remote or os.environ.get("SPARK_REMOTE")
    if remote:
        return _connect_session(remote, master, conf, app_name, flag)
    if master is not None:
        check_master(master)
    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        for key, value in conf:
            try:
                active.conf.set(key, value)
            except Exception as exc:  # noqa: BLE001 - a value Spark refuses
                raise _conf_error(exc, [(key, value)]) or _start_error(None, exc) from None
        return active
    # Executors started by this process must run this interpreter (the one with our packages).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {"spark.app.name": app_name}  # what the session is built with, in order
    submitted = _submit_conf()
    launched_by_submit = "spark.master" in submitted
    chosen = master or (None if launched_by_submit else "local[*]")
    if chosen:
        settings["spark.master"] = chosen
    if chosen and chosen.startswith("local"):
        # Loopback only: no hostname warnings, no listening on the network for a laptop run.
        settings["spark.driver.host"] = settings["spark.driver.bindAddress"] = "127.0.0.1"
        # Spark's 200 shuffle partitions suit a cluster; on one machine they are mostly overhead.
        settings["spark.sql.shuffle.partitions"] = str(local_shuffle_partitions(chosen))
        # Local mode runs every task inside the driver JVM: Spark's 1g default thrashes there.
        settings["spark.driver.memory"] = _LOCAL_DRIVER_MEMORY
    driver_opts, executor_opts = [], []
    if not launched_by_submit and not verbose and _LOG4J.exists():
        log_opt = f"-Dlog4j2.configurationFile={_LOG4J.as_uri()}"
        driver_opts.append(log_opt)
        executor_opts.append(log_opt)
    if chosen and _runs_tasks_in_driver(chosen):
        driver_opts.append(_LOCAL_GC)
    users = dict(conf)  # the last --conf of a key wins, as in spark-submit
    for key, ours in zip(_JAVA_OPTIONS, (driver_opts, executor_opts)):
        merged = merge_java_options(ours, users.get(key))
        if merged:
            settings[key] = merged
    settings.update(_DEFAULTS)
    if quiet_workers and DAEMON_MODULE[0] not in {**users, **submitted}:
        settings[DAEMON_MODULE[0]] = DAEMON_MODULE[1]
    for key, value in conf:
        if key not in _JAVA_OPTIONS:
            settings.pop(key, None)  # the user's value, in the user's order
            settings[key] = value
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    if not launched_by_submit:
        _prepare_jvm_launch()
    try:
        if quiet_workers and not launched_by_submit:
            _launch_jvm(settings)
        session = builder.getOrCreate()
        # The SQL settings are checked when the session state is first built: here, not in the
        # middle of the run.
        session.conf.get("spark.sql.session.timeZone")
    except Exception as exc:  # noqa: BLE001 - a master that cannot be reached, a bad setting
        raise _conf_error(exc, conf) or _start_error(chosen, exc) from None
    if launched_by_submit and not verbose:
        # spark-submit's JVM logs at INFO (thousands of lines); keep a job's output readable.
        session.sparkContext.setLogLevel("WARN")
    return session


def _prepare_jvm_launch() -> None:
    """Before this process starts a JVM: raise IO for a Java or Spark install that is not
    there (spark-submit would print two lines of shell errors and PySpark "Java gateway process
    exited"), and give the JVM a UTF-8 locale where this process runs in the C locale.

    Under ``LC_ALL=C`` (containers, CI scripts) Python reads and names files in UTF-8 (its
    UTF-8 mode) while Java would name them in ASCII: a file named ``é.jsonl`` would not be
    found.  The JVM, and the Python workers it starts, get ``LC_ALL=C.UTF-8`` instead."""
    import locale
    import shutil

    from pyspark import SparkContext

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return  # a JVM is there already
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home and not os.path.isfile(os.path.join(spark_home, "bin", "spark-submit")):
        raise LeakcheckError(errors.IO, f"SPARK_HOME is {spark_home}, which holds no "
                             "bin/spark-submit", "unset SPARK_HOME to use the Spark of the "
                             "pyspark package, or point it at a Spark 4 install")
    java_home = os.environ.get("JAVA_HOME")
    if java_home and not os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        raise LeakcheckError(errors.IO, f"JAVA_HOME is {java_home}, which holds no bin/java",
                             "point JAVA_HOME at a Java 17 (or later) install, or unset it to "
                             "use the java on PATH")
    if not java_home and shutil.which("java") is None:
        raise LeakcheckError(errors.IO, "no Java found: JAVA_HOME is not set and no java is on "
                             "PATH", "install Java 17 or later, or set JAVA_HOME to one")
    codeset = getattr(locale, "nl_langinfo", None)
    if codeset is not None and codeset(locale.CODESET) in _ASCII_CODESETS and (
            sys.flags.utf8_mode):
        os.environ["LC_ALL"] = "C.UTF-8"


# What nl_langinfo(CODESET) says in the C / POSIX locale.
_ASCII_CODESETS = ("ANSI_X3.4-1968", "ASCII", "US-ASCII")

# The one line Java prints on every start of Spark 4's JVM (Spark adds the vector incubator
# module, and Java has no switch for the warning).  Dropped from the JVM's stderr of a session
# the CLI starts (:func:`_launch_jvm`), so a run's stderr holds only its own lines.
_JVM_START_WARNING = b"WARNING: Using incubator modules: jdk.incubator.vector"
# Lines of the JVM's stderr looked at for that warning (the launcher's "Picked up ..." notes
# may come first); everything after them is passed on as it comes.
_JVM_HEAD_LINES = 4


def _launch_jvm(settings: dict[str, str]) -> None:
    """Start the session's JVM (as PySpark would: spark-submit with `settings`) with its stderr
    through a pipe that a thread copies to ours, less :data:`_JVM_START_WARNING`.

    Only for a session the CLI starts: the JVM and its Python workers write their stderr (logs,
    worker tracebacks) for the life of the process through that thread.  Nothing to do when
    this process already has a JVM."""
    import threading

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    read_end, write_end = os.pipe()
    copier = threading.Thread(target=_copy_stderr, args=(read_end,), daemon=True,
                              name="leakcheck-jvm-stderr")
    copier.start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})
    except BaseException:
        os.close(write_end)
        copier.join(5)  # what the JVM said before it ended comes before our error line
        raise
    os.close(write_end)
    SparkContext._ensure_initialized(gateway=gateway)


def _copy_stderr(fd: int, out: int = 2) -> None:
    """Copy everything read from `fd` to `out`, except :data:`_JVM_START_WARNING` among the
    first lines, until `fd` ends.  Reading never stops early: a JVM whose stderr pipe fills up
    would block."""
    head, lines = b"", 0
    writable = True

    def write(data: bytes) -> None:
        nonlocal writable
        while data and writable:
            try:
                data = data[os.write(out, data):]
            except OSError:  # our stderr is gone (closed, a broken pipe): keep draining
                writable = False

    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        if lines >= _JVM_HEAD_LINES:
            write(chunk)
            continue
        head += chunk
        while lines < _JVM_HEAD_LINES and b"\n" in head:
            line, head = head.split(b"\n", 1)
            lines += 1
            if line.rstrip(b"\r") == _JVM_START_WARNING:
                lines = _JVM_HEAD_LINES
            else:
                write(line + b"\n")
        if lines >= _JVM_HEAD_LINES:
            write(head)
            head = b""
    write(head)
    os.close(fd)


def session_or_default(spark: object) -> SparkSession:
    """The library's `spark` argument: None gets the active session or builds one
    (:func:`get_session`); a session (classic or Spark Connect) is used as it is.

    Raises:
        LeakcheckError(LC_E_USAGE): anything else (a master URL string, say), or a session that
            has been stopped.
    """
    if spark is None:
        return get_session()
    # Duck-typed: a Spark Connect session is not a subclass of the classic SparkSession.
    if not all(hasattr(spark, attr) for attr in ("read", "createDataFrame", "conf")):
        raise LeakcheckError(errors.USAGE, f"spark must be a SparkSession or None, not {spark!r}",
                             "pass spark=None to use the active session (or start a local one), "
                             "or a session of yours")
    return live(spark)


def stopped(spark: SparkSession) -> bool:
    """True once `spark` has been stopped (``spark.stop()``): its DataFrames can run no more."""
    if is_connect(spark):
        return bool(spark.is_stopped)
    return spark.sparkContext._jsc is None


def live(spark: SparkSession) -> SparkSession:
    """`spark`, if it has not been stopped.  A stopped session fails in Spark with a
    NullPointerException trace (or an AttributeError on None) at the first call that needs it;
    a result kept after ``spark.stop()`` and written, or a stopped session passed in, meets this
    one line instead.

    Raises:
        LeakcheckError(LC_E_USAGE): the session has been stopped.
    """
    if stopped(spark):
        raise LeakcheckError(
            errors.USAGE, "the Spark session has been stopped (spark.stop()), so its DataFrames "
            "cannot run",
            "write a result before stopping its session; to go on, run the call again with a "
            "new session (spark=None gets the active one or starts one)")
    return spark


# The masters Spark can start from this process (spark-submit refuses any other scheme, with a
# JVM stack trace on the terminal; SparkContext parses the local forms).
_MASTER = re.compile(r"local|local\[(?:\*|[1-9]\d*)(?:\s*,\s*\d+)?\]"
                     r"|local-cluster\[\s*[1-9]\d*\s*,\s*[1-9]\d*\s*,\s*[1-9]\d*\s*\]"
                     r"|spark://\S+|k8s://\S+|yarn")


def check_master(master: str) -> None:
    """Refuse a ``--master`` Spark could not start (LC_E_USAGE), before Spark is launched.

    >>> check_master("local[*]"), check_master("spark://h1:7077,h2:7077")
    (None, None)
    """
    if not _MASTER.fullmatch(master):
        raise LeakcheckError(errors.USAGE, f"--master {master!r} is not a Spark master URL",
                             "write local, local[N], local[*], local[N,F], local-cluster[W,C,MB], "
                             "spark://HOST:PORT, yarn or k8s://HOST:PORT")


def merge_java_options(ours: list[str], theirs: str | None) -> str:
    """Our JVM options followed by the user's, without those of ours the user's replace.

    A ``--conf spark.driver.extraJavaOptions=...`` adds to what a session we build needs (the
    quiet log4j configuration, the local collector) instead of silently dropping it; where the
    user picks a collector or a log4j configuration of their own, theirs is the one kept."""
    theirs = (theirs or "").strip()
    kept = [opt for opt in ours
            if not any(opt.startswith(prefix) and pattern.search(theirs)
                       for prefix, pattern in _TAKES_THE_PLACE_OF.items())]
    return " ".join([*kept, theirs] if theirs else kept)


def local_shuffle_partitions(master: str, cpus: int | None = None) -> int:
    """Shuffle partitions for a session on one machine: ``local``, ``local[N]``, ``local[*]``
    (`cpus`, default this machine's), ``local[N,F]``, ``local-cluster[W,C,M]`` (W x C cores)."""
    match = _LOCAL_CORES.fullmatch(master.strip())
    cores = 1
    if match and match.group(1) == "*":
        cores = cpus or _machine_cpus()
    elif match and match.group(1):
        cores = int(match.group(1))
    elif match and match.group(2):
        cores = int(match.group(2)) * int(match.group(3))
    return max(_LOCAL_SHUFFLE_PARTITIONS, _LOCAL_PARTITIONS_PER_CORE * cores)


def _machine_cpus() -> int:
    """The CPUs this process may run on (what ``local[*]`` gives Spark, near enough)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _runs_tasks_in_driver(master: str) -> bool:
    """True for ``local``, ``local[N]``, ``local[*]``, ``local[N,F]`` (not ``local-cluster``)."""
    return master == "local" or master.startswith("local[")


def _connect_session(remote: str, master: str | None, conf: list[tuple[str, str]],
                     app_name: str, flag: str = "--remote") -> SparkSession:
    """A Spark Connect session: the server owns the master, the JVM and the logs; settings
    given here are the session's SQL settings."""
    from pyspark.sql import SparkSession

    if master:
        raise LeakcheckError(errors.USAGE, f"--master {master} and Spark Connect ({remote}) "
                             "cannot be used together", "the Connect server owns the master: "
                             "drop --master, or --remote / SPARK_REMOTE")
    check_connect_server(remote, flag)
    builder = SparkSession.builder.remote(remote).appName(app_name)
    for key, value in [*_DEFAULTS.items(), *conf]:
        if key.startswith("spark.sql."):
            builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - an unreachable server, a missing client package
        raise _start_error(remote, exc) from None
    for key, value in conf:
        if not key.startswith("spark.sql."):
            session.conf.set(key, value)
    return session


def check_connect_server(remote: str, flag: str = "--remote",
                         timeout: float = CONNECT_TIMEOUT) -> None:
    """Refuse a malformed Spark Connect URL, and a server that cannot be reached (a host that
    does not resolve or answer, a port nobody listens at): pyspark's client would retry for
    ~10 minutes without a word.

    ``local`` URLs (pyspark starts a server itself) pass as they are; without the Connect
    client packages, starting the session says what is missing.  Behind a proxy (``grpc_proxy``,
    ``https_proxy``, ... set for the host) gRPC goes through it, so the host is not tried
    directly.

    Raises:
        LeakcheckError: LC_E_USAGE for a URL that is not ``sc://HOST[:PORT][/;KEY=VALUE...]``,
            LC_E_IO for a host or port that cannot be reached.
    """
    import socket
    import urllib.request
    from urllib.parse import urlparse

    if remote.startswith("local"):
        return
    try:
        from pyspark.sql.connect.client import DefaultChannelBuilder
    except ImportError:
        return
    try:
        DefaultChannelBuilder(remote)  # pyspark's own checks of the URL
        url = urlparse("http" + remote[2:])
        host, port = url.hostname, url.port or DefaultChannelBuilder.default_port()
    except ValueError:
        raise LeakcheckError(errors.USAGE, f"{flag} {remote}: not a Spark Connect URL",
                             "write sc://HOST:PORT (port 15002 if left out; settings after /;, "
                             "e.g. sc://HOST:443/;use_ssl=true;token=...)") from None
    proxies = urllib.request.getproxies()
    if proxies.keys() & {"grpc", "https", "http"} and not urllib.request.proxy_bypass(host):
        return
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        reason = ("no answer" if isinstance(exc, TimeoutError) else
                  exc.strerror.lower() if exc.strerror else str(exc) or type(exc).__name__)
        raise LeakcheckError(errors.IO, f"cannot reach the Spark Connect server {remote} "
                             f"({host} port {port}): {reason}",
                             f"is the server up and listening there? check {flag}") from None


_GRPC_DETAILS = re.compile(r'^\s*details = "(.*)"\s*$', re.M)
_BAD_CONF = re.compile(r"\[INVALID_CONF_VALUE[.\w]*\] ([^\n]*?)(?: SQLSTATE: \w+)?$", re.M)


def _conf_error(exc: BaseException, conf: Iterable[tuple[str, str]]) -> LeakcheckError | None:
    """LC_E_USAGE naming the ``--conf`` settings a failure names (None if it names none)."""
    text = str(exc)
    cause = getattr(exc, "java_exception", None)  # a Py4JJavaError: its Java causes too
    while cause is not None:
        try:
            text, cause = f"{text}\n{cause.getMessage()}", cause.getCause()
        except Exception:  # noqa: BLE001 - the gateway may be gone already
            break
    named = [f"{key}={value}" for key, value in conf if key in text]
    if not named:
        return None
    m = _BAD_CONF.search(text)
    reason = m.group(1) if m else (text.strip().splitlines() or [""])[0][:300]
    return LeakcheckError(errors.USAGE, f"Spark refused --conf {', '.join(named)}: {reason}",
                          "fix or drop that --conf setting")


def _start_error(master: str | None, exc: BaseException) -> LeakcheckError:
    """The one-line error for a session that would not start (the deepest cause, not the JVM
    stack trace)."""
    reason = (str(exc).strip().splitlines() or [""])[0]
    cause = getattr(exc, "java_exception", None)  # a Py4JJavaError: follow the Java causes
    while cause is not None:
        try:
            message, cause = cause.getMessage(), cause.getCause()
        except Exception:  # noqa: BLE001 - the gateway may be gone already
            break
        reason = message or reason
    grpc = _GRPC_DETAILS.search(str(exc))  # a Connect error: "<_InactiveRpcError of RPC ..."
    if grpc:
        reason = grpc.group(1)
    reason = reason.strip().splitlines()[0][:300] if reason.strip() else type(exc).__name__
    if "stopped SparkContext" in reason:  # what a standalone master that never answers leaves
        reason = "no answer from the master (Spark gave up and stopped the session)"
    where = f"on {master}" if master else "(spark-submit's master)"
    hint = ("is a Spark Connect server listening there? check --remote / SPARK_REMOTE"
            if master and master.startswith("sc://") else
            "check --master (is the cluster up and reachable?)")
    return LeakcheckError(errors.IO, f"cannot start a Spark session {where}: {reason}",
                          f"{hint} and --conf settings")


def _submit_conf() -> dict:
    """Settings spark-submit passed to this Python process (empty when run directly).

    spark-submit hands them to the JVM it started, not to Python: a ``SparkConf`` reads them
    only once this process is connected to that JVM's gateway (before that it is empty, and a
    ``local[*]`` default here would silently replace the cluster's master)."""
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: dict) -> Iterator[None]:
    """Spark SQL settings for the queries run inside the block, restored afterwards."""
    live(spark)
    old = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, str(v))
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def release(frames: Iterable[DataFrame]) -> None:
    """Unpersist the cached `frames` (of a run that is failing, or a result's ``unpersist()``).
    A frame that cannot be released (Spark's JVM out of memory) must not replace the run's own
    error, which the caller re-raises; a JVM that is gone is raised as such, the clearer of the
    two (the call that hit it may fail in any way: "... does not exist in the JVM").  Frames of
    a stopped session hold nothing any more: their cache went with it."""
    for df in frames:
        session = getattr(df, "sparkSession", None)
        if session is not None and stopped(session):
            return
        try:
            df.unpersist()
        except Exception as exc:
            if errors.lost_jvm(exc) is not None:
                raise
            continue
