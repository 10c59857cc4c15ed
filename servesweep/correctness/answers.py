"""The correctness pass: does the optimization change the answers?

Run against a cell's live server after its levels, before teardown: fixed prompts sent
greedily, once one at a time and once all in flight together (batching changes numerics);
each answer's tokens are recorded, with the chosen tokens' logprobs and top-k alternatives
where the engine returns them. `servesweep.correctness.compare` compares two such records;
docs/correctness.md has the file format and the reasons.

The prompts are short natural ones of mixed lengths (2 to about 80 tokens), not random
tokens: on a real model they give the peaked next-token distributions of real traffic, where
random tokens give flat ones on which rounding noise flips greedy ties far more often than
users would see; mixed lengths make "all together" a ragged batch, where batching bugs
live. Requests are not streamed, so one JSON answer holds the text, token ids and logprobs.
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypedDict

from servesweep.bench.client import ClientSettings, endpoint_url
from servesweep.jsonfile import utc_now, write_json
from servesweep.records import reader
from servesweep.server.engines.base import Engine
from servesweep.server.http import http_request

RECORD_VERSION = 1
DEFAULTS = {"prompts": 32, "max_tokens": 64, "seed": 0, "top_logprobs": 5, "timeout_s": 600}
MODES = ("one_at_a_time", "all_together")
REFUSED = (400, 422)  # statuses that mean "this field is not for me"

PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "List three primary colors:",
    "Translate to French: Good morning, how are you?",
    "SELECT name, email FROM users WHERE",
    "The quick brown fox",
    "Explain in one paragraph why the sky is blue.",
    "import numpy as np\nx = np.linspace(0, 1, 100)\ny =",
    "Q: What is 17 times 23?\nA:",
    "Write a haiku about autumn leaves.",
    "The three laws of thermodynamics are",
    "Dear hiring manager, I am writing to apply for the position of",
    "for (int i = 0; i < n; i++) {",
    "A recipe for pancakes needs flour, eggs,",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "In 1969, the Apollo 11 mission",
    "The difference between a list and a tuple in Python is that",
    "Hello",
    "Photosynthesis is the process by which",
    "Here is a limerick about a cat who loved to code:",
    "The main causes of the French Revolution were the financial crisis of the monarchy, "
    "the rising influence of Enlightenment ideas, food shortages after poor harvests, and",
    "To install the package, run",
    "Knock knock. Who's there?",
    "The mitochondria is",
    "Step 1: Preheat the oven to 180 degrees. Step 2:",
    "An HTTP 404 error means",
    "Roses are red, violets are blue,",
    "The theory of general relativity, published by Albert Einstein in 1915, describes "
    "gravity not as a force but as the curvature of spacetime caused by mass and energy. "
    "One of its first confirmed predictions was",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):",
    "Ten facts about octopuses: 1.",
    "My favourite book is",
)


class Answer(TypedDict):
    """One prompt's answer in one mode (`token_ids`, `tokens`, the logprobs: null where the
    server gave none; `retokenized_ids`: null without a tokenizer)."""

    index: int
    ok: bool
    error: str | None  # http_<code>, timeout, no_answer, bad_answer, deadline
    detail: str | None
    status: int | None
    seconds: float
    text: str | None
    finish_reason: str | None
    completion_tokens: int | None
    token_ids: list[int] | None  # the server's own ids of the generated tokens
    tokens: list[str] | None  # the logprobs' token strings, one per generated token
    logprobs: list[float | None] | None  # each chosen token's logprob
    top_logprobs: list[dict[str, float] | None] | None  # top-k alternatives per position
    retokenized_ids: list[int] | None  # the text re-encoded with the model's tokenizer


class PassSummary(TypedDict):
    prompts: int
    modes: list[str]
    logprobs: bool  # some answer carried logprobs
    token_source: str  # "server" (every answer had the server's tokens) or "retokenized"
    seconds: float
    answered: int  # ok answers over all modes
    failed: int


def pass_prompts(n: int, seed: int) -> list[str]:
    """n prompts in a seeded order (the same for every variant and stack)."""
    order = list(PROMPTS)
    random.Random(seed).shuffle(order)
    return [
        order[i % len(order)] if i < len(order) else f"{i // len(order)}. {order[i % len(order)]}"
        for i in range(n)
    ]


def request_body(settings: ClientSettings, text: str, max_tokens: int, extras: dict) -> dict:
    body: dict = {} if settings.model is None else {"model": settings.model}
    if settings.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return {**body, "max_tokens": max_tokens, "temperature": 0, **extras, "stream": False}


def _ids(value) -> list[int] | None:
    ok = isinstance(value, list) and all(isinstance(v, int) for v in value)
    return value if ok else None


def parse_logprobs(raw, endpoint: str):
    """(tokens, logprobs, top_logprobs) from an OpenAI answer's choice logprobs, in either
    spelling (completions: parallel lists; chat: a list of entries); Nones when absent."""
    if not isinstance(raw, dict):
        return None, None, None
    tokens: Any  # lists as the server sent them (checked below), or None
    logprobs: Any
    top: Any
    if endpoint == "chat" or "content" in raw:
        entries = raw.get("content")
        if not isinstance(entries, list) or not entries:
            return None, None, None
        tokens = [e.get("token") for e in entries]
        logprobs = [e.get("logprob") for e in entries]
        top = [
            {a["token"]: a["logprob"] for a in e.get("top_logprobs") or []} or None for e in entries
        ]
    else:
        tokens, logprobs = raw.get("tokens"), raw.get("token_logprobs")
        top = raw.get("top_logprobs")
        if not isinstance(tokens, list) or not tokens:
            return None, None, None
        if not isinstance(top, list) or len(top) != len(tokens):
            top = None
    if not isinstance(logprobs, list) or len(logprobs) != len(tokens):
        logprobs = None
    return tokens, logprobs, top


def parse_answer(
    index: int, status: int, body: bytes, seconds: float, endpoint: str, tokenizer, timeout: bool
) -> Answer:
    """One answer from the server's reply; whatever went wrong is recorded, never raised."""
    out = Answer(
        index=index, ok=False, error=None, detail=None, status=status or None,
        seconds=round(seconds, 4), text=None, finish_reason=None, completion_tokens=None,
        token_ids=None, tokens=None, logprobs=None, top_logprobs=None, retokenized_ids=None,
    )  # fmt: skip
    if status != 200:
        out["error"] = f"http_{status}" if status else ("timeout" if timeout else "no_answer")
        out["detail"] = body[:300].decode(errors="replace") or None
        return out
    try:
        obj = json.loads(body)
        choice = obj["choices"][0]
        if endpoint == "chat":
            message = choice.get("message") or {}
            reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
            text = reasoning + (message.get("content") or "")
        else:
            text = choice["text"]
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}")
        tokens, logprobs, top = parse_logprobs(choice.get("logprobs"), endpoint)
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
        out.update(
            {
                "ok": True,
                "text": text,
                "finish_reason": choice.get("finish_reason"),
                "completion_tokens": usage.get("completion_tokens"),
                "token_ids": _ids(choice.get("token_ids")),
                "tokens": tokens,
                "logprobs": logprobs,
                "top_logprobs": top,
            }
        )
        if tokenizer is not None:
            out["retokenized_ids"] = tokenizer.encode(text, add_special_tokens=False).ids
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:300]
        detail += f" in {body[:200].decode(errors='replace')!r}"
        out.update({"ok": False, "error": "bad_answer", "detail": detail})
    return out


def _sender(url: str, endpoint: str, tokenizer, request_timeout_s: float, deadline: float):
    """send(index, body) -> Answer, each request bounded by what is left of the pass."""

    def send(index: int, body: dict) -> Answer:
        timeout = min(request_timeout_s, deadline - time.monotonic())
        if timeout <= 0:
            answer = parse_answer(index, 0, b"", 0.0, endpoint, None, False)
            answer.update(
                {"error": "deadline", "detail": "the pass ran out of time before this one"}
            )
            return answer
        begin = time.monotonic()
        status, raw = http_request("POST", url, timeout, body)
        took = time.monotonic() - begin
        return parse_answer(index, status, raw, took, endpoint, tokenizer, took >= timeout * 0.99)

    return send


class PassRecord(TypedDict):
    """The file run_correctness writes (docs/correctness.md)."""

    version: int
    started_at: str
    config: dict  # DEFAULTS with the sweep's values on top
    endpoint: str
    model: str | None
    request_fields: dict  # what every request carried on top of prompt, max_tokens, ...
    refused: dict | None  # {fields, status, detail} when the engine refused what was asked
    prompts: list[dict]  # {index, text, input_tokens}
    modes: dict[str, list[Answer]]  # per mode in MODES, one answer per prompt, in order
    summary: PassSummary


AnswerRead = reader("AnswerRead", Answer)  # an answer as compare reads it back
PassRead = reader("PassRead", PassRecord)  # a pass record (correctness.json), any version


def run_correctness(
    settings: ClientSettings, tokenizer, engine: Engine, config: dict, out_path: Path, log=print
) -> PassSummary:
    """Run the pass against the live server at settings.base_url; write the record (JSON)
    to out_path and return its summary. Never raises for what the server does: a failed
    request is an answer with `ok: false`, and the whole pass ends within `timeout_s`."""
    start, started_at = time.monotonic(), utc_now()
    cfg = {**DEFAULTS, **(config or {})}
    texts = pass_prompts(int(cfg["prompts"]), int(cfg["seed"]))
    asked = {
        **engine.logprobs_fields(settings.endpoint, int(cfg["top_logprobs"])),
        **engine.token_ids_fields(),
    }
    extras = {**engine.request_extras(), **settings.extra_body, **asked}
    deadline = start + float(cfg["timeout_s"])
    send = _sender(
        endpoint_url(settings), settings.endpoint, tokenizer, settings.request_timeout_s, deadline
    )

    def bodies() -> list[dict]:
        return [request_body(settings, t, int(cfg["max_tokens"]), extras) for t in texts]

    refused = None
    modes: dict[str, list[Answer]] = {}
    for mode in MODES:
        engine.flush_cache(settings.base_url)  # each mode starts cold, like a level
        if mode == "one_at_a_time":
            answers = [send(0, bodies()[0])] if texts else []
            if answers and answers[0]["status"] in REFUSED and asked:
                # Refused for what the pass adds to a benchmark request? Then go on without
                # it (recorded) rather than lose the pass.
                plain = {k: v for k, v in extras.items() if k not in asked}
                retry = send(0, request_body(settings, texts[0], int(cfg["max_tokens"]), plain))
                if retry["ok"]:
                    refused = {"fields": sorted(asked), "status": answers[0]["status"]}
                    refused["detail"] = answers[0]["detail"]
                    log(f"correctness: {sorted(asked)} refused ({refused['status']}); dropped")
                    extras, answers = plain, [retry]
            answers += [send(i, body) for i, body in enumerate(bodies()) if i > 0]
        else:
            with ThreadPoolExecutor(max_workers=max(1, len(texts))) as pool:
                answers = list(pool.map(send, range(len(texts)), bodies()))
        modes[mode] = answers
        log(f"correctness: {mode}: {sum(a['ok'] for a in answers)} of {len(answers)} answered")
    good = [a for answers in modes.values() for a in answers if a["ok"]]
    server_tokens = bool(good) and all(
        a["token_ids"] is not None or a["tokens"] is not None for a in good
    )
    summary = PassSummary(
        prompts=len(texts),
        modes=list(MODES),
        logprobs=any(a["logprobs"] is not None for a in good),
        token_source="server" if server_tokens else "retokenized",
        seconds=round(time.monotonic() - start, 3),
        answered=len(good),
        failed=len(texts) * len(MODES) - len(good),
    )
    prompts = [
        {"index": i, "text": t, "input_tokens": _count(tokenizer, t)} for i, t in enumerate(texts)
    ]
    record = PassRecord(
        version=RECORD_VERSION, started_at=started_at, config=cfg, endpoint=settings.endpoint,
        model=settings.model, request_fields=extras, refused=refused, prompts=prompts,
        modes=modes, summary=summary,
    )  # fmt: skip
    write_json(out_path, record)
    log(
        f"correctness: {summary['answered']} answers, {summary['failed']} failed, logprobs "
        f"{'yes' if summary['logprobs'] else 'no'}, tokens from {summary['token_source']}, "
        f"{summary['seconds']:.1f} s"
    )
    return summary


def _count(tokenizer, text: str) -> int | None:
    return None if tokenizer is None else len(tokenizer.encode(text, add_special_tokens=False).ids)
