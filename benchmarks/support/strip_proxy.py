"""A tiny HTTP/1.1 proxy that drops named fields from JSON request bodies.

For parity runs only: `transformers serve` answers unknown fields (`ignore_eos`,
`min_tokens`, which sglang.bench_serving always sends) with HTTP 422, so peers talk to the
server through this. Responses are relayed byte for byte as they arrive; every client, ours
included, goes through it in a parity run, so whatever it costs is the same for all.

    python benchmarks/support/strip_proxy.py --upstream 127.0.0.1:8000 --drop ignore_eos,min_tokens
    # prints "PORT <n>" once listening on 127.0.0.1
"""

from __future__ import annotations

import argparse
import asyncio
import json


class Upstream(asyncio.Protocol):
    def __init__(self, client: Downstream):
        self.client = client

    def data_received(self, data):
        self.client.transport.write(data)

    def connection_lost(self, exc):
        self.client.transport.close()


class Downstream(asyncio.Protocol):
    """One client connection; its requests are rewritten and forwarded in order."""

    def __init__(self, host: str, port: int, drop: set[str]):
        self.host, self.port, self.drop = host, port, drop
        self.buf = b""
        self.upstream = None
        self.pending: list[bytes] = []  # rewritten requests waiting for the upstream

    def connection_made(self, transport):
        self.transport = transport
        loop = asyncio.get_running_loop()
        loop.create_task(self.connect())

    async def connect(self):
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_connection(
                lambda: Upstream(self), self.host, self.port
            )
        except OSError:
            self.transport.close()
            return
        self.upstream = transport
        for request in self.pending:
            transport.write(request)
        self.pending = []

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.buf[:end].split(b"\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.forward(lines, body)

    def forward(self, lines: list[bytes], body: bytes) -> None:
        if body:
            try:
                obj = json.loads(body)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and self.drop & obj.keys():
                body = json.dumps({k: v for k, v in obj.items() if k not in self.drop}).encode()
        head = [ln for ln in lines if not ln.lower().startswith(b"content-length:")]
        if body:
            head.append(b"Content-Length: %d" % len(body))
        request = b"\r\n".join(head) + b"\r\n\r\n" + body
        if self.upstream is None:
            self.pending.append(request)
        else:
            self.upstream.write(request)

    def connection_lost(self, exc):
        if self.upstream is not None:
            self.upstream.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="host:port of the server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--drop", default="ignore_eos,min_tokens")
    args = parser.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    drop = set(args.drop.split(","))

    async def serve():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Downstream(host, int(port), drop), "127.0.0.1", args.port, backlog=4096
        )
        print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
