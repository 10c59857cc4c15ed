"""What the correctness pass adds to a cell of the default CPU sweep, and what it finds.

    python -m benchmarks.workflow.correctness_cost --stack-python P [--repeats 3] [--out FILE]

For each variant of config/config.yaml (its model built with
servesweep.resources.models.materialize,
its flags, its engine): one server, then the pass `--repeats` times for each of the settings
below, interleaved; each pass's seconds (and its one-at-a-time and all-together parts), the
machine's load, and every variant's comparison with the baseline of the same repeat.
P is an interpreter with torch and transformers[serving] (the `cpu` stack).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path

import yaml

from benchmarks.support import RESULTS, ROOT
from servesweep.bench.client import ClientSettings, probe_generation
from servesweep.correctness.answers import run_correctness
from servesweep.correctness.compare import compare_modes, compare_records
from servesweep.resources.models import materialize
from servesweep.server.engines import get_engine
from servesweep.server.process import ServerProcess, free_port
from servesweep.server.readiness import wait_ready
from servesweep.sweep.config import load
from servesweep.workloads.base import load_tokenizer

SETTINGS = {
    "32x64": {"prompts": 32, "max_tokens": 64},  # the defaults
    "32x32": {"prompts": 32, "max_tokens": 32},
    "16x32": {"prompts": 16, "max_tokens": 32},
}


def measure(python: str, repeats: int, work: Path) -> dict:
    config = load(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    stack, model = next(iter(config.stacks)), next(iter(config.models))
    variants = list(config.variants)
    first = config.spec(stack, model, variants[0])
    manifest = materialize(model, first["model"]["source"], work / "model")
    path = manifest["path"]
    tokenizer = load_tokenizer(Path(path))
    runs, records = [], {}
    for variant in variants:
        spec = config.spec(stack, model, variant)
        engine = get_engine(spec["engine"], spec.get("engine_options"))
        port = free_port()
        command = engine.command(python, path, "127.0.0.1", port, dict(spec["flags"]))
        server = ServerProcess(command, engine.env({}), work / f"{variant}.log", "127.0.0.1", port)
        try:
            settings = ClientSettings(
                base_url=server.base_url,
                model=engine.served_model_name(path),
                request_timeout_s=spec["benchmark"]["request_timeout_s"],
                extra_body=engine.request_extras(),
            )
            wait_ready(
                server,
                engine.health_path,
                engine.models_path,
                settings.model,
                300,
                lambda t, s=settings: asyncio.run(probe_generation(s, "Hello", 4, t)),
                print,
            )
            for repeat in range(repeats):
                for name, cfg in SETTINGS.items():
                    out = work / f"{variant}-{name}-{repeat}.json"
                    summary = run_correctness(settings, tokenizer, engine, cfg, out, lambda m: 0)
                    record = json.loads(out.read_text())
                    records[variant, name, repeat] = record
                    one, together = (
                        record["modes"]["one_at_a_time"],
                        record["modes"]["all_together"],
                    )
                    row = {
                        "variant": variant,
                        "settings": name,
                        "repeat": repeat,
                        "seconds": summary["seconds"],
                        "one_at_a_time_s": round(sum(a["seconds"] for a in one), 3),
                        "all_together_s": round(max(a["seconds"] for a in together), 3),
                        "failed": summary["failed"],
                        "load_1min": round(os.getloadavg()[0], 2),
                    }
                    print(json.dumps(row), flush=True)
                    runs.append(row)
        finally:
            server.stop(grace_s=5)
    found = []
    for (variant, name, repeat), record in records.items():
        pairs = [(variant, [compare_modes(record)])]
        if variant != variants[0]:
            pairs.append((variants[0], compare_records(record, records[variants[0], name, repeat])))
        for against, comparisons in pairs:
            for c in comparisons:
                found.append(
                    {
                        "variant": variant,
                        "compared_to": against,
                        "settings": name,
                        "repeat": repeat,
                        "mode": c.mode,
                        "exact_match_rate": c.exact_match_rate,
                        "mean_first_diff": c.mean_first_diff,
                        "changes_outputs": c.changes_outputs,
                        "note": c.note,
                    }
                )
    return {"cpus": os.cpu_count(), "model": first["model"], "runs": runs, "comparisons": found}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stack-python", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "correctness.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="servesweep-correctness-") as tmp:
        result = measure(args.stack_python, args.repeats, Path(tmp))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
