"""report: throughput table math and the self-contained HTML report."""

import base64
import json
import math
import re
import statistics

import pandas as pd
import pytest
from fixtures.cells import EVIL, LEVELS, MODEL, REPEATS, command_str, tput, write_sweep
from markupsafe import escape

from servesweep import CLIENT_VERSION
from servesweep.results.collect import collect, read_summary
from servesweep.results.report import build_report
from servesweep.results.stats import t95
from servesweep.results.tables import throughput_table


@pytest.fixture
def sweep(tmp_path):
    paths, expected = write_sweep(tmp_path)
    csv = tmp_path / "summary.csv"
    collect(paths, csv, levels=LEVELS)
    return paths, csv, expected


def test_throughput_table_delta(sweep):
    _, csv, _ = sweep
    t = throughput_table(read_summary(csv)).set_index(["variant", "level"])
    assert len(t) == 4 * len(LEVELS)
    for lv in LEVELS:
        base = [tput("baseline", lv, r) for r in range(REPEATS)]
        cb = [tput("cb", lv, r) for r in range(REPEATS)]
        row = t.loc[("cb", lv)]
        assert row["n"] == REPEATS and row["status"] == "ok"
        assert row["mean"] == pytest.approx(statistics.mean(cb))
        half = t95(REPEATS - 1) * statistics.stdev(cb) / math.sqrt(REPEATS)
        assert row["ci"] == pytest.approx(half)
        assert row["delta_pct"] == pytest.approx(
            (statistics.mean(cb) / statistics.mean(base) - 1) * 100
        )
        assert math.isnan(t.loc[("baseline", lv)]["delta_pct"])
        assert t.loc[("bootfail", lv)]["status"] == "not_run"
    assert t.loc[("midfail", 10)]["status"] == "ok"
    assert t.loc[("midfail", 256)]["status"] == "failed"
    assert t.loc[("midfail", 256)]["cause"] == "died"
    assert t.loc[("midfail", 1024)]["status"] == "not_run"


def test_throughput_verdicts():
    def rows(variant, values):
        return [
            {"stack": "s", "model": "m", "variant": variant, "level": 8, "repeat": i}
            | {"status": "ok", "cause": None, "failure_cause": None, "output_throughput": v}
            for i, v in enumerate(values)
        ]

    df = pd.DataFrame(
        rows("baseline", [100, 101, 99])
        + rows("fast", [150, 152, 148])
        + rows("same", [100, 102, 98])
    )
    t = throughput_table(df).set_index("variant")
    assert t.loc["fast", "verdict"] == "faster"
    assert t.loc["fast", "delta_lo"] > 0
    assert t.loc["same", "verdict"] == "no significant change"
    assert t.loc["fast", "delta_pct"] == pytest.approx((150 / 100 - 1) * 100)


def test_report_html(sweep, tmp_path):
    paths, csv, _ = sweep
    out = tmp_path / "report.html"
    build_report(csv, paths, out, title="demo <sweep>", current_client_version=CLIENT_VERSION)
    html = out.read_text()

    assert (
        f"Model {MODEL} is synthetic (random weights): throughput is real, text is meaningless"
        in html
    )
    assert "demo &lt;sweep&gt;" in html

    # Headline cell for cb at level 1, computed from the fabricated inputs.
    cb = [tput("cb", 1, r) for r in range(REPEATS)]
    base = [tput("baseline", 1, r) for r in range(REPEATS)]
    m, half = statistics.mean(cb), t95(REPEATS - 1) * statistics.stdev(cb) / math.sqrt(REPEATS)
    delta = (m / statistics.mean(base) - 1) * 100
    assert f"{m:.1f} ± {half:.1f} ({delta:+.1f} %)" in html
    assert "failed (died)" in html

    # Failures: causes, message and the log tail, escaped.
    assert "No failures" not in html
    for text in ("boot_timeout", "died", "server not ready after 600 s"):
        assert text in html
    assert str(escape(EVIL)) in html
    assert "<script" not in html.lower()

    # Plots inline as real PNGs.
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert images and all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)

    # Every launch command, escaped.
    for v in ("baseline", "cb", "bootfail", "midfail"):
        assert str(escape(command_str(v))) in html

    # Self-contained: nothing loaded from elsewhere.
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<link" not in html.lower()

    assert ">client-bound</span>" in html  # the 1024 level is fabricated client-bound
    assert ">stale<" in html  # midfail was measured with client version 0


def test_report_without_failures(sweep, tmp_path):
    paths, _, _ = sweep
    ok = [p for p in paths if p.parent.name in ("baseline", "cb")]
    csv = tmp_path / "ok.csv"
    collect(ok, csv, levels=LEVELS)
    out = tmp_path / "ok.html"
    build_report(csv, ok, out)
    html = out.read_text()
    assert "No failures" in html
    assert ">stale<" not in html


def test_gpu_telemetry_table(sweep, tmp_path):
    paths, _, _ = sweep
    path = next(p for p in paths if p.parent.name == "cb")
    cell = json.loads(path.read_text())
    level = cell["levels"][0]
    level["gpu"] = {
        "available": True,
        "energy_j": 1234.5,
        "gpus": [
            {
                "index": 3,
                "name": "NVIDIA H200",
                "memory_used_start_mib": 20480,
                "memory_used_peak_mib": 21978,
                "power_mean_w": 599.25,
                "energy_j": 1234.5,
            },
        ],
    }
    level["joules_per_output_token"] = 1234.5 / 800
    path.write_text(json.dumps(cell))
    csv = tmp_path / "gpu.csv"
    collect(paths, csv, levels=LEVELS)
    out = tmp_path / "gpu.html"
    build_report(csv, paths, out)
    html = out.read_text()
    section = html[html.index("GPU memory and energy") : html.index("<h2>Failures")]
    for text in ("3 NVIDIA H200", ">20480<", ">21978<", ">599.2<", ">1234.5<", ">1.543<"):
        assert text in section, text


def test_no_gpu_telemetry_is_said(sweep, tmp_path):
    paths, csv, _ = sweep
    out = tmp_path / "r.html"
    build_report(csv, paths, out)
    assert "No GPU telemetry" in out.read_text()
