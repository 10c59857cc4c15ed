"""Two or more leases of one sweep on different machines, judged with the machine as a block.

The judge takes each machine as a block where a comparison's boots ran on several machines
(servesweep.stats.blocked_contrast; benchmarks/gpu/render.py RUN_DIR CONFIG --more OTHER
puts two leases in one report). This is the independent check of it on the GPU evidence:
per level, least squares of log(metric) on the variant and the machine (statsmodels' OLS,
`pip install statsmodels`; additive: the machine's effect cancels), a t interval on the
variant's coefficient, Holm over the levels. Its estimate is the judge's; its σ² assumes one
variant effect on every machine (the judge's lets each machine's pair keep its own means,
one df fewer a machine). A second fit with the variant × machine interaction says whether
the variant's effect differs between machines, which the judge does not test.

    python benchmarks/gpu/hosts_blocked.py config/examples/h200-engines.yaml RUN_DIR... \\
        [--variant vllm] [--metric output_throughput] [--out FILE.json]

Each RUN_DIR holds results/cells/**/cell.json (a lease's results.tar.xz unpacked).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from servesweep.stats import holm  # noqa: E402
from servesweep.sweep.config import load_file  # noqa: E402


def boot_rows(run_dirs: list[Path], metric: str) -> list[dict]:
    """One row per finished boot and level: machine key, variant, level, log(metric)."""
    rows = []
    for run_dir in run_dirs:
        for path in sorted(run_dir.glob("results/cells/*/*/*/r*/cell.json")):
            cell = json.loads(path.read_text())
            if cell.get("status") != "ok":
                continue
            machine = (cell.get("machine") or {}).get("key") or str(run_dir)
            for level in cell.get("levels") or []:
                value = level.get(metric)
                if level.get("status") == "ok" and value and value > 0:
                    rows.append(
                        {
                            "machine": machine,
                            "variant": cell["variant"],
                            "boot": cell["repeat"],
                            "level": level["level"],
                            "y": math.log(value),
                        }
                    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("--variant", default=None, help="default: the sweep's only non-baseline")
    parser.add_argument("--metric", default="output_throughput")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    try:
        import pandas as pd
        import statsmodels.formula.api as smf
    except ImportError as exc:
        need = "hosts_blocked.py needs statsmodels (pip install statsmodels)"
        raise SystemExit(f"{need}: {exc}") from None
    sweep = load_file(args.config.resolve())
    others = [v for v in sweep.variants if v != "baseline"]
    variant = args.variant or (others[0] if len(others) == 1 else None)
    if variant not in others:
        raise SystemExit(f"--variant: name one of {others}")
    alpha = 0.05  # the judge's two-sided level (`analysis` has no key for it)
    df = pd.DataFrame(boot_rows(args.run_dirs, args.metric))
    df = df[df.variant.isin(["baseline", variant])]
    if df.empty:
        raise SystemExit(f"{args.run_dirs}: no finished boot of baseline or {variant}")
    term = f"C(variant, Treatment('baseline'))[T.{variant}]"
    levels = []
    for level, g in sorted(df.groupby("level"), key=lambda kv: kv[0]):
        counts = g.groupby(["machine", "variant"]).size().unstack(fill_value=0)
        if counts.shape[1] < 2 or (counts == 0).any(axis=None) or len(counts) < 2:
            continue  # a block needs both arms on every machine, and two machines
        fit = smf.ols("y ~ C(variant, Treatment('baseline')) + C(machine)", data=g).fit()
        both = smf.ols("y ~ C(variant, Treatment('baseline')) * C(machine)", data=g).fit()
        inter = [n for n in both.params.index if ":" in n]
        lo, hi = fit.conf_int(alpha).loc[term]
        levels.append(
            {
                "level": int(level),
                "boots": {m: dict(row) for m, row in counts.to_dict("index").items()},
                "delta_pct": 100 * math.expm1(fit.params[term]),
                "delta_lo": 100 * math.expm1(lo),
                "delta_hi": 100 * math.expm1(hi),
                "p_value": float(fit.pvalues[term]),
                "df": int(fit.df_resid),
                "sigma_pct": 100 * math.sqrt(fit.scale),
                "interaction_p": [float(both.pvalues[n]) for n in inter],
            }
        )
    if not levels:
        raise SystemExit(
            f"{args.run_dirs}: no level with boots of baseline and {variant} on each of two "
            "machines or more (one machine: the judge's verdicts are the ones to read)"
        )
    for row, p in zip(levels, holm([r["p_value"] for r in levels]), strict=True):
        row["p_holm"] = p
        row["verdict"] = (
            "no significant change"
            if p >= alpha
            else ("higher" if row["delta_pct"] > 0 else "lower") + f" {args.metric}"
        )
    result = {
        "config": str(args.config),
        "run_dirs": [str(d) for d in args.run_dirs],
        "variant": variant,
        "metric": args.metric,
        "alpha": alpha,
        "model": "OLS, log(metric) ~ variant + machine, per level (statsmodels); Holm over levels",
        "levels": levels,
    }
    for r in levels:
        print(
            f"level {r['level']:>5}: {r['delta_pct']:+.1f} % [{r['delta_lo']:+.1f}, "
            f"{r['delta_hi']:+.1f}]  p {r['p_value']:.2g}  Holm p {r['p_holm']:.2g}  "
            f"df {r['df']}  σ {r['sigma_pct']:.1f} %  interaction p "
            f"{', '.join(f'{p:.2f}' for p in r['interaction_p'])}  {r['verdict']}"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
