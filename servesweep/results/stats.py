"""Statistics over repeats: t-based confidence intervals of a mean and of a ratio.

Pure math on lists of floats (no pandas), so it is tested against published values.
"""

from __future__ import annotations

import math

# Two-sided 95 % Student t quantiles by degrees of freedom; between entries the lower
# df is used (slightly wider, i.e. conservative). Avoids a scipy dependency.
_T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t95(df: float) -> float:
    """0.975 quantile of Student's t with `df` degrees of freedom (table lookup)."""
    for k in sorted(_T95, reverse=True):
        if df >= k:
            return _T95[k]
    return math.nan


def mean_ci(values) -> tuple[float, float | None]:
    """Mean and half-width of its t-based 95 % CI (None with fewer than 2 values)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return math.nan, None
    m = sum(vals) / len(vals)
    if len(vals) < 2:
        return m, None
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
    return m, t95(len(vals) - 1) * sd / math.sqrt(len(vals))


def delta_ci(v: list[float], b: list[float]) -> tuple[float, float] | None:
    """95 % CI of (mean v / mean b - 1) x 100 from Welch's interval on the difference."""
    if len(v) < 2 or len(b) < 2:
        return None
    mv, mb = sum(v) / len(v), sum(b) / len(b)
    qv = sum((x - mv) ** 2 for x in v) / (len(v) - 1) / len(v)
    qb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    se = math.sqrt(qv + qb)
    if se == 0:
        hw = 0.0
    else:
        dof = se**4 / (qv**2 / (len(v) - 1) + qb**2 / (len(b) - 1))
        hw = t95(dof) * se
    return ((mv - mb - hw) / mb * 100, (mv - mb + hw) / mb * 100)
