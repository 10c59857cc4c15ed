"""The report's plots a reviewer can trust: bands on the ratio scale (never below zero) and
log axes whose labelled ticks do not overlap, measured through matplotlib's own text
extents on the drawn figure (not by eye)."""

import numpy as np
import pandas as pd
import pytest
from fixtures.figures import labelled_ticks, overlapping
from matplotlib.collections import PolyCollection

from servesweep.results.report.plots import metric_figure


def summary(values: dict) -> pd.DataFrame:
    rows = []
    for (variant, level), boots in values.items():
        for r, (tput, ttft) in enumerate(boots):
            rows.append(
                {
                    "stack": "s", "model": "m", "variant": variant, "repeat": r,
                    "level": level, "in_boot": 0, "status": "ok", "valid": True,
                    "invalid_reasons": None, "output_throughput": tput, "p99_ttft_ms": ttft,
                }
            )  # fmt: skip
    return pd.DataFrame(rows)


# The README's report: a baseline that serves one request at a time (p99 TTFT up to
# 300 s at 1,024 streams) beside continuous batching (tens of ms at 1 stream).
NOISY = {
    ("baseline", 1): [(150, 12), (118, 15)],
    ("baseline", 10): [(160, 900), (121, 1400)],
    ("baseline", 256): [(151, 60000), (205, 52000)],
    ("baseline", 1024): [(163, 300000), (120, 250000)],
    ("continuous-batching", 1): [(140, 10), (180, 11)],
    ("continuous-batching", 10): [(820, 40), (610, 90)],
    ("continuous-batching", 256): [(780, 900), (40, 1200)],
    ("continuous-batching", 1024): [(490, 7000), (640, 5500)],
}


@pytest.mark.parametrize(
    "ttft_scale", [1.0, 1e-3, 30.0], ids=["ms-to-300s", "sub-ms", "narrow-decade"]
)
def test_log_axis_labels_do_not_overlap(ttft_scale):
    values = {k: [(t, ms * ttft_scale) for t, ms in v] for k, v in NOISY.items()}
    if ttft_scale == 30.0:  # all within one decade: 2 and 5 ticks are labelled too
        values = {k: [(t, 300 + 10 * i) for i, (t, _) in enumerate(v)] for k, v in NOISY.items()}
    fig = metric_figure(
        summary(values), "p99_ttft_ms", "TTFT p99 (ms)", "TTFT p99", ["baseline"], logy=True
    )
    shown = labelled_ticks(fig)
    assert len(shown) >= 2, [t for t, _ in shown]
    assert overlapping(shown) == []
    texts = [t for t, _ in shown]
    assert len(set(texts)) == len(texts)  # no label printed twice


def test_throughput_bands_stay_above_zero():
    # Two boots of 780 and 40 tok/s: a raw-scale interval ran down to -1,000 tok/s.
    fig = metric_figure(
        summary(NOISY), "output_throughput", "output tokens / s", "Output throughput",
        ["baseline", "continuous-batching"],
    )  # fmt: skip
    (ax,) = fig.axes
    assert ax.get_ylim()[0] >= 0
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    for band in bands:
        for p in band.get_paths():
            assert np.all(p.vertices[:, 1] >= 0)
    assert overlapping(labelled_ticks(fig, "x")) == []
