"""What `num_prompts: auto` saw on the GPU, against what the level's requests say: per level,
the stop's recorded RSE (the coordinator's batches) and the RSE of the same batches timed by
the requests' own end times (docs/sglang-h200.md, "The cost-optimal stop on the GPU").

    python benchmarks/gpu/auto_stop.py benchmarks/results/gpu/sglang-auto-h100

DIR holds results.tar.xz and requests.tar.xz (benchmarks/gpu/wait.sh); prints a table and
writes DIR/auto_stop.json.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path


def from_ends(rows: list[dict], level: int, batches: int) -> float | None:
    """The RSE of `batches` counted batches of max(10, level) requests (after a first,
    discarded one), each timed from the previous batch's last end to its own."""
    size = max(10, level)
    rows = sorted((r for r in rows if not r.get("warmup")), key=lambda r: r["end_s"])
    rates, prev = [], None
    for k in range(1, min(len(rows) // size, batches + 1) + 1):
        chunk = rows[(k - 1) * size : k * size]
        end = chunk[-1]["end_s"]
        if prev is not None:
            rates.append(sum(r["output_tokens"] for r in chunk) / (end - prev))
        prev = end
    if len(rates) < 2:
        return None
    return statistics.stdev(rates) / math.sqrt(len(rates)) / statistics.mean(rates)


def main() -> None:
    here = Path(sys.argv[1])
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("results.tar.xz", "requests.tar.xz"):
            with tarfile.open(here / name) as tar:
                tar.extractall(tmp, filter="data")
        for p in sorted(Path(tmp).glob("results/cells/*/*/*/r*/levels/L*_i*.json")):
            d = json.loads(p.read_text())
            reqs = p.with_name(p.name.replace(".json", ".requests.jsonl"))
            rows = [json.loads(line) for line in reqs.read_text().splitlines()]
            rse = from_ends(rows, int(d["level"]), int(d["stop_batches"]))
            out.append(
                {
                    "variant": p.parts[-4],
                    "boot": p.parts[-3],
                    "level": d["level"],
                    "requests": d["completed"],
                    "seconds": round(d["duration_s"], 1),
                    "stop_reason": d["stop_reason"],
                    "batches": d["stop_batches"],
                    "rse_recorded": d["stop_rse"],
                    "rse_from_ends": None if rse is None else round(rse, 5),
                    "target": d.get("stop_target_rse"),
                    "output_tok_s": round(d["output_throughput"], 1),
                }
            )
    for r in out:
        print(
            f"{r['variant']:>13} {r['boot']} L{r['level']:<5} {r['requests']:>5} req "
            f"{r['seconds']:>5} s {r['stop_reason']:<13} {r['batches']:>4} batches  RSE "
            f"{r['rse_recorded']:.4f} recorded, {r['rse_from_ends']} from ends, target "
            f"{r['target']}"
        )
    (here / "auto_stop.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
