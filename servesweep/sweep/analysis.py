"""The sweep's `analysis:` section as one type (how results are judged), its defaults the
schema's: read from servesweep/sweep/schemas/config.schema.yaml here and nowhere else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

from servesweep.sweep.schema import section_defaults

FirstBootRule = Literal["auto", "keep", "drop"]
DEFAULTS = section_defaults("analysis")


class AnalysisSettings(NamedTuple):
    """`analysis:`, one field a key of the schema (tests/unit/sweep/test_config.py checks
    that), each default the schema's."""

    baseline: str = DEFAULTS["baseline"]
    reference_stack: str | None = None  # None: the sweep's first stack
    objective: str = DEFAULTS["objective"]
    levels: tuple | None = None  # the objective's counted levels as the config gives them
    first_boot: FirstBootRule = DEFAULTS["first_boot"]
    noise_cv: float = DEFAULTS["noise_cv"]
    resolve_pct: float = DEFAULTS["resolve_pct"]
    margin_throughput_pct: float = DEFAULTS["margin_throughput_pct"]
    margin_latency_pct: float = DEFAULTS["margin_latency_pct"]
    max_failed_fraction: float = DEFAULTS["max_failed_fraction"]
    correctness_threshold: float = DEFAULTS["correctness_threshold"]
    min_steady_fraction: float = DEFAULTS["min_steady_fraction"]

    @classmethod
    def of(cls, analysis: AnalysisSettings | Mapping | None) -> AnalysisSettings:
        """From a sweep's `analysis` mapping (keys it does not set keep the schema's
        defaults; keys that are not the section's are ignored)."""
        if isinstance(analysis, AnalysisSettings):
            return analysis
        given = {k: v for k, v in (analysis or {}).items() if k in cls._fields and v is not None}
        if "levels" in given:
            given["levels"] = tuple(given["levels"])
        return cls(**given)

    def as_config(self) -> dict:
        """The section as the sweep file gives it once the schema's defaults are filled
        (unset keys left out, levels a list): what the stage files' identity hashes and a
        hunt step records, unchanged from when `Sweep.analysis` was that mapping (checked
        against every example: tests/unit/sweep/test_config.py)."""
        return {
            k: list(v) if k == "levels" else v for k, v in self._asdict().items() if v is not None
        }
