"""The report in a real headless browser: it loads without a console error, the verdict
table and the plots are there, and every image decodes."""

import pytest
from fixtures.browser import keep_screenshot, need_browser, render
from fixtures.cells import SETTINGS, judge_sweep, write_sweep
from fixtures.figures import labelled_ticks, overlapping

from servesweep.results.collect.cells import read_summary
from servesweep.results.report.build import build_report
from servesweep.results.report.plots import metric_figure


@pytest.mark.slow
def test_the_report_renders_in_chromium(tmp_path):
    need_browser()
    paths, _ = write_sweep(tmp_path)
    summary, verdicts = judge_sweep(paths, tmp_path)
    html = tmp_path / "report.html"
    build_report(summary, verdicts, paths, html, SETTINGS)
    shown = render(html, tmp_path / "report.png")
    assert shown.messages == []
    assert shown.title == "demo <sweep>"
    assert shown.verdict_rows == 1 + 4  # header + baseline, cb, bootfail, midfail
    assert shown.scatter_rows == 1  # and where each level's boot scatter comes from
    assert len(shown.image_widths) >= 2 and all(w > 0 for w in shown.image_widths)
    assert shown.screenshot.stat().st_size > 10_000
    keep_screenshot(shown, "fixture-report.png")
    # The plots it shows, drawn again by the same code: no two labelled ticks overlap.
    df = read_summary(summary)
    for column, logy in [
        ("output_throughput", False),
        ("p99_ttft_ms", True),
        ("median_tpot_ms", True),
    ]:
        fig = metric_figure(df, column, column, column, SETTINGS.variants, logy=logy)
        for axis in ("x", "y"):
            ticks = labelled_ticks(fig, axis)
            assert ticks and overlapping(ticks) == [], (column, axis)
