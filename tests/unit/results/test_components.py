"""Variance components on the verdicts: each level's sigma_B and sigma_W beside its rows,
from in-boot repeats, from a boot's own sampling error, or the total only."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from servesweep import stats
from servesweep.results.judge.verdicts import METRICS, compare

THROUGHPUT = {"output_throughput": METRICS["output_throughput"]}
VARIANTS = ["baseline", "a", "b"]


def summary(rng, boots=4, in_boot=3, sigma_b=0.05, sigma_w=0.10, levels=(1, 4), extra=None):
    rows = []
    for v in VARIANTS:
        for level in levels:
            for r in range(boots):
                boot = math.exp(rng.normal(0, sigma_b))
                for i in range(in_boot):
                    value = 100.0 * level * boot * math.exp(rng.normal(0, sigma_w))
                    rows.append(
                        {
                            "stack": "s", "model": "m", "variant": v, "repeat": r,
                            "level": level, "in_boot": i, "status": "ok", "valid": True,
                            "invalid_reasons": None, "output_throughput": value,
                            **(extra(rng) if extra else {}),
                        }
                    )  # fmt: skip
    return pd.DataFrame(rows)


def judged(df):
    return compare(df, {"baseline": "baseline"}, ["s"], VARIANTS, None, THROUGHPUT)


def test_in_boot_repeats_give_both_components_on_every_row():
    df = summary(np.random.default_rng(1))
    rows = judged(df)
    at_1 = df[df["level"] == 1]
    samples = [
        [np.log(b["output_throughput"].to_numpy()) for _, b in g.groupby("repeat")]
        for _, g in at_1.groupby("variant", sort=False)
    ]
    want = stats.variance_components(samples)
    for c in (c for c in rows if c.level == 1):
        assert c.components_from == "in_boot" and c.per_boot == 3
        assert c.sigma_boot_pct == pytest.approx(100 * math.sqrt(want.between))
        assert c.sigma_within_pct == pytest.approx(100 * math.sqrt(want.within))
        assert c.within_share == pytest.approx(want.within_share)
        assert (c.df_boot, c.df_within) == (pytest.approx(want.between_df), 24)


def test_a_level_measured_once_without_its_sampling_error_gives_the_total_only():
    rows = judged(summary(np.random.default_rng(2), in_boot=1))
    assert {c.components_from for c in rows} == {"total"}
    assert all(math.isnan(c.sigma_within_pct) and c.df_boot == 9 for c in rows)


def test_a_levels_own_sampling_error_gives_both_components():
    def rse(rng):
        return {"stop_rse": 0.03, "stop_batches": 9, "num_prompts": 400}

    rows = judged(summary(np.random.default_rng(3), in_boot=1, sigma_w=0.0, extra=rse))
    c = rows[0]
    assert c.components_from == "batches" and c.per_boot == 400
    assert c.sigma_within_pct == pytest.approx(100 * 0.03 * math.sqrt(400))
    assert c.df_within == 3 * 4 * 8
