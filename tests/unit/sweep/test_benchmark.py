"""The `benchmark:` section typed (servesweep.sweep.benchmark): its fields the schema's keys,
its defaults the schema's, and the sweep's reading the same as a boot's from its spec."""

from dataclasses import fields, replace

from fixtures.paths import ROOT

from servesweep.sizing import PromptCount, level_requests
from servesweep.sweep.benchmark import Arrival, BenchmarkSettings, Search
from servesweep.sweep.config import load_file
from servesweep.sweep.schema import filled, schema, section_defaults
from servesweep.workloads.random_tokens import RandomWorkload


def test_the_settings_are_the_schemas_section():
    keys = set(schema()["properties"]["benchmark"]["properties"])
    mine = {f.name for f in fields(BenchmarkSettings)}
    # `levels` holds `levels` or `rate` (`kind` says which); a spec adds its counts per level.
    assert mine - {"kind", "num_prompts_per_level"} == keys - {"rate"}
    typed = BenchmarkSettings.of({"levels": [1]})
    # num_prompts' default, {}, is its own keys' defaults: PromptCount() (tests/unit/test_sizing.py)
    defaults = section_defaults("benchmark")
    assert defaults.pop("num_prompts") == {} and typed.num_prompts == PromptCount()
    # workload's, {}, is its own keys' defaults too: the default kind's, typed.
    assert defaults.pop("workload") == {}
    workload = filled({}, "benchmark", "workload")  # with the kind's own (output_tokens 16)
    assert workload.pop("kind") == "random" and workload["output_tokens"] == 16
    assert typed.workload == RandomWorkload(**workload)
    # A section with `$ref`s fills alone as it does inside the whole config.
    section = filled({"levels": [1]}, "benchmark")
    assert section == filled({"benchmark": {"levels": [1]}})["benchmark"]
    assert {k: getattr(typed, k) for k in defaults} == defaults
    assert typed.arrival == Arrival("poisson", 1.0, 0) and typed.search is None
    assert Search.of({}) is None and Search.of({"probes": 2}) == Search(2, 0.9)


def test_a_boot_reads_its_spec_as_the_sweep_reads_its_file():
    # Built once at load (Sweep.benchmark) and once a boot from the cell's spec JSON: the
    # two agree, but for what a spec leaves out (repeats) or adds (the counts per level),
    # and every level sends the same requests by either.
    examples = sorted((ROOT / "config" / "examples").glob("*.yaml"))
    read = 0
    for path in [ROOT / "config" / "config.yaml", *examples]:
        sweep = load_file(path)
        for cell in sweep.cells[:1]:  # a hunt's cells are its steps'
            read += 1
            spec = BenchmarkSettings.of(sweep.spec(*cell)["benchmark"])
            mine = replace(spec, repeats=sweep.benchmark.repeats, num_prompts_per_level={})
            assert mine == sweep.benchmark, path
            for level in sweep.levels:
                sends = level_requests(spec, level)
                assert sends == level_requests(sweep.benchmark, level), (path, level)
                assert sends.measured == sweep.num_prompts(level), (path, level)
    assert read >= 10
