"""What one boot measures: its levels in order, and each level's prompts."""

from __future__ import annotations

from pathlib import Path

from servesweep.bench.workload import Prompt, random_prompts, sharegpt_prompts


def level_plan(spec: dict) -> list[tuple[int, int]]:
    """(level, in_boot) in the order one boot runs them: each level's measurements within
    the boot back to back."""
    bench = spec["benchmark"]
    return [(level, i) for level in bench["levels"] for i in range(bench["repeats_in_boot"])]


def make_prompts(spec: dict, tokenizer, level: int, in_boot: int) -> list[Prompt]:
    """The level's prompts (warmup first). Seeded by level and in-boot index only, so every
    variant, and every boot, sees exactly the same requests."""
    bench = spec["benchmark"]
    workload = bench["workload"]
    n = bench["warmup"] + bench["num_prompts_per_level"][str(level)]
    seed = workload["seed"] * 1_000_003 + level * 101 + in_boot
    if workload["kind"] == "sharegpt":
        return sharegpt_prompts(
            Path(workload["path"]), tokenizer, n, workload.get("output_tokens"), seed
        )
    return random_prompts(tokenizer, n, workload["input_tokens"], workload["output_tokens"], seed)
