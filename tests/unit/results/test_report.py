"""The self-contained HTML report: verdicts first, then the evidence; everything escaped."""

import base64
import json
import math
import re
import statistics

import pytest
from fixtures.cells import (
    EVIL,
    LEVELS,
    MODEL,
    REPEATS,
    SETTINGS,
    VARIANTS,
    command_str,
    tput,
    write_sweep,
)
from fixtures.cells import judge_sweep as judge
from fixtures.paths import FIXTURES, ROOT
from markupsafe import escape
from scipy.stats import t as student_t

from servesweep import CLIENT_VERSION
from servesweep.results.judge.step import analysis_of
from servesweep.results.report.build import build_report
from servesweep.sweep.config import load_file
from servesweep.sweep.stages import repeats_rule


@pytest.fixture
def sweep(tmp_path):
    paths, expected = write_sweep(tmp_path)
    return paths, *judge(paths, tmp_path)


@pytest.mark.slow
def test_the_verdict_table_comes_first_with_intervals_from_boots(sweep, tmp_path):
    paths, summary, verdicts = sweep
    out = tmp_path / "report.html"
    build_report(summary, verdicts, paths, out, SETTINGS, current_client_version=CLIENT_VERSION)
    html = out.read_text()
    assert html.index('id="verdicts"') < html.index("Throughput and latency vs load")

    # cb at level 10 against baseline, worked by hand from the fabricated boots.
    cb = [tput("cb", 10, r) for r in range(REPEATS)]
    base = [tput("baseline", 10, r) for r in range(REPEATS)]
    # The geometric mean with its ratio interval from the scatter pooled over the two
    # configurations measured there (midfail is stale, kept out): 2 x 1 df.
    m = statistics.geometric_mean(cb)
    logs = [[math.log(x) for x in g] for g in (cb, base)]
    s2 = sum(statistics.variance(g) * (len(g) - 1) for g in logs) / (2 * (REPEATS - 1))
    half = student_t.ppf(0.975, 2 * (REPEATS - 1)) * math.sqrt(s2 / REPEATS)
    assert f"{m:,.1f} [{m * math.exp(-half):,.1f}, {m * math.exp(half):,.1f}]" in html
    delta = (m / statistics.geometric_mean(base) - 1) * 100
    assert f"Δ {delta:+.1f} %" in html
    # The fabricated baseline scatters 32 x more than cb in relative terms (7 tok/s a boot
    # on 40 √L against 0.7 on 128 √L) at every level: the guard judges it by its own scatter.
    assert "a side&#39;s own scatter" in html and "2 / 2 boots, df " in html
    assert re.search(r"Judged by their own scatter[^<]*: baseline \(cpu / synthetic\)\.", html)
    # Beside each level's intervals, where its scatter comes from: one measurement a boot
    # here, so only the total (cb's and the baseline's logs pooled at level 10).
    assert f"boot scatter {100 * math.sqrt(s2):.1f} % (within a boot: not measured)" in html
    assert "faster" in html
    # Words: cb is faster at every valid level (1024 is client-bound, kept out).
    assert "cb (cpu / synthetic): " in html and "at 1–256 (faster)" in html
    # midfail's boots were measured by an older client: stale, kept out, named.
    assert "stale_client: v0" in html
    assert "failed (died)" in html or "excluded" in html
    # bootfail never came up: its levels say so, not "not run".
    assert html.count("failed at boot (boot_timeout)") == len(LEVELS)


@pytest.mark.slow
def test_report_sections_are_escaped_and_self_contained(sweep, tmp_path):
    paths, summary, verdicts = sweep
    out = tmp_path / "report.html"
    build_report(summary, verdicts, paths, out, SETTINGS, current_client_version=CLIENT_VERSION)
    html = out.read_text()
    assert f"Model {MODEL} is synthetic (random weights)" in html
    assert "demo &lt;sweep&gt;" in html
    for text in ("boot_timeout", "died", "server not ready after 600 s"):
        assert text in html
    assert str(escape(EVIL)) in html and "<script" not in html.lower()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) >= 2 and all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    for v in VARIANTS:
        assert str(escape(command_str(v))) in html
    # Links to every boot's records, relative to results/; nothing loaded from elsewhere.
    assert 'href="cells/cpu/synthetic/cb/r1/cell.json"' in html
    assert 'href="cells/cpu/synthetic/cb/r0/server.log"' in html
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<link" not in html.lower()
    assert ">client-bound</span>" in html
    assert "client_bound: achieved concurrency" in html  # in the validity table


@pytest.mark.slow
def test_report_without_failures(tmp_path):
    paths, _ = write_sweep(tmp_path)
    ok = [p for p in paths if p.parent.parent.name in ("baseline", "cb")]
    summary, verdicts = judge(ok, tmp_path)
    out = tmp_path / "ok.html"
    build_report(summary, verdicts, ok, out, SETTINGS)
    html = out.read_text()
    assert "No failures" in html and ">stale<" not in html


@pytest.mark.slow
def test_gpu_telemetry_table(tmp_path):
    paths, _ = write_sweep(tmp_path)
    path = next(p for p in paths if p.parent.parent.name == "cb")
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
    summary, verdicts = judge(paths, tmp_path)
    out = tmp_path / "gpu.html"
    build_report(summary, verdicts, paths, out, SETTINGS)
    html = out.read_text()
    section = html[html.index("GPU memory and energy") : html.index("<h2>Cells")]
    for text in ("3 NVIDIA H200", ">20480<", ">21978<", ">599.2<", ">1234.5<", ">1.543<"):
        assert text in section, text
    assert "No GPU telemetry" not in section


def test_the_default_sweeps_analysis_drives_the_report():
    sweep = load_file(ROOT / "config" / "config.yaml")
    analysis = analysis_of(sweep)
    assert [lv.json for lv in analysis.levels] == [1, 10, 256, 1024]
    # The default shows intervals for real: at least two boots a cell, in stages.
    assert repeats_rule(sweep.raw["benchmark"]["repeats"]).min >= 2
    assert analysis.gates.baseline == "baseline"


@pytest.mark.slow
def test_the_manifest_shows_how_the_gpus_are_linked(tmp_path):
    from servesweep.resources import stack_probe

    paths, _ = write_sweep(tmp_path)
    topo = (FIXTURES / "topo" / "h100_nvswitch_8.txt").read_text()
    for i, path in enumerate(paths):
        cell = json.loads(path.read_text())
        cell["stack_manifest"] = {
            **cell["stack_manifest"],
            "nccl": "2.27.3",
            "topology": topo,
            "gpu_links": stack_probe.gpu_links(topo),
            "nvlink": {
                str(g): {"links": 18, "active": 18, "total_gb_s": 478.116} for g in range(8)
            },
            "comm_env": {"NCCL_IB_DISABLE": "1"},
        }
        gpu = str(i % 2)
        cell["gpu_slots"] = {
            "needed": 1,
            "held": [gpu],
            "cuda_visible_devices": gpu,
            "pool": [str(g) for g in range(8)],
            "source": "detected",
            "lock_dir": "/tmp/x",
            "waited_s": 0.0,
        }
        cell["comm_env"] = {
            "CUDA_VISIBLE_DEVICES": gpu,
            "NCCL_NVLS_ENABLE": "0",
            "NVSHMEM_DISABLE_NVLS": "1",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            **({"NCCL_DEBUG": "INFO"} if cell["variant"] == "cb" else {}),
        }
        path.write_text(json.dumps(cell))
    summary, verdicts = judge(paths, tmp_path)
    out = tmp_path / "report.html"
    build_report(summary, verdicts, paths, out, SETTINGS, current_client_version=CLIENT_VERSION)
    html = out.read_text()
    manifest = html[html.index("Stack manifests") :]
    assert "NVLink: NV18 × 28 pairs" in manifest
    assert "8 GPUs × 18/18 links, 478.116 GB/s each" in manifest
    assert "NCCL_IB_DISABLE=1" in manifest
    assert "NCCL_NVLS_ENABLE=0" in manifest and "TORCH_SYMM_MEM_DISABLE_MULTICAST=1" in manifest
    boots = len(paths)
    cb_boots = sum(1 for p in paths if p.parent.parent.name == "cb")
    assert f"NCCL_DEBUG=INFO ({cb_boots} of {boots} boots)" in manifest
    assert "CUDA_VISIBLE_DEVICES 0 | 1 (pool 0,1,2,3,4,5,6,7, detected)" in manifest
