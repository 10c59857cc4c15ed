"""The multi-GPU manifest's parsers (servesweep.resources.stack_probe, standard library only) on
samples laid out like published `nvidia-smi topo -m` / `nvlink --status` output
(tests/fixtures/topo/README.md), and the report's view of them."""

import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.paths import FIXTURES

from servesweep.resources import stack_probe
from servesweep.results.report.gpu_views import links_text, nvlink_text
from servesweep.server import env as server_env

TOPO = FIXTURES / "topo"


def sample(name: str) -> str:
    return (TOPO / name).read_text()


def test_nvswitch_box_every_pair_is_nvlink():
    links = stack_probe.gpu_links(sample("h100_nvswitch_8.txt"))
    assert len(links) == 28 and set(links.values()) == {"NV18"}
    assert "0-7" in links and "7-0" not in links
    assert links_text(links) == "NVLink: NV18 × 28 pairs"


def test_pcie_box_with_nics_counts_only_gpu_pairs():
    links = stack_probe.gpu_links(sample("rtx4090_pcie_8.txt"))
    assert len(links) == 28 and set(links.values()) == {"SYS"}
    assert links_text(links) == "PCIe only: SYS × 28 pairs"


def test_nic_rows_and_columns_are_not_gpus():
    links = stack_probe.gpu_links(sample("h100_nv6_4_nics.txt"))
    assert links == {f"{a}-{b}": "NV6" for a in range(4) for b in range(a + 1, 4)}


def test_a_tty_underlined_header_and_two_gpus():
    assert stack_probe.gpu_links(sample("rtx5090_phb_2.txt")) == {"0-1": "PHB"}


def test_mixed_pcie_levels():
    links = stack_probe.gpu_links(sample("pcie_switches_8.txt"))
    assert links["0-1"] == "PIX" and links["0-2"] == "PHB" and links["3-4"] == "SYS"
    assert links["6-7"] == "PIX" and len(links) == 28
    assert links_text(links) == "PCIe only: SYS × 16, PHB × 8, PIX × 4 pairs"


@pytest.mark.parametrize("text", [None, "", sample("single_gpu.txt"), "No devices were found"])
def test_no_pairs_is_none(text):
    assert stack_probe.gpu_links(text) is None


def test_mixed_nvlink_and_pcie_is_named_so():
    links = {"0-1": "NV4", "2-3": "NV4", "0-2": "SYS", "0-3": "SYS", "1-2": "SYS", "1-3": "SYS"}
    assert links_text(links) == "mixed: SYS × 4, NV4 × 2 pairs"
    assert links_text(None) == "—"


def test_nvlink_status():
    a100 = stack_probe.nvlink_status(sample("nvlink_a100.txt"))
    assert a100 == {
        "0": {"links": 12, "active": 12, "total_gb_s": 300.0},
        "1": {"links": 12, "active": 10, "total_gb_s": 250.0},
    }
    assert nvlink_text(a100) == "GPU 0: 12/12 links, 300 GB/s; GPU 1: 10/12 links, 250 GB/s"
    h100 = stack_probe.nvlink_status(sample("nvlink_h100.txt"))
    assert len(h100) == 8 and h100["7"] == {"links": 18, "active": 18, "total_gb_s": 478.116}
    assert nvlink_text(h100) == "8 GPUs × 18/18 links, 478.116 GB/s each"
    assert stack_probe.nvlink_status(sample("nvlink_pcie.txt")) is None
    assert stack_probe.nvlink_status(None) is None and nvlink_text(None) == "—"


def test_the_probe_records_the_communication_variables_of_its_environment():
    env = {"PATH": "/usr/bin:/bin", "NCCL_IB_DISABLE": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    out = subprocess.run(
        [sys.executable, "-S", str(Path(stack_probe.__file__)), "{}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    import json

    facts = json.loads(out.stdout)
    assert facts["comm_env"] == {"NCCL_IB_DISABLE": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    assert "gpu_links" in facts and "nvlink" in facts
    # The probe's own copy of the names stays equal to the workflow's.
    assert stack_probe.COMM_PREFIXES == server_env.COMM_PREFIXES
    assert stack_probe.COMM_NAMES == server_env.COMM_NAMES


def test_the_lent_h200s_own_matrix_with_its_terminal_escapes():
    """Verbatim from the lent one-GPU H200 (2026-12-02): the header is underlined with
    escape codes, which must not hide the GPU columns."""
    text = sample("h200_single_seen.txt")
    assert "\x1b[4m" in text
    assert stack_probe.gpu_links(text) is None  # one GPU: no pairs
    two = text.replace("GPU0\tCPU", "GPU0\tGPU1\tCPU").replace("GPU0\t X \t", "GPU0\t X \tNV18\t")
    two += "GPU1\tNV18\t X \t0-15\t0\t\tN/A\n"
    assert stack_probe.gpu_links(two) == {"0-1": "NV18"}
