"""Which machine a boot ran on: read from this host, and from a pynvml stand-in with GPUs."""

import json
import socket
import sys
import types

import pandas as pd
from fixtures.cells import SETTINGS, judge_sweep, write_sweep

from servesweep.records import MachineGpu
from servesweep.results.report.build import build_report
from servesweep.server.machine import elsewhere_note, machine_facts, machine_key


def nvml_with(uuids: list[str]):
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlSystemGetDriverVersion = lambda: b"580.95.05"
    nvml.nvmlDeviceGetCount = lambda: len(uuids)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    nvml.nvmlDeviceGetUUID = lambda h: uuids[h]
    return nvml


def test_a_host_without_gpus_is_named_by_its_host_name_and_cpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no NVML here
    facts = machine_facts()
    assert facts["hostname"] == socket.gethostname()
    assert facts["gpus"] == [] and facts["driver"] is None
    models = [
        line.split(":", 1)[1].strip()
        for line in open("/proc/cpuinfo")
        if line.startswith("model name")
    ]
    assert facts["cpu_model"] == (models[0] if models else None)
    assert len(facts["key"]) == 12 and int(facts["key"], 16) >= 0
    assert facts["key"] == machine_facts()["key"]  # the same host, the same key
    json.dumps(facts)  # it goes into cell.json as it is


def test_gpus_name_the_machine_whatever_the_container_is_called(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", nvml_with(["GPU-b", "GPU-a"]))
    facts = machine_facts()
    assert [g["uuid"] for g in facts["gpus"]] == ["GPU-b", "GPU-a"]
    assert facts["driver"] == "580.95.05" and facts["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    gpus = [MachineGpu(index=i, name=None, uuid=u) for i, u in enumerate(["GPU-a", "GPU-b"])]
    # Another container (host name) on the same GPUs is the same machine; other GPUs are not.
    assert facts["key"] == machine_key("another-container", "another cpu", gpus)
    assert facts["key"] != machine_key("x", None, gpus[:1])
    monkeypatch.setitem(sys.modules, "pynvml", nvml_with(["GPU-c", "GPU-a"]))
    assert machine_facts()["key"] != facts["key"]


def test_the_report_warns_when_a_tables_boots_come_from_two_machines(tmp_path):
    paths, _ = write_sweep(tmp_path)
    summary, verdicts = judge_sweep(paths, tmp_path)
    html = tmp_path / "one.html"
    build_report(summary, verdicts, paths, html, SETTINGS)
    assert "Boots from more than one machine" not in html.read_text()

    # One boot of the baseline moved to another machine (a resumed sweep, another node).
    for n, path in enumerate(sorted(paths)):
        cell = json.loads(path.read_text())
        cell["machine"] = {"key": "aaaaaaaaaaaa" if n else "bbbbbbbbbbbb"}
        path.write_text(json.dumps(cell))
    summary, verdicts = judge_sweep(paths, tmp_path)
    build_report(summary, verdicts, paths, html, SETTINGS)
    text = html.read_text()
    assert "Boots from more than one machine" in text
    assert f"2 machines (aaaaaaaaaaaa: {len(paths) - 1} boots, bbbbbbbbbbbb: 1 boot)" in text
    # The baseline's boot on the other machine has no variant beside it: each comparison
    # is blocked on the machine both ran, and names the lone boot's machine.
    rows = pd.read_csv(verdicts)
    rows = rows[(rows["variant"] == "cb") & (rows["n"] > 0)]  # the variant with valid boots
    assert len(rows) and set(rows["variance"]) == {"blocked"}
    assert rows["excluded"].str.contains("machine bbbbbbbbbbbb: one side's boots only").all()
    assert set(rows["n_ref"]) == {1}  # the baseline's boot beside cb's, on aaaaaaaaaaaa


def test_records_without_a_machine_say_nothing():
    here = {"key": "aaaaaaaaaaaa", "hostname": "h"}
    assert elsewhere_note([{}, {"machine": None}], here) is None
    assert elsewhere_note([{"machine": {"key": "aaaaaaaaaaaa"}}], here) is None
