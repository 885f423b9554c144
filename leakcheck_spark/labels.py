"""Canonical label values, so that ``True == 1 == "1"`` when labels are compared (SPEC section 5).

Pure Python; the Spark stages call these inside their pandas UDFs.
"""

from __future__ import annotations

import json
import math

# What a typed column's label looks like after Spark casts it to a string, by type family.
KINDS = ("bool", "int", "float", "str")


def canonical_label(value: object) -> str | None:
    """The comparison form of one label: booleans as 1/0, integral numbers as integers,
    strings stripped with "true"/"false" (any case) as 1/0.  None for a missing label.

    >>> [canonical_label(v) for v in (True, 1, "1", " true ", 1.0, 2.5, "cat ", None)]
    ['1', '1', '1', '1', '1', '2.5', 'cat', None]
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        s = value.strip()
        low = s.lower()
        if low == "true":
            return "1"
        if low == "false":
            return "0"
        return s
    # Lists and objects compare by their canonical JSON text.
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def display_label(value: object) -> str | None:
    """How a label is shown in outputs: strings as they are, other values as JSON.

    >>> [display_label(v) for v in ("bad", 1, -7, 10**20, True, 2.0, [1], None)]
    ['bad', '1', '-7', '100000000000000000000', 'true', '2.0', '[1]', None]
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if type(value) is int:  # the common case; what json.dumps gives, ~20x faster
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def from_typed_string(value: str | None, kind: str) -> object:
    """Undo Spark's cast to string of a typed column (`kind` in KINDS), for `canonical_label`.

    >>> [from_typed_string(v, k) for v, k in (("true", "bool"), ("3", "int"), ("2.0", "float"))]
    [True, 3, 2.0]
    """
    if value is None:
        return None
    if kind == "bool":
        return value == "true"
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    return value
