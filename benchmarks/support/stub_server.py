"""An instant OpenAI-style SSE stub: answers every streamed completion at once.

For measuring benchmark clients, not servers: each response (one SSE event per token, one
HTTP chunk per event, as real servers frame them) is built once per shape, cached, and written
with a single write, so the stub spends almost nothing per token. A bare asyncio protocol (no
web framework) keeps its per-request cost low too; uvloop is used where installed.

    python benchmarks/support/stub_server.py --port 0    # prints "PORT <n>" once listening

Routes: POST /v1/completions, /v1/chat/completions (max_tokens tokens, ignore_eos and other
fields accepted and ignored; a final usage chunk with `choices: []` only when the request
asks for it with stream_options.include_usage); GET /health, /v1/models; anything else 404.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal

MODEL = "stub"
_OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return _chunk(b"data: " + data.encode() + b"\n\n")


def stream_body(chat: bool, n: int, usage: bool, prompt_tokens: int = 0) -> bytes:
    """The whole chunked body of an n-token streamed response."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    head = {"id": "cmpl-stub", "object": kind, "created": 0, "model": MODEL}
    parts = []
    if chat:
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        parts.append(_event({**head, "choices": [role]}))
    for i in range(n):
        finish = "length" if i == n - 1 else None
        if chat:
            choice = {"index": 0, "delta": {"content": " tok"}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": " tok", "logprobs": None, "finish_reason": finish}
        parts.append(_event({**head, "choices": [choice]}))
    if usage:
        counts = {"prompt_tokens": prompt_tokens, "completion_tokens": n}
        counts["total_tokens"] = prompt_tokens + n
        parts.append(_event({**head, "choices": [], "usage": counts}))
    parts.append(_event("[DONE]"))
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)


def _plain(status: str, body: bytes, ctype: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


_MODELS = _plain(
    "200 OK", json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
)
_HEALTH = _plain("200 OK", b"ok", "text/plain")
_NOT_FOUND = _plain("404 Not Found", b'{"error":"not found"}')
_cache: dict[tuple, bytes] = {}


def respond(method: bytes, path: bytes, body: bytes) -> bytes:
    if method == b"POST" and path in (b"/v1/completions", b"/v1/chat/completions"):
        req = json.loads(body)
        chat = path == b"/v1/chat/completions"
        usage = bool((req.get("stream_options") or {}).get("include_usage"))
        key = (chat, int(req.get("max_tokens") or 16), usage)
        out = _cache.get(key)
        if out is None:
            out = _cache[key] = _OK + stream_body(*key)
        return out
    if path == b"/v1/models":
        return _MODELS
    if path == b"/health":
        return _HEALTH
    return _NOT_FOUND


class Http(asyncio.Protocol):
    """HTTP/1.1 with keep-alive; enough of it for benchmark clients."""

    def connection_made(self, transport):
        self.transport = transport
        self.buf = b""

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].split(b"\r\n")
            length, close = 0, False
            for line in head[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection":
                    close = value.strip().lower() == b"close"
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            method, path = head[0].split(b" ")[:2]
            self.transport.write(respond(method, path.split(b"?")[0], body))
            if close:
                self.transport.close()
                return


def _loop():
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    loop = _loop()
    asyncio.set_event_loop(loop)
    server = loop.run_until_complete(
        loop.create_server(Http, args.host, args.port, backlog=4096, reuse_address=True)
    )
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    try:
        loop.run_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        os._exit(0)


if __name__ == "__main__":
    main()
