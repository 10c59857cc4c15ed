"""The staged repeats' records without Snakemake (servesweep.results.judge.stages): step 0
asks for every cell's first stage, a step decides over fabricated boots with known values
and asks for the next boots of the open variants only, interleaved; collect writes the
look beside each variant's primary verdicts."""

import json

import pandas as pd
from fixtures.cells import level_summary

from servesweep import CLIENT_VERSION
from servesweep.results.judge import stages
from servesweep.results.judge.step import with_stages
from servesweep.sweep.config import load
from servesweep.sweep.layout import Paths

SCALE = {"baseline": 100.0, "fast": 300.0, "same": 100.0}


def sweep():
    return load(
        {
            "stacks": {"box": {"kind": "existing", "python": "/opt/env/bin/python3"}},
            "models": {"m": {"path": "/shared/m"}},
            "engine": "vllm",
            "variants": {v: {"flags": {"seed": i}} for i, v in enumerate(SCALE)},
            # reach 0: "same" stays open to the cap (the default stops it once the
            # look at max could not call it: tests/unit/sweep/test_stages.py).
            "correctness": False,
            "benchmark": {
                "levels": [1, 4],
                "repeats": {"min": 2, "max": 4, "stage": 1, "reach": 0},
            },
        }
    )


def write_boot(paths: Paths, variant: str, repeat: int) -> None:
    # A 1 % scatter between boots, alternating: the same in every variant.
    levels = []
    for level in (1, 4):
        s = level_summary("baseline", level, repeat)
        s["output_throughput"] = SCALE[variant] * (1.01 if repeat % 2 else 0.99) * level
        levels.append(s)
    cell = {"stack": "box", "model": "m", "variant": variant, "repeat": repeat}
    cell |= {"status": "ok", "levels": levels, "spec": {}, "attempt": 0}
    cell["client_version"] = CLIENT_VERSION
    path = paths.cell_json("box", "m", variant, repeat)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell))


def test_a_step_asks_for_boots_only_where_a_verdict_is_open(tmp_path):
    sw, paths = sweep(), Paths(tmp_path)
    first = stages.first_record(sw)
    assert first["next"] == {"box/m/baseline": 2, "box/m/fast": 2, "box/m/same": 2}
    cells = stages.first_cells(sw, paths)
    # Interleaved: every cell's r0, then every cell's r1.
    assert [c.split("/")[-3:-1] for c in map(str, cells)] == [
        [v, r] for r in ("r0", "r1") for v in SCALE
    ]
    for v in SCALE:
        for r in range(2):
            write_boot(paths, v, r)
    step = stages.stage_record(sw, paths, 1, first)
    assert step["decisions"]["box/m/fast"]["outcome"] == "faster"
    assert step["decisions"]["box/m/fast"]["look"] == 0
    assert step["decisions"]["box/m/same"]["outcome"] == "open"
    assert step["next"] == {"box/m/baseline": 3, "box/m/fast": 2, "box/m/same": 3}
    assert not step["done"]
    json.dumps(step)  # the record is JSON as it stands
    for v in ("baseline", "same"):
        write_boot(paths, v, 2)
    (tmp_path / "s1.json").write_text(json.dumps(step))
    assert [c.split("/")[-3] for c in stages.next_cells(paths, tmp_path / "s1.json")][-2:] == [
        "baseline",
        "same",
    ]
    later = stages.stage_record(sw, paths, 2, step)
    # The earlier decision stands; same is still open (1 % scatter cannot show ±2 % yet).
    assert later["decisions"]["box/m/fast"] == step["decisions"]["box/m/fast"]
    assert later["next"]["box/m/fast"] == 2


def test_collect_writes_the_look_beside_the_primary_verdicts():
    verdicts = pd.DataFrame(
        [
            {
                "stack": "box",
                "model": "m",
                "variant": "fast",
                "family": "primary",
                "kind": "variant",
            },
            {
                "stack": "box",
                "model": "m",
                "variant": "fast",
                "family": "secondary",
                "kind": "variant",
            },
            {
                "stack": "box",
                "model": "m",
                "variant": "same",
                "family": "primary",
                "kind": "variant",
            },
        ]
    )
    decided = {
        ("box", "m", "fast"): {"outcome": "faster", "look": 0},
        ("box", "m", "same"): {"outcome": "open", "look": None},
    }
    out = with_stages(verdicts, decided)
    assert out["stage_look"].tolist()[0] == 1 and pd.isna(out["stage_look"][1])
    outcome = out["stage_outcome"]
    assert outcome[0] == "faster" and pd.isna(outcome[1]) and outcome[2] == "open"
    assert "stage_look" not in with_stages(verdicts, {}).columns
