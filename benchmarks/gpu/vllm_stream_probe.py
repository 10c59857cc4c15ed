"""What each streamed chunk of a vLLM completion carried: the evidence that ended the check
from above of the usage gate (metrics version 1's `retokenized_mismatch`: usage above the
chunks' texts retokenized alone; now servesweep.bench.metrics.usage_mismatch).

`probe` sends prompts the way servesweep's client does (completions, stream, usage,
temperature 0, ignore_eos) and asks vLLM for two more things on every chunk: the token ids
it carried (`return_token_ids`) and the running usage count
(`stream_options.continuous_usage_stats`). `explain` then sets, per request, the gate's
view (usage against each chunk's text retokenized alone) beside the truth (the ids), and
names the chunks where the two part:

- `merged`: a chunk of k > 1 tokens whose text, encoded alone, is fewer than k tokens
  (byte-level BPE merges the tokens' texts when they are encoded together);
- `empty`: tokens streamed in a chunk with no text (our client skips such chunks: they are
  no content);
- `split`: a chunk whose text encodes to more tokens than it carried (the gate's slack
  the other way).

    python benchmarks/gpu/vllm_stream_probe.py explain PROBE.jsonl --tokenizer DIR/tokenizer.json

Run on the H200 by benchmarks/gpu/vllm_parity.py (`--probe-levels`), which writes PROBE.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from servesweep.bench.request_records import token_counts  # noqa: E402


async def _one(session, url: str, body: dict) -> dict:
    chunks, usage, finish, error = [], None, None, None
    sent = time.perf_counter()
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                return {"error": f"http_{resp.status}", "chunks": []}
            buffer = b""
            async for block in resp.content.iter_any():
                now = (time.perf_counter() - sent) * 1e3
                buffer += block
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    data = event.strip().removeprefix(b"data: ")
                    if not data or data == b"[DONE]":
                        continue
                    obj = json.loads(data)
                    if obj.get("usage"):
                        usage = obj["usage"].get("completion_tokens")
                    for choice in obj.get("choices") or []:
                        finish = choice.get("finish_reason") or finish
                        chunks.append(
                            {
                                "t_ms": round(now, 3),
                                "text": choice.get("text") or "",
                                "token_ids": choice.get("token_ids") or [],
                                "usage": (obj.get("usage") or {}).get("completion_tokens"),
                            }
                        )
    except Exception as exc:  # noqa: BLE001 - a failed request is a record, not a crash
        error = f"{type(exc).__name__}: {exc}"[:300]
    return {"usage": usage, "finish_reason": finish, "error": error, "chunks": chunks}


async def probe(base_url: str, model: str, prompts, concurrency: int) -> list[dict]:
    """Every prompt (servesweep.workloads.Prompt) sent with at most `concurrency` in
    flight; one dict per request, in prompt order."""
    import aiohttp

    url = base_url.rstrip("/") + "/v1/completions"
    limit = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def run(i, p):
            body = {
                "model": model,
                "prompt": p.text,
                "max_tokens": p.output_tokens,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                "temperature": 0,
                "ignore_eos": True,
                "return_token_ids": True,
            }
            async with limit:
                return {"index": i, **(await _one(session, url, body))}

        return await asyncio.gather(*(run(i, p) for i, p in enumerate(prompts)))


def explain(requests: list[dict], tokenizer) -> dict:
    """Per request the gate's numbers and the chunks that explain them; totals over all."""
    texts = sorted({c["text"] for r in requests for c in r["chunks"] if c["text"]})
    alone = dict(zip(texts, token_counts(tokenizer, texts), strict=True))
    rows, totals = [], Counter()
    for r in requests:
        if r.get("error"):
            totals["errors"] += 1
            continue
        content = [c for c in r["chunks"] if c["text"]]
        usage = r["usage"]
        retok = sum(max(1, alone[c["text"]]) for c in content)
        tol = 0.02  # the gate as it was (before usage_mismatch): retokenized vs usage
        gate = bool(usage) and (usage > retok * (1 + tol) or usage < len(content) * (1 - tol))
        ids = sum(len(c["token_ids"]) for c in r["chunks"])
        sizes = Counter(len(c["token_ids"]) for c in content)
        merged = [
            {"tokens": len(c["token_ids"]), "alone": alone[c["text"]], "text": c["text"]}
            for c in content
            if len(c["token_ids"]) > max(1, alone[c["text"]])
        ]
        empty = [c for c in r["chunks"] if not c["text"] and c["token_ids"]]
        split = sum(1 for c in content if alone[c["text"]] > len(c["token_ids"]))
        row = {
            "index": r["index"],
            "usage": usage,
            "token_ids": ids,
            "content_chunks": len(content),
            "retokenized_tokens": retok,
            "gate_mismatch": gate,
            "chunk_sizes": dict(sorted(sizes.items())),
            "merged_chunks": merged,
            "merged_lost": sum(m["tokens"] - max(1, m["alone"]) for m in merged),
            "empty_chunks": len(empty),
            "empty_tokens": sum(len(c["token_ids"]) for c in empty),
            "split_chunks": split,
        }
        rows.append(row)
        totals["requests"] += 1
        totals["gate_mismatch"] += gate
        totals["usage_equals_ids"] += usage == ids
        totals["content_chunks"] += len(content)
        totals["multi_token_chunks"] += sum(n for k, n in sizes.items() if k > 1)
        totals["merged_chunks"] += len(merged)
        totals["empty_chunks"] += len(empty)
        totals["split_chunks"] += split
        if gate:
            totals["gate_mismatch_with_merged"] += bool(merged)
            totals["gate_mismatch_with_empty"] += bool(empty)
            totals["gate_mismatch_with_multi_token"] += any(k > 1 for k in sizes)
    return {"totals": dict(totals), "requests": rows}


def print_explained(level: str, out: dict) -> None:
    t = out["totals"]
    print(
        f"L{level}: {t.get('requests', 0)} requests, {t.get('gate_mismatch', 0)} flagged by the "
        f"gate; usage = streamed ids in {t.get('usage_equals_ids', 0)}; chunks "
        f"{t.get('content_chunks', 0)}, of them multi-token {t.get('multi_token_chunks', 0)}, "
        f"merged {t.get('merged_chunks', 0)}, empty {t.get('empty_chunks', 0)}; flagged with a "
        f"merged chunk {t.get('gate_mismatch_with_merged', 0)}, with an empty one "
        f"{t.get('gate_mismatch_with_empty', 0)}"
    )
    for row in [r for r in out["requests"] if r["gate_mismatch"]][:3]:
        shown = [(m["tokens"], m["alone"], m["text"]) for m in row["merged_chunks"][:4]]
        print(
            f"  request {row['index']}: usage {row['usage']}, "
            f"retokenized {row['retokenized_tokens']}"
            f", chunks {row['chunk_sizes']}, merged (tokens, alone, text) {shown}, "
            f"empty {row['empty_chunks']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["explain"])
    parser.add_argument("probe", type=Path, help="JSONL: one line {level, requests} a level")
    parser.add_argument("--tokenizer", type=Path, required=True, help="the model's tokenizer.json")
    parser.add_argument("--out", type=Path, help="write the explanation here (JSON)")
    args = parser.parse_args()
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(args.tokenizer))
    result = {}
    for line in args.probe.read_text().splitlines():
        item = json.loads(line)
        result[str(item["level"])] = explained = explain(item["requests"], tokenizer)
        print_explained(item["level"], explained)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
