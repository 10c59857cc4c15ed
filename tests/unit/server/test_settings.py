"""The `server:` section typed (servesweep.server.settings): its fields the schema's keys,
read alike by the sweep from its file and by a boot from the cell's spec, and the one rule
that gives a variant its GPUs."""

from dataclasses import fields

import pytest
from fixtures.configs import base_config
from fixtures.paths import ROOT

from servesweep.server.settings import ServerSettings
from servesweep.sweep.config import load, load_file, spec_from_json, spec_json
from servesweep.sweep.schema import schema, section_defaults


def test_the_settings_are_the_schemas_section():
    # Every key is a field, and every key has a default in the schema, so a section the
    # schema has filled (a sweep's, and so a spec's) gives every field.
    keys = schema()["properties"]["server"]["properties"]
    assert [f.name for f in fields(ServerSettings)] == list(keys)
    defaults = section_defaults("server")
    assert set(defaults) == set(keys)
    assert ServerSettings.of(defaults) == ServerSettings("127.0.0.1", "auto", 300, 15, 0)
    with pytest.raises(KeyError, match="gpus"):
        ServerSettings.of({k: v for k, v in defaults.items() if k != "gpus"})


def test_a_boot_reads_its_spec_as_the_sweep_reads_its_file():
    examples = sorted((ROOT / "config" / "examples").glob("*.yaml"))
    read = 0
    for path in [ROOT / "config" / "config.yaml", *examples]:
        sweep = load_file(path)
        assert isinstance(sweep.server, ServerSettings), path
        for cell in sweep.cells[:1]:  # a hunt's cells are its steps'
            read += 1
            spec = spec_from_json(spec_json(sweep.spec(*cell)))
            assert spec["server"] == sweep.raw["server"], path  # the spec is the raw section
            assert ServerSettings.of(spec["server"]) == sweep.server, path
    assert read >= 10


def test_given_keys_are_read_as_given():
    config = base_config()
    config["server"] = {"port": 8123, "boot_timeout_s": 2.5, "gpus": 2}
    server = load(config).server
    assert server == ServerSettings("127.0.0.1", 8123, 2.5, 15, 2)
    assert not server.auto_port


def test_a_variant_without_gpus_holds_the_servers():
    server = ServerSettings.of({**section_defaults("server"), "gpus": 4})
    assert server.gpus_of({"gpus": None}) == 4
    assert server.gpus_of({"gpus": 1}) == 1
    assert server.gpus_of({"gpus": 0}) == 0  # 0 is the variant's own, not unset
    # The sweep gives each cell its GPUs by the same rule.
    config = base_config()
    config["server"] = {"gpus": 3}
    config["variants"]["cb"]["gpus"] = 1
    sweep = load(config)
    assert sweep.gpus("baseline") == 3 and sweep.gpus("cb") == 1
    assert sweep.spec("cpu", "tiny", "cb-small")["gpus"] == 1  # inherited from cb
