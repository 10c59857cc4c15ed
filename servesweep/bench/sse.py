"""Parsing a finished response: HTTP chunked bodies and OpenAI-style SSE streams.

Runs after the level, off the timing path: each SSE event keeps the arrival stamp of the
read that completed it. Standard library only (it runs in the client's worker processes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import accumulate

_json_decode = json.JSONDecoder().decode  # skips json.loads' per-call encoding sniffing
_SSE_FIELDS = (b"event:", b"id:", b"retry:")


class BadStream(ValueError):
    pass


@dataclass
class Stream:
    """What a finished response stream said."""

    chunk_ns: list[int] = field(default_factory=list)  # arrival of each content chunk
    texts: list[str] = field(default_factory=list)  # its text (reasoning + content)
    usage_cumulative: list[int | None] = field(default_factory=list)  # usage on that chunk
    prompt_tokens: int | None = None  # from the last usage seen
    completion_tokens: int | None = None
    finished: bool = False  # saw a finish_reason or [DONE]
    error: str | None = None  # bad_stream or stream_error
    detail: str | None = None


def dechunk(reads: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """HTTP chunked body -> the payload bytes each read delivered, keeping its stamp."""
    raw = b"".join(d for _, d in reads)
    read_ends = list(accumulate(len(d) for _, d in reads))
    pieces: list[bytes] = []
    decoded_ends: list[int] = []  # per read: decoded bytes up to its end
    got = pos = k = 0
    find = raw.find
    while True:
        eol = find(b"\n", pos)
        if eol < 0:
            raise BadStream("chunked body ended before its last chunk")
        try:
            size = int(raw[pos:eol].split(b";")[0], 16)
        except ValueError as exc:
            raise BadStream(f"bad chunk size line: {raw[pos:eol][:40]!r}") from exc
        if size == 0:
            break
        a, b = eol + 1, eol + 1 + size
        if b > len(raw):
            raise BadStream("chunked body ended inside a chunk")
        while k < len(read_ends) and read_ends[k] <= b:
            decoded_ends.append(got + max(0, read_ends[k] - a))
            k += 1
        pieces.append(raw[a:b])
        got += size
        pos = b + 2
    decoded_ends += [got] * (len(read_ends) - k)
    body = b"".join(pieces)
    out, prev = [], 0
    for (t, _), e in zip(reads, decoded_ends, strict=True):
        if e > prev:
            out.append((t, body[prev:e]))
            prev = e
    return out


def sse_events(reads: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """(arrival_ns, event block) per SSE event, stamped with the read that completed it.
    A trailing event without its blank line still counts (some servers end that way)."""
    events: list[tuple[int, bytes]] = []
    pending = b""
    for t, data in reads:
        buf = pending + data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        *blocks, pending = buf.split(b"\n\n")
        events.extend((t, b) for b in blocks)
    if pending.strip():
        events.append((reads[-1][0], pending))
    return events


def _event_data(block: bytes) -> bytes | None:
    data = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
        elif line and not line.startswith(b":") and not line.startswith(_SSE_FIELDS):
            raise BadStream(f"not an SSE line: {line[:80]!r}")
    return b"\n".join(data) if data else None


def _chunk_text(choice: dict) -> str:
    text = choice.get("text") or ""
    delta = choice.get("delta")
    if not delta:
        return text
    # Some servers send the same reasoning under both names: take one.
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(reasoning, str):
        text += reasoning
    content = delta.get("content")
    if isinstance(content, str):
        text += content
    return text


def _decode_all(datas: list[bytes]) -> list:
    """JSON-decode every event's data. One decode of them all as an array is several times
    faster than one per event; a fault is looked for one by one."""
    try:
        objs = _json_decode((b"[" + b",".join(datas) + b"]").decode())
        if len(objs) == len(datas):
            return objs
    except ValueError:
        pass
    objs = []
    for data in datas:
        try:
            objs.append(_json_decode(data.decode()))
        except ValueError as exc:
            raise BadStream(f"not JSON: {data[:80]!r}") from exc
    return objs


def parse_stream(reads: list[tuple[int, bytes]]) -> Stream:
    """Content chunks, usage and end of an OpenAI-style completion stream (decoded body)."""
    s = Stream()
    try:
        stamps, datas = [], []
        data: bytes | None
        for t, block in sse_events(reads):
            if block.startswith(b"data: ") and b"\n" not in block:  # the usual one-line event
                data = block[6:]
            else:
                data = _event_data(block)
            if data is None:
                continue
            if data.strip() == b"[DONE]":
                s.finished = True
                continue
            stamps.append(t)
            datas.append(data)
        for t, obj in zip(stamps, _decode_all(datas), strict=True):
            if not isinstance(obj, dict):
                raise BadStream(f"not a JSON object: {str(obj)[:80]!r}")
            if obj.get("error"):
                s.error, s.detail = "stream_error", str(obj["error"])[:300]
                return s
            usage = obj.get("usage")
            if isinstance(usage, dict):
                s.prompt_tokens = usage.get("prompt_tokens", s.prompt_tokens)
                s.completion_tokens = usage.get("completion_tokens", s.completion_tokens)
            choices = obj.get("choices")
            if not choices:  # e.g. the final usage chunk
                continue
            choice = choices[0]
            if choice.get("finish_reason"):
                s.finished = True
            text = _chunk_text(choice)
            if text:  # role-only and empty chunks carry no token
                s.chunk_ns.append(t)
                s.texts.append(text)
                s.usage_cumulative.append(
                    usage.get("completion_tokens") if isinstance(usage, dict) else None
                )
    except (BadStream, AttributeError, TypeError, KeyError, IndexError) as exc:
        s.error, s.detail = "bad_stream", str(exc)[:300]
    return s
