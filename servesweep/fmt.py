"""Numbers and missing values as the report, the plan and the tables print them: one home, so
a missing value reads the same ("—") in every view."""

from __future__ import annotations

import math

MISSING = "—"


def missing(x) -> bool:
    """None, NaN (a float or pandas' NA) or a value that is not a number at all."""
    if x is None:
        return True
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return x != x  # pandas.NA and friends


def number(x, digits: int = 1) -> str:
    """`x` to `digits` decimals; MISSING when there is none."""
    return MISSING if missing(x) else f"{float(x):.{digits}f}"


def value(v, digits: int = 1) -> str:
    """A float to `digits` decimals, anything else as its text; MISSING when there is none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def size(n) -> str:
    """A byte count in B, KiB, MiB, GiB or TiB."""
    if n is None:
        return MISSING
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return MISSING
