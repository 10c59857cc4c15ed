"""Config validation, variant inheritance, cells and spec hashing (no Snakemake)."""

import copy

import pytest
import yaml
from fixtures.configs import BAD_CONFIGS, base_config
from fixtures.paths import ROOT

from servesweep.level import Level
from servesweep.server.engines import flags_to_args
from servesweep.sweep.config import (
    ConfigError,
    load,
    load_file,
    spec_from_json,
    spec_hash,
    spec_json,
)


def test_default_config_loads():
    sweep = load_file(ROOT / "config" / "config.yaml")
    assert "baseline" in sweep.variants
    assert sweep.raw["benchmark"]["levels"] == [1, 10, 256, 1024]
    assert len(sweep.cells) == len(sweep.stacks) * len(sweep.models) * len(sweep.variants)


def test_inheritance_carries_flags_and_env_forward():
    sweep = load(base_config())
    cb_small = sweep.variants["cb-small"]
    # Parent flags carry forward, the child's own come after, null removes.
    assert cb_small["flags"] == {
        "device": "cpu",
        "continuous-batching": True,
        "cb-num-blocks": 64,
    }
    assert cb_small["env"] == {"B": "2"}
    assert cb_small["chain"] == ["baseline", "cb", "cb-small"]
    assert sweep.variants["cb"]["flags"]["dtype"] == "float32"
    assert sweep.variants["cb"]["engine"] == "transformers"


def test_defaults_are_filled():
    sweep = load(base_config())
    assert sweep.server.host == "127.0.0.1"
    assert sweep.server.port == "auto" and sweep.server.auto_port
    assert sweep.raw["benchmark"]["workload"]["output_tokens"] == 16
    assert sweep.num_prompts(Level.parse(1)) == 20  # min
    assert sweep.num_prompts(Level.parse(256)) == 256


def test_num_prompts_rule():
    config = base_config()
    config["benchmark"]["num_prompts"] = {"per_level": 5, "min": 50, "max": 3000}
    sweep = load(config)
    assert [sweep.num_prompts(Level.parse(lv)) for lv in (1, 10, 256, 1024)] == [50, 50, 1280, 3000]


def test_synthetic_without_parameters_means_defaults():
    config = base_config()
    config["models"]["tiny"] = {"synthetic": None}
    assert load(config).models["tiny"] == {"synthetic": {}}


# (how to break base_config(), the key the one-line error must name). One of each kind of
# message also runs through real Snakemake (test_workflow.py, THROUGH_SNAKEMAKE).
@pytest.mark.parametrize("mutate, key", BAD_CONFIGS)
def test_bad_config_gives_one_line_naming_the_key(mutate, key):
    config = base_config()
    mutate(config)
    with pytest.raises(ConfigError) as err:
        load(config)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"config: {key}"), message


def test_cycle_is_named():
    config = base_config()
    config["variants"]["cb"]["extends"] = "cb-small"
    with pytest.raises(ConfigError, match="cycle"):
        load(config)


def test_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("stacks: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_file(bad)


def test_spec_hash_is_stable_and_sensitive():
    sweep = load(base_config())
    spec = sweep.spec("cpu", "tiny", "cb")
    again = load(yaml.safe_load(yaml.safe_dump(base_config()))).spec("cpu", "tiny", "cb")
    assert spec_hash(spec) == spec_hash(again)
    assert spec_json(spec) == spec_json(again)
    assert len(spec_hash(spec)) == 12
    # Editing one variant changes its hash and its children's, not its siblings'.
    config = base_config()
    config["variants"]["cb"]["flags"]["cb-block-size"] = 32
    edited = load(config)
    assert spec_hash(edited.spec("cpu", "tiny", "cb")) != spec_hash(spec)
    assert spec_hash(edited.spec("cpu", "tiny", "cb-small")) != spec_hash(
        sweep.spec("cpu", "tiny", "cb-small")
    )
    assert spec_hash(edited.spec("cpu", "tiny", "baseline")) == spec_hash(
        sweep.spec("cpu", "tiny", "baseline")
    )


def test_spec_holds_the_launch_command():
    spec = load(base_config()).spec("cpu", "tiny", "cb-small")
    assert spec["command"] == [
        "<stack>/bin/transformers",
        "serve",
        "<model>",
        "--host",
        "127.0.0.1",
        "--port",
        "<port>",
        "--device",
        "cpu",
        "--continuous-batching",
        "--cb-num-blocks",
        "64",
    ]
    assert spec["benchmark"]["num_prompts_per_level"] == {"1": 20, "4": 20}


def test_flags_to_args():
    args = flags_to_args(
        {
            "tp": 8,
            "trust-remote-code": True,
            "disable-thing": False,
            "none": None,
            "cuda-graph-bs": [1, 2, 4],
            "speculative-config": {"k": 3},
            "mem-fraction-static": 0.85,
        }
    )
    assert args == [
        "--tp",
        "8",
        "--trust-remote-code",
        "--cuda-graph-bs",
        "1",
        "2",
        "4",
        "--speculative-config",
        '{"k":3}',
        "--mem-fraction-static",
        "0.85",
    ]


def test_config_is_not_mutated():
    config = base_config()
    snapshot = copy.deepcopy(config)
    load(config)
    assert config == snapshot


@pytest.mark.parametrize(
    "path",
    [ROOT / "config" / "config.yaml", *sorted((ROOT / "config" / "examples").glob("*.yaml"))],
    ids=lambda p: p.name,
)
def test_schema_defaults_fill_as_snakemake_fills_them(path):
    # The schema is the one home of the defaults: resolution gives the same sweep whether
    # or not Snakemake's validate has already written them into the config.
    from snakemake.utils import validate

    from servesweep.sweep.config import with_defaults
    from servesweep.sweep.schema import SCHEMA_PATH

    raw = yaml.safe_load(path.read_text())
    by_snakemake = copy.deepcopy(raw)
    validate(by_snakemake, schema=str(SCHEMA_PATH))
    ours = with_defaults(raw)
    assert ours["server"]["boot_timeout_s"] == raw.get("server", {}).get("boot_timeout_s", 300)
    defaults = {"boot": 1, "failed_cells": False, "max_attempts": 3}
    assert ours["retries"] == {**defaults, **raw.get("retries", {})}
    for key in ("stacks", "models", "variants", "benchmark", "engine", "hunt"):
        if key in by_snakemake:
            assert by_snakemake[key] == ours[key], key
    # Sections Snakemake leaves out when absent, ours fills: both resolve the same.
    sweep = load(raw)
    hunt = sweep.hunt  # a hunt has no grid: its start's cell and a composed one
    cells = sweep.cells or [(hunt.stack, hunt.model, hunt.spec.start.name)]
    if hunt:
        composed = f"{hunt.spec.start.name}+{hunt.spec.candidates[0].name}"
        cells.append((hunt.stack_of(composed), hunt.model, composed))
        assert load(by_snakemake).hunt.spec == hunt.spec
    for cell in cells[:2]:
        assert load(by_snakemake).spec(*cell) == sweep.spec(*cell)


def test_spec_keeps_the_flag_order_of_the_config():
    config = base_config()
    config["variants"]["baseline"]["flags"] = {"zeta": 1, "alpha": True, "mid": "x"}
    spec = load(config).spec("cpu", "tiny", "baseline")
    # A canonical JSON round trip (what Snakemake's params carry) keeps the order.
    import json

    from servesweep.server.engines import launch_command

    again = json.loads(spec_json(spec))
    argv = launch_command(again, "/py", "/m", "127.0.0.1", 1)
    assert argv[argv.index("--port") + 2 :] == ["--zeta", "1", "--alpha", "--mid", "x"]


def test_correctness_settings_come_from_the_schema():
    from servesweep.correctness.answers import DEFAULTS

    sweep = load(base_config())
    assert sweep.correctness == DEFAULTS  # the pass's own defaults agree with the schema's
    off = base_config() | {"correctness": False}
    assert load(off).correctness is False
    assert load(off).spec("cpu", "tiny", "baseline")["correctness"] is False
    some = base_config() | {"correctness": {"max_tokens": 16}}
    assert load(some).correctness == {**DEFAULTS, "max_tokens": 16}


def test_must_match_follows_speculative_flags_unless_a_variant_says():
    config = base_config()
    config["variants"]["spec"] = {
        "extends": "baseline",
        "flags": {"speculative-algorithm": "EAGLE3"},
    }
    config["variants"]["strict"] = {"extends": "baseline", "correctness_must_match": True}
    sweep = load(config)
    assert sweep.must_match("spec") and sweep.must_match("strict")
    assert not sweep.must_match("cb")


def test_the_analysis_settings_are_the_schemas_section():
    from servesweep.sweep.analysis import AnalysisSettings
    from servesweep.sweep.config import with_defaults
    from servesweep.sweep.schema import schema, section_defaults

    keys = schema()["properties"]["analysis"]["properties"]
    assert set(AnalysisSettings._fields) == set(keys)
    defaults = AnalysisSettings()._asdict()
    assert {k: defaults[k] for k in section_defaults("analysis")} == section_defaults("analysis")
    # The sweep's section is typed once at load, and renders back to the mapping the
    # schema's defaults make of the file (what the stage files hash and hunt steps record),
    # for the default and every example.
    examples = sorted((ROOT / "config" / "examples").glob("*.yaml"))
    for path in [ROOT / "config" / "config.yaml", *examples]:
        sweep = load_file(path)
        assert isinstance(sweep.analysis, AnalysisSettings), path
        section = with_defaults(yaml.safe_load(path.read_text()))["analysis"]
        assert sweep.analysis.as_config() == section, path
        given = {k: tuple(v) if k == "levels" else v for k, v in section.items()}
        assert sweep.analysis._asdict() == {**defaults, **given}, path


def test_a_per_level_boot_scatter_keys_its_levels_as_the_workflow_names_them():
    # Keys as YAML writes them (ints, in any order) or as strings: one spec, keyed as levels
    # are in file names ("2", not 2), whose canonical JSON reads back to the same text (with
    # int keys 2 sorts before 10, as strings after it).
    texts = set()
    for given in ({10: 8.0, 2: 1.0}, {"2": 1.0, "10": 8.0}):
        config = base_config()
        config["benchmark"].update(
            levels=[2, 10], num_prompts="auto", precision={"boot_cv_pct": given}
        )
        sweep = load(config)
        assert sweep.raw["benchmark"]["precision"]["boot_cv_pct"] == {"2": 1.0, "10": 8.0}
        assert config["benchmark"]["precision"]["boot_cv_pct"] == given  # not mutated
        text = spec_json(sweep.spec("cpu", "tiny", "cb"))
        assert spec_json(spec_from_json(text)) == text
        texts.add(text)
    assert len(texts) == 1
    # One number is kept as it is given (the shipped sweeps' spec hashes: test_spec_hashes).
    config = base_config()
    config["benchmark"].update(num_prompts="auto", precision={"boot_cv_pct": 1.0})
    assert load(config).raw["benchmark"]["precision"]["boot_cv_pct"] == 1.0


@pytest.mark.parametrize(
    "given, message",
    [
        ({1: 1.0, 4: -1}, "boot_cv_pct[4]: -1 is less than or equal to the minimum of 0"),
        ({}, "boot_cv_pct: {} should be non-empty"),
        ({"one": 1.0, 4: 1.0}, "boot_cv_pct: 'one' is not a level (benchmark.levels: 1, 4)"),
        ({1: 1.0, "1.0": 2.0, 4: 1.0}, "boot_cv_pct: level 1.0 is given twice"),
    ],
)
def test_a_bad_per_level_boot_scatter_is_one_line_naming_the_key(given, message):
    config = base_config()
    config["benchmark"]["precision"] = {"boot_cv_pct": given}
    with pytest.raises(ConfigError) as err:
        load(config)
    assert str(err.value).startswith(f"config: benchmark.precision.{message}"), str(err.value)


@pytest.mark.parametrize(
    ("workload", "output_tokens"),
    [
        ({"kind": "sharegpt", "path": "sg.json"}, None),  # each reply's own length
        ({"kind": "sharegpt", "path": "sg.json", "output_tokens": 64}, 64),
        ({"kind": "random"}, 16),
        ({}, 16),
        ({"kind": "shared_prefix", "groups": 2, "prefix_tokens": 8}, 16),
    ],
)
def test_output_tokens_default_depends_on_the_kind_as_snakemake_fills_it(workload, output_tokens):
    # The schema's default for output_tokens sits in an `else` of `kind: sharegpt`: the
    # same with Snakemake's validate as with ours, and in the cell's spec.
    from snakemake.utils import validate

    from servesweep.sweep.config import with_defaults
    from servesweep.sweep.schema import SCHEMA_PATH

    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    raw.setdefault("benchmark", {})["workload"] = workload
    by_snakemake = copy.deepcopy(raw)
    validate(by_snakemake, schema=str(SCHEMA_PATH))
    ours = with_defaults(raw)["benchmark"]["workload"]
    assert by_snakemake["benchmark"]["workload"] == ours
    assert ours.get("output_tokens") == output_tokens
    sweep = load(raw)
    assert sweep.benchmark.workload.output_tokens == output_tokens
    spec = sweep.spec(*sweep.cells[0])
    assert spec["benchmark"]["workload"].get("output_tokens") == output_tokens
