"""leakcheck-spark: audit train/test leakage within and across ML benchmark datasets, on Spark.

>>> import leakcheck_spark as L                                          # doctest: +SKIP
>>> res = L.audit([L.Source("a", "a.jsonl", split="train", text_field="func")])  # doctest: +SKIP

The public API: :class:`Source`, :class:`Options`, :func:`audit` (-> :class:`AuditResult`),
:func:`clean` (-> :class:`CleanResult`), :func:`resplit` (-> :class:`ResplitResult`),
:func:`check` (-> :class:`CheckResult`), :func:`fingerprint_sources`, :class:`LeakcheckError`;
the normalisers in :mod:`leakcheck_spark.normalize`; the stages in :mod:`leakcheck_spark.sources`,
:mod:`leakcheck_spark.match` (each ``DataFrame -> DataFrame``).
"""

from __future__ import annotations

__version__ = "0.1.0"

from leakcheck_spark.audit import AuditResult, audit  # noqa: E402  (binds the function)
from leakcheck_spark.check import CheckResult, check  # noqa: E402
from leakcheck_spark.clean import CleanResult, clean  # noqa: E402
from leakcheck_spark.errors import LeakcheckError  # noqa: E402
from leakcheck_spark.fingerprint import fingerprint_sources  # noqa: E402
from leakcheck_spark.options import Options, Source  # noqa: E402
from leakcheck_spark.resplit import ResplitResult, resplit  # noqa: E402

__all__ = ["Source", "Options", "audit", "AuditResult", "clean", "CleanResult", "resplit",
           "ResplitResult", "check", "CheckResult", "fingerprint_sources", "LeakcheckError",
           "__version__"]
