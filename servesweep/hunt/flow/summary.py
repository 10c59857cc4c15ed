"""A hunt's path in plain words, from results/hunt/hunt.json: per round the reference, each
arm's verdict with its gain and interval, boots and GPU-hours, and why; then the final launch
command. The report shows it as a plain section (the hook for a richer hunt view)."""

from __future__ import annotations

import html
import shlex


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:+.1f} %"


def summary_lines(hunt: dict) -> list[str]:
    ledger = {r["round"]: r for r in hunt.get("ledger", [])}
    lines = [
        f"Hunt from {hunt['start']} on {hunt['stack']} / {hunt['model']}: "
        f"{hunt['objective']['metric']} at levels {hunt['objective']['levels']}, adopting "
        f">= {hunt['objective']['min_effect_pct']:g} %",
        f"stopped: {hunt['stop_reason']}; spent {hunt['spent']['boots']} boots, "
        f"{hunt['spent']['gpu_hours']:.3f} GPU-hours ({hunt['spent']['wall_s']:.0f} s of boots)",
    ]
    for r in hunt["rounds"]:
        cost = ledger.get(r["index"], {})
        lines.append(
            f"round {r['index'] + 1} ({r['kind']}): reference {r['reference']} "
            f"(boots {r['reference_boots']}); adopted: {r['adopted'] or '-'}; "
            f"{cost.get('boots', 0)} boots, {cost.get('gpu_hours', 0):.3f} GPU-hours"
        )
        for a in r["arms"]:
            interval = f"[{_pct(a['low_pct'])}, {_pct(a['high_pct'])}]"
            lines.append(
                f"  {a['candidate']:<24} {a['verdict']:<13} {_pct(a['gain_pct']):>9} "
                f"{interval:<22} boots {list(a['boots'])}  {a['reason']}"
            )
    final = hunt["final"]
    lines.append(f"final: {final['variant']} on {final['stack']}")
    env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in final["env"].items())
    lines.append(f"  $ {env + ' ' if env else ''}{shlex.join(map(str, final['command']))}")
    return lines


def summary_html(hunt: dict) -> str:
    """An HTML section: the summary as preformatted, escaped text."""
    text = html.escape("\n".join(summary_lines(hunt)))
    return f'<section id="hunt"><h2>Hunt</h2><pre>{text}</pre></section>'


def with_summary(report_html: str, hunt: dict) -> str:
    """The report with the hunt's section first in its body."""
    section = summary_html(hunt)
    at = report_html.find("<body")
    if at < 0:
        return section + report_html
    end = report_html.index(">", at) + 1
    return report_html[:end] + section + report_html[end:]
