"""Request records (docs/records.md) from what the workers saw: off the timing path.

Each completed stream's chunks are retokenized with the model's tokenizer (every chunk's
text alone, and the whole text at once) so that the usage count can be checked and tokens
apportioned to chunks; then `metrics.request_metrics` gives its latencies.
"""

from __future__ import annotations

from typing import NamedTuple, cast

from servesweep.bench import metrics
from servesweep.bench.messages import ResultRow, StreamRow
from servesweep.records import RequestRecord
from servesweep.workloads.base import Prompt


class WorkerRow(NamedTuple):
    """A result row and the worker process that produced it."""

    row: ResultRow
    worker: int


def token_counts(tokenizer, texts: list[str]) -> list[int]:
    """Tokens of each text, encoded without special tokens, in batches."""
    encode = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
    counts: list[int] = []
    for i in range(0, len(texts), 8192):
        counts.extend(len(e.ids) for e in encode(texts[i : i + 8192], add_special_tokens=False))
    return counts


def retokenize(tokenizer, streams: list[StreamRow]) -> list[tuple[list[int], int]]:
    """Per stream: each chunk's text encoded alone, and the whole text encoded at once.
    Chunk texts repeat a lot (one token each, mostly), so each distinct one is encoded once."""
    distinct: dict[str, int] = {}
    for s in streams:
        for text in s.texts:
            distinct.setdefault(text, len(distinct))
    counts = token_counts(tokenizer, list(distinct))
    whole = token_counts(tokenizer, ["".join(s.texts) for s in streams])
    return [
        ([counts[distinct[t]] for t in s.texts], w) for s, w in zip(streams, whole, strict=True)
    ]


def build_records(
    rows: list[WorkerRow], prompts: list[Prompt], warmup: int, tokenizer, t0_ns: int
) -> list[RequestRecord]:
    """Request records from the workers' result rows, sorted by request index."""
    rows = sorted(rows, key=lambda r: r.row.index)
    good = [r.row for r in rows if r.row.error is None]
    streams = [cast(StreamRow, r.stream) for r in good]  # an answered request has its stream
    retok = retokenize(tokenizer, streams) if tokenizer is not None else None
    retok_by_index = {r.index: rt for r, rt in zip(good, retok, strict=True)} if retok else {}
    return [
        _record(row, worker, prompts, warmup, t0_ns, retok_by_index.get(row.index))
        for row, worker in rows
    ]


def _record(
    row: ResultRow,
    worker: int,
    prompts: list[Prompt],
    warmup: int,
    t0_ns: int,
    retok: tuple[list[int], int] | None,
) -> RequestRecord:
    rec: RequestRecord = {
        "index": row.index,
        "warmup": row.index < warmup,
        "ok": row.error is None,
        "error": row.error,
        "status_code": row.status,
        "prompt_tokens": prompts[row.index].input_tokens,
        "output_tokens": None,
        "retokenized_tokens": None,
        "retokenized_whole_tokens": None,
        "usage_reported": False,
        "worker": worker,
        "sent_s": round((row.sent_ns - t0_ns) / 1e9, 6),
        "end_s": round((row.end_ns - t0_ns) / 1e9, 6),
        "ttft_ms": None,
        "e2el_ms": None,
        "tpot_ms": None,
        "chunk_times_ms": [],
        "chunk_tokens": [],
        "error_detail": row.detail,
    }
    if row.error is not None:
        return rec
    s = cast(StreamRow, row.stream)  # an answered request has its stream
    chunks, whole = retok or (None, None)
    if s.prompt_tokens is not None:
        rec["prompt_tokens"] = s.prompt_tokens
    rec["usage_reported"] = s.completion_tokens is not None
    # Each chunk's text encoded alone, at least one token each (it came from one). The
    # whole text encoded at once (SGLang's retokenized count) is kept for comparison; it is
    # no check: random tokens do not re-encode to themselves.
    rec["retokenized_tokens"] = sum(max(1, c) for c in chunks) if chunks else None
    rec["retokenized_whole_tokens"] = whole
    out: int | None
    if s.completion_tokens is not None:
        out = s.completion_tokens
    else:
        out = rec["retokenized_tokens"] if chunks is not None else len(s.chunk_ns)
    rec["output_tokens"] = out
    per_chunk = metrics.tokens_per_chunk(s.usage_cumulative, chunks, out)
    timing = metrics.request_metrics(row.sent_ns, row.end_ns, s.chunk_ns, per_chunk, out)
    rec.update(cast(RequestRecord, timing))  # its latency fields
    return rec
