"""Matrices, the versioned report.json, and the terminal rendering (SPEC section 5)."""

from __future__ import annotations

import math
from typing import Iterable

SCHEMA = "leakcheck-spark/report/v1"
SAMPLE_ROWS = 20
SAMPLE_MEMBERS = 20  # members shown per conflict in report.json (all of them in OUT/)


def cell(count: int, total: int) -> dict:
    """A matrix cell: ``{"count", "fraction"}`` with fraction = count / total (0 if total is 0).

    >>> cell(1, 4)
    {'count': 1, 'fraction': 0.25}
    """
    return {"count": int(count), "fraction": (count / total) if total else 0.0}


def similarity_text(value: float) -> str:
    """A similarity with three decimals, cut rather than rounded, so that 1.000 is shown only for
    a similarity of 1 (a near match at 0.9999 is not an exact copy).

    >>> [similarity_text(v) for v in (1.0, 0.999893, 0.8, 0.579, 2 / 3)]
    ['1.000', '0.999', '0.800', '0.579', '0.666']
    """
    return f"{math.floor(value * 1000 + 1e-9) / 1000:.3f}"


def matrix(names: list[str], totals: dict[str, int],
           counts: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, dict]]:
    """A full square matrix over `names` (every cell present, zeros included).

    >>> matrix(["a", "b"], {"a": 2, "b": 1}, [("a", "b", 1)])["a"]
    {'a': {'count': 0, 'fraction': 0.0}, 'b': {'count': 1, 'fraction': 0.5}}
    """
    found = {(a, b): n for a, b, n in counts}
    return {a: {b: cell(found.get((a, b), 0), totals[a]) for b in names} for a in names}


def jsonable(value: object) -> object:
    """Rows collected from Spark as plain JSON values (Row -> dict, recursively)."""
    if hasattr(value, "asDict"):
        return {k: jsonable(v) for k, v in value.asDict().items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def native_id(value: object, is_int: bool) -> object:
    """An id as its dataset has it: an integer for integer-id datasets (the shared id column is
    a string when datasets mix id types), else as it is.

    >>> native_id("17", True), native_id("17", False), native_id(17, True)
    (17, '17', 17)
    """
    return int(value) if is_int and isinstance(value, str) else value


def native_overlap(row: dict, int_groups: set[str]) -> dict:
    """An overlaps row for JSON, its ids in their datasets' own types."""
    return {**row, "id": native_id(row["id"], row["from"] in int_groups),
            "match_ids": [native_id(i, row["to"] in int_groups) for i in row["match_ids"]]}


def native_conflict(row: dict, int_groups: set[str]) -> dict:
    """A label_conflicts row for report.json: the first SAMPLE_MEMBERS members (n_members says
    how many there are), ids in their datasets' own types."""
    return {**row, "members": [{**m, "id": native_id(m["id"], m["group"] in int_groups)}
                               for m in row["members"][:SAMPLE_MEMBERS]]}


def render(report: dict, top: int = 10) -> str:
    """The terminal summary: groups, both matrices as tables (count and %), top overlaps and the
    label-conflict count."""
    lines: list[str] = []
    groups = report["groups"]
    lines.append("groups")
    is_images = "leaked_groups" in report
    cols = ["images", "unreadable"] if is_images else ["records", "empty"]
    lines += _table(["group", *cols],
                    [[g, *[f"{v[c]:,}" for c in cols]] for g, v in groups.items()])
    row = "images of A near an image of B" if is_images else "records of A that occur in B"
    for title, key in ((f"split x split (row: {row})", "split_matrix"),
                       ("dataset x dataset", "dataset_matrix")):
        m = report[key]
        names = list(m)
        lines += ["", title]
        lines += _table(["A \\ B", *names], [[a] + [_pct(m[a][b]) for b in names] for a in names])
    ov = report["overlaps"]
    lines += ["", f"overlaps: {ov['count']:,} (record, other group) pairs"]
    if ov["sample"]:
        extra = ["distance"] if "distance" in ov["sample"][0] else []
        rows = [[o["from"], str(o["id"]), o["to"], ", ".join(map(str, o["match_ids"])),
                 o["match"], similarity_text(o["similarity"]), *[str(o[k]) for k in extra]]
                for o in ov["sample"][:top]]
        lines += _table(["from", "id", "to", "match_ids", "match", "similarity", *extra], rows)
        if ov["count"] > len(rows):
            lines.append(f"  ... {ov['count'] - len(rows):,} more (full list: OUT/overlaps/)")
    if "label_conflicts" in report:
        lc = report["label_conflicts"]
        lines += ["", f"label conflicts: {lc['count']:,} normalised text(s) carry different "
                      "labels"]
    if "leaked_groups" in report:  # images
        lines += ["", f"leaked groups: {report['leaked_groups']['count']:,} (duplicate groups "
                      f"spanning splits), {report['n_leaked_images']:,} of "
                      f"{report['total_images']:,} images in them"]
        lines += [f"  {s}: {pct:.1f}% leaked" for s, pct in report["pct_leaked_by_split"].items()]
        lines.append(f"unreadable images: {report['unreadable']['count']:,}")
        lines += [f"  {u['id']}: {u['reason']}" for u in report["unreadable"]["sample"][:top]]
    return "\n".join(lines)


def _pct(c: dict) -> str:
    return f"{c['count']:,} ({100 * c['fraction']:.1f}%)" if c["count"] else "0"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  " + "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*header)] + [fmt.format(*map(str, r)) for r in rows]
