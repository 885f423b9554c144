"""A helper for the scalar pandas UDFs of the stages."""

from __future__ import annotations

from typing import Callable


def series_udf(fn: Callable, return_type: str) -> Callable:
    """Wrap a plain ``pd.Series -> pd.Series`` function as a vectorised Spark pandas UDF.

    The modules use ``from __future__ import annotations``, under which PySpark cannot resolve a
    ``pd.Series`` hint from the module's globals; the hints are attached here explicitly instead
    (the ``Series -> Series`` form of ``pandas_udf``).
    """
    import pandas as pd
    import pyspark.sql.functions as F

    def wrapped(values: pd.Series) -> pd.Series:
        return fn(values)

    wrapped.__annotations__ = {"values": pd.Series, "return": pd.Series}
    wrapped.__name__ = getattr(fn, "__name__", "series_udf")
    return F.pandas_udf(wrapped, return_type)
