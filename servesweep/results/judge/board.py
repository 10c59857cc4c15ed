"""The board a sweep's verdicts stand on: for one metric, every cell's boots at every level,
their scatter pooled per level over the sweep's configurations, the guard's word on each
configuration, and the first boots (`servesweep.stats` has the maths). The verdicts
(`servesweep.results.judge.verdicts`) and the report's tables and plots read the same board.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import pandas as pd

from servesweep import stats
from servesweep.level import parse_value
from servesweep.sweep.analysis import AnalysisSettings, FirstBootRule

ALPHA = stats.ALPHA
Family = Literal["primary", "secondary"]
PRIMARY: Family = "primary"
SECONDARY: Family = "secondary"


class Metric(NamedTuple):
    column: str  # in summary.csv
    higher_is_better: bool
    # None: each boot's value is its summary value. Else (request field, percentile): each
    # boot's percentile of its own requests.
    from_requests: tuple[str, float] | None = None

    @property
    def margin_key(self) -> str:
        """The `analysis` key of this metric kind's practical margin (in %)."""
        return "margin_latency_pct" if self.column.endswith("_ms") else "margin_throughput_pct"


METRICS = {
    "output_throughput": Metric("output_throughput", True),
    "median_ttft_ms": Metric("median_ttft_ms", False, ("ttft_ms", 50)),
    "p99_ttft_ms": Metric("p99_ttft_ms", False, ("ttft_ms", 99)),
    "median_tpot_ms": Metric("median_tpot_ms", False, ("tpot_ms", 50)),
    "p99_tpot_ms": Metric("p99_tpot_ms", False, ("tpot_ms", 99)),
}
HEADLINE_METRIC = AnalysisSettings().objective  # the objective when the sweep names none
_ANALYSIS = AnalysisSettings()  # the schema's defaults

# Per boot (repeat) and level: the request values of its valid measurements.
RequestValues = Callable[[tuple, int, Any, str], list[float]]  # (cell, repeat, level, field)
Key = tuple  # (stack, model, variant, level)


class Judging(NamedTuple):
    """How a sweep is judged: its `analysis` settings, with the objective and its counted
    levels (the hunt's where the sweep hunts)."""

    baseline: str = _ANALYSIS.baseline
    reference_stack: str | None = _ANALYSIS.reference_stack
    objective: str = _ANALYSIS.objective
    counted_levels: tuple | None = None  # None: every level
    first_boot: FirstBootRule = _ANALYSIS.first_boot
    noise_cv: float = _ANALYSIS.noise_cv
    resolve_pct: float = _ANALYSIS.resolve_pct
    margin_throughput_pct: float = _ANALYSIS.margin_throughput_pct
    margin_latency_pct: float = _ANALYSIS.margin_latency_pct

    @classmethod
    def of(
        cls,
        analysis: AnalysisSettings | Mapping,
        objective: str | None = None,
        levels: Sequence[Any] | None = None,
    ) -> Judging:
        """From a sweep's `analysis` (its settings, or the section as a mapping); `objective`
        and `levels` (a hunt's) win over `analysis.objective` / `analysis.levels`."""
        a = AnalysisSettings.of(analysis)
        counted = levels if levels is not None else a.levels
        return cls(
            **{k: getattr(a, k) for k in cls._fields if k not in ("objective", "counted_levels")},
            objective=objective or a.objective,
            counted_levels=None if counted is None else tuple(parse_value(v) for v in counted),
        )

    def margin(self, metric: Metric) -> float:
        return getattr(self, metric.margin_key)

    def family(self, metric: str, level: Any) -> Family:
        counted = self.counted_levels is None or parse_value(level) in self.counted_levels
        return PRIMARY if metric == self.objective and counted else SECONDARY

    def metrics(self, metrics: dict[str, Metric] = METRICS) -> dict[str, Metric]:
        """The metrics to compare: the objective among them (a summary column of its own,
        higher is better unless it is a latency, where it is not one of METRICS)."""
        if self.objective in metrics:
            return dict(metrics)
        return {
            self.objective: Metric(self.objective, not self.objective.endswith("_ms")),
            **metrics,
        }


class Boots(NamedTuple):
    """One cell's metric at one level: each valid boot's value."""

    repeats: tuple[int, ...]  # the valid boots
    values: tuple[float, ...]  # each valid boot's value (positive ones enter the logs)
    boots: int  # boots in all
    within_boot_cv: float  # pooled over boots with several measurements; nan otherwise
    excluded: str  # "r1: client_bound: …" for each boot kept out
    # Each valid boot's measurements (benchmark.repeats_in_boot), and where a boot measured
    # the level once under num_prompts: auto, its own sampling error: (RSE, its batches,
    # its requests); empty where unknown.
    in_boot: tuple[tuple[float, ...], ...] = ()
    sampling: tuple[tuple[float, int, int], ...] = ()
    # Each valid boot's machine (summary.csv `machine`: servesweep.server.machine's key);
    # empty where the summary has none.
    machines: tuple[str | None, ...] = ()

    @property
    def logs(self) -> np.ndarray:
        return stats.logs_of(self.values)

    def without_first(self) -> Boots:
        keep = [i for i, r in enumerate(self.repeats) if r != 0]

        def pick(xs: tuple) -> tuple:
            return tuple(xs[i] for i in keep) if len(xs) == len(self.repeats) else xs

        return self._replace(
            repeats=pick(self.repeats),
            values=pick(self.values),
            in_boot=pick(self.in_boot),
            sampling=pick(self.sampling),
            machines=pick(self.machines),
        )

    def by_machine(self) -> dict[str, np.ndarray] | None:
        """The boots' logs per machine (in first-seen order); None where a valid boot's
        machine is unknown."""
        if len(self.machines) != len(self.values) or any(m is None for m in self.machines):
            return None
        out: dict[str, list[float]] = {}
        for machine, y in zip(self.machines, self.logs, strict=True):
            out.setdefault(str(machine), []).append(float(y))
        return {m: np.asarray(ys) for m, ys in out.items()}


def _within_boot_cv(groups: list[list[float]]) -> float:
    multi = [np.asarray(g, dtype=float) for g in groups if len(g) > 1]
    if not multi:
        return math.nan
    pooled_var = np.mean([g.var(ddof=1) for g in multi])
    grand = np.mean(np.concatenate(multi))
    return float(math.sqrt(pooled_var) / grand) if grand else math.nan


def boot_values(rows: pd.DataFrame, column: str) -> Boots:
    """One (stack, model, variant, level)'s summary rows: each valid boot's mean value."""
    groups, repeats, excluded, sampling, machines = [], [], [], [], []
    for repeat, boot in rows.groupby("repeat", sort=True):
        valid = boot[boot["valid"].astype(bool)]
        values = pd.to_numeric(valid[column], errors="coerce").dropna().tolist()
        if values:
            groups.append(values)
            repeats.append(int(repeat))
            sampling.append(_sampling(valid))
            known = valid["machine"].dropna().tolist() if "machine" in valid else []
            machines.append(str(known[0]) if known else None)
        reasons = boot.loc[~boot["valid"].astype(bool), "invalid_reasons"].dropna().unique()
        excluded += [f"r{int(repeat)}: {r}" for r in reasons]
    return Boots(
        tuple(repeats),
        tuple(float(np.mean(g)) for g in groups),
        int(rows["repeat"].nunique()),
        _within_boot_cv(groups),
        "; ".join(excluded),
        tuple(tuple(float(v) for v in g) for g in groups),
        tuple(x for x in sampling if x is not None) if all(x is not None for x in sampling) else (),
        tuple(machines),
    )


def _sampling(valid: pd.DataFrame) -> tuple[float, int, int] | None:
    """A boot's own sampling error of its level's throughput, where it measured the level
    once and the num_prompts: auto rule recorded it (`stop_rse`, `stop_batches`,
    `num_prompts`: docs/records.md); None otherwise."""
    if len(valid) != 1 or "stop_rse" not in valid:
        return None
    row = valid.iloc[0]
    rse, batches = row.get("stop_rse"), row.get("stop_batches")
    requests = row.get("num_prompts")
    if any(x is None or pd.isna(x) for x in (rse, batches, requests)):
        return None
    return float(rse), int(batches), int(requests)


def level_components(boots: Mapping[Key, Boots], level: Any) -> stats.VarianceComponents:
    """A level's variance components on a board, pooled over its configurations
    (stats.variance_components): from each boot's in-boot measurements where any boot has
    two, else from each boot's own sampling error where every boot has one (a throughput
    under num_prompts: auto), else only the total."""
    here = [b for k, b in boots.items() if k[3] == level]
    if any(len(g) >= 2 for b in here for g in b.in_boot):
        return stats.variance_components(
            [[stats.logs_of(g) for g in b.in_boot] for b in here], "in_boot"
        )
    if here and all(b.sampling and len(b.sampling) == len(b.values) for b in here):
        per_boot = float(np.mean([n for b in here for _, _, n in b.sampling]))
        return stats.components_from_sampling(
            [b.logs for b in here],
            [[r**2 for r, _, _ in b.sampling] for b in here],
            [[max(0, n - 1) for _, n, _ in b.sampling] for b in here],
            per_boot,
        )
    return stats.variance_components([[[y] for y in b.logs] for b in here], "in_boot")


def with_percentiles(
    boots: Boots, metric: Metric, cell: tuple, level: Any, requests: RequestValues | None
) -> Boots:
    """Each boot's percentile of its own requests (its summary value where no requests are
    stored)."""
    if metric.from_requests is None or requests is None:
        return boots
    field, q = metric.from_requests
    values = []
    for repeat, value in zip(boots.repeats, boots.values, strict=True):
        found = requests(cell, repeat, level, field)
        values.append(float(np.percentile(found, q)) if found else value)
    return boots._replace(values=tuple(values))


class FirstBootLevel(NamedTuple):
    """The first-boot contrast at one level (objective metric) and what was done."""

    level: object
    contrast: stats.FirstBoot | None
    dropped: bool  # each cell's r0 left out of this level's verdicts
    why: str


class Blocks(NamedTuple):
    """One comparison with each machine a block (Board.blocks)."""

    mine: list[np.ndarray]  # the side's logs on each machine that ran both sides
    ref: list[np.ndarray]  # the reference's, on the same machines
    pool: stats.Scatter  # the level's boots about their own (cell, machine) mean
    alone: list[str]  # machines that ran one side only


class Board(NamedTuple):
    """One metric over the sweep: each cell's boots at each level (first boots already
    dropped where decided), the pooled scatter per level of every configuration measured
    there, and per cell whether its own scatter agrees with the rest's (the guard) and, if
    not, its scatter ratio."""

    boots: dict[Key, Boots]
    pools: dict[object, stats.Scatter]  # level -> scatter of every cell's logs there
    pooled: dict[object, int]  # level -> how many cells' scatter is in the pool
    own: dict[Key, stats.Scatter]  # each cell's own scatter at a level
    agrees: dict[tuple, bool]  # (stack, model, variant) -> its scatter agrees with the rest
    ratios: dict[tuple, stats.ScatterRatio]  # (stack, model, variant) -> its scatter ratio
    components: dict[object, stats.VarianceComponents] = {}  # level -> sigma_B, sigma_W
    # level -> scatter of every cell's boots about their own (cell, machine) mean, at the
    # levels whose boots ran on more than one machine (the blocked comparisons' variance)
    machine_pools: dict[object, stats.Scatter] = {}

    def blocks(self, key: Key, ref_key: Key) -> Blocks | None:
        """Where a comparison's boots ran on more than one machine, each machine a block:
        what stats.blocked_contrast takes, and each machine that ran one side only (its
        boots tell nothing of the difference there).
        None where the boots share one machine, a machine is unknown, or no machine ran
        both sides (then the machine cannot be told from the variant)."""
        mine, ref = self.boots[key].by_machine(), self.boots[ref_key].by_machine()
        if mine is None or ref is None or len(set(mine) | set(ref)) < 2:
            return None
        both = [m for m in mine if m in ref]
        if not both or key[3] not in self.machine_pools:
            return None
        alone = [m for m in (*mine, *ref) if m not in both]
        return Blocks(
            [mine[m] for m in both],
            [ref[m] for m in both],
            self.machine_pools[key[3]],
            list(dict.fromkeys(alone)),
        )

    def side(self, key: Key) -> stats.SideVariance:
        """The variance a cell at a level is judged by: the pool's where its scatter
        agrees, else its ratio times the rest's variance there."""
        pool = self.pools.get(key[3], stats.NO_SCATTER)
        if self.agrees.get(key[:3], True) or float(pool.df) <= 0:
            return stats.pooled_side(pool)
        rest = pool - self.own.get(key, stats.NO_SCATTER)
        return stats.scaled_side(self.ratios[key[:3]], rest)


def build_board(boots: dict[Key, Boots]) -> Board:
    """Pool each level's scatter over every cell, and guard: a cell whose scatter, across
    its levels, is larger than the rest's (stats.scatter_agrees) is judged by its own
    scatter ratio (Board.side)."""
    levels = sorted({k[3] for k in boots}, key=float)
    cells = list(dict.fromkeys(k[:3] for k in boots))
    own = {k: stats.scatter([b.logs], logs=True) for k, b in boots.items()}
    pools = {lv: stats.NO_SCATTER for lv in levels}
    for k, sc in own.items():
        pools[k[3]] = pools[k[3]] + sc
    agrees, ratios = {}, {}
    for cell in cells:
        mine = [own.get((*cell, lv), stats.NO_SCATTER) for lv in levels]
        rest = [pools[lv] - m for lv, m in zip(levels, mine, strict=True)]
        mine_s = stats.Scatter(np.array([m.ss for m in mine]), np.array([m.df for m in mine]))
        rest_s = stats.Scatter(np.array([r.ss for r in rest]), np.array([r.df for r in rest]))
        ratios[cell] = stats.scatter_ratio(mine_s, rest_s)
        agrees[cell] = bool(stats.scatter_agrees(mine_s, rest_s))
    pooled = {lv: sum(1 for k, sc in own.items() if k[3] == lv and sc.df > 0) for lv in levels}
    components = {lv: level_components(boots, lv) for lv in levels}
    return Board(boots, pools, pooled, own, agrees, ratios, components, machine_pools(boots))


def machine_pools(boots: Mapping[Key, Boots]) -> dict[object, stats.Scatter]:
    """Per level whose boots (every one's machine known) ran on more than one machine: the
    scatter of every cell's boots about their own (cell, machine) mean, pooled."""
    out: dict[object, stats.Scatter] = {}
    for lv in sorted({k[3] for k in boots}, key=float):
        groups = [b.by_machine() for k, b in boots.items() if k[3] == lv]
        if any(g is None for g in groups):
            continue
        machines = {m for g in groups if g for m in g}
        if len(machines) >= 2:
            out[lv] = stats.scatter([y for g in groups if g for y in g.values()], logs=True)
    return out


def first_boots(boots: dict[Key, Boots], rule: FirstBootRule) -> dict[object, FirstBootLevel]:
    """Per level, first boots against later ones and whether they are dropped."""
    out = {}
    for lv in sorted({k[3] for k in boots}, key=float):
        here = {k: b for k, b in boots.items() if k[3] == lv}
        samples = [
            stats.logs_of([v for _, v in sorted(zip(b.repeats, b.values, strict=True))])
            for b in here.values()
            if 0 in b.repeats
        ]
        contrast = stats.first_boot_contrast(samples)
        after = min((len([r for r in b.repeats if r != 0]) for b in here.values()), default=0)
        significant = contrast is not None and contrast.p <= ALPHA
        if rule == "drop":
            drop, why = True, "analysis.first_boot: drop"
        elif rule == "keep":
            drop, why = False, "analysis.first_boot: keep"
        elif not significant:
            drop, why = False, "first boots not significantly different"
        elif after >= 2:
            drop, why = True, "first boots differ significantly: left out"
        else:
            drop, why = (
                False,
                (
                    "first boots differ significantly, but a cell here has fewer than 2 boots "
                    "after its first: kept (set benchmark.repeats to 3 or more to leave them out)"
                ),
            )
        out[lv] = FirstBootLevel(lv, contrast, drop, why)
    return out


def judged_first_boots(summary: pd.DataFrame, judging: Judging) -> dict[object, FirstBootLevel]:
    """The judge's first-boot decision per level: on the objective's boots, the headline
    metric's where the summary has no objective column."""
    objective = summary_boots(summary, judging.objective)
    return first_boots(objective or summary_boots(summary, HEADLINE_METRIC), judging.first_boot)


# results/first_boots.csv, beside verdicts.csv: the judge's first-boot decisions, which the
# report reads (it decides nothing itself). `ratio` .. `cells`: stats.FirstBoot, empty where
# no configuration has a first and a later boot.
FIRST_BOOTS_CSV = "first_boots.csv"
FIRST_BOOT_COLUMNS = ("level", *stats.FirstBoot._fields, "dropped", "why")


def write_first_boots(first: Mapping[object, FirstBootLevel], path: Path) -> None:
    rows = [
        {
            "level": fb.level,
            **(fb.contrast._asdict() if fb.contrast is not None else {}),
            "dropped": fb.dropped,
            "why": fb.why,
        }
        for fb in first.values()
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=list(FIRST_BOOT_COLUMNS)).to_csv(path, index=False)


def read_first_boots(path: Path) -> dict[object, FirstBootLevel]:
    """first_boots.csv as the judge wrote it (absent or empty: no decisions)."""
    if not path.exists() or not path.stat().st_size:
        return {}
    out: dict[object, FirstBootLevel] = {}
    for row in pd.read_csv(path, keep_default_na=False).to_dict("records"):
        level = parse_value(str(row["level"]))
        contrast = None
        if str(row["ratio"]) != "":
            ratio, low, high, p, df, cells = (float(row[f]) for f in stats.FirstBoot._fields)
            contrast = stats.FirstBoot(ratio, low, high, p, df, int(cells))
        dropped = str(row["dropped"]).lower() == "true"
        out[level] = FirstBootLevel(level, contrast, dropped, str(row["why"]))
    return out


def summary_boots(summary: pd.DataFrame, column: str) -> dict[Key, Boots]:
    """Every (stack, model, variant, level)'s boots of one summary column."""
    df = summary[summary["level"].notna()].copy()
    if df.empty or column not in df:
        return {}
    df["level"] = df["level"].map(parse_value)
    return {
        key: boot_values(rows, column)
        for key, rows in df.groupby(["stack", "model", "variant", "level"], sort=False)
    }


class CellStats(NamedTuple):
    """What the report shows of one cell at one level: the geometric mean with its 95 %
    interval (the pooled scatter where the cell agrees with it), its own CV and boots."""

    n: int
    boots: int
    repeats: tuple[int, ...]
    values: tuple[float, ...]
    mean: float  # geometric mean of the boots' values
    low: float  # ratio interval: never below zero
    high: float
    cv: float  # the cell's own: sample std of its boots' logs (about its CV)
    variance: str  # pooled | own | none
    excluded: str
    first_dropped: bool


def cell_stats(
    board: Board, first: Mapping[object, FirstBootLevel] | None = None
) -> dict[Key, CellStats]:
    """CellStats of every cell at every level on a board."""
    out = {}
    for key, b in board.boots.items():
        logs = b.logs
        side = board.side(key)
        interval = stats.cell_interval(logs, side)
        own = stats.scatter([logs], logs=True)
        variance = "none" if not side.df > 0 else ("pooled" if side.pooled else "own")
        dropped = bool(first and key[3] in first and first[key[3]].dropped)
        out[key] = CellStats(
            n=len(logs),
            boots=b.boots,
            repeats=b.repeats,
            values=b.values,
            mean=interval.ratio,
            low=interval.low,
            high=interval.high,
            cv=math.sqrt(float(own.variance)) if own.df > 0 else math.nan,
            variance=variance,
            excluded=b.excluded,
            first_dropped=dropped,
        )
    return out


def summary_cell_stats(
    summary: pd.DataFrame, column: str, first: Mapping[object, FirstBootLevel]
) -> dict:
    """CellStats from summary.csv (the report's tables and plots): the same board the
    verdicts stand on, each boot's summary value, with the judge's first-boot decisions
    (`first`: first_boots.csv)."""
    boots = dropped(summary_boots(summary, column), first)
    return cell_stats(build_board(boots), first)


def dropped(boots: dict[Key, Boots], first: Mapping[object, FirstBootLevel]) -> dict:
    """The boots with each cell's r0 left out at the levels where first boots are dropped."""
    return {
        k: (b.without_first() if k[3] in first and first[k[3]].dropped else b)
        for k, b in boots.items()
    }
