"""Comparing correctness-pass records (`servesweep.correctness.answers`): does a variant answer as
its reference does? Pure functions over two records: a variant against the baseline of the
same stack and model, or one variant on two stacks (and a record against itself across
modes: does batching change this server's own answers?).

Per mode: the exact-match rate over prompts answered on both sides, the mean position of
the first differing token over mismatching prompts and, where both sides returned logprobs,
what happened at that position: the change of the chosen token's logprob, whether the
reference's token was among the variant's top-k there, and by how much the variant preferred
its own pick (a near-tie flip is numeric drift; a token far outside the top-k is a change).

`changes_outputs` is flagged when the exact-match rate is under a threshold:
- DEFAULT_THRESHOLD (0.95) for an ordinary variant. Greedy decoding is exact in principle,
  but an optimization that changes kernels, reduction order or batch shapes (CUDA graphs,
  another all-reduce, expert parallelism, continuous batching) shifts logits by rounding
  error, which flips the rare near-tie and everything after it; asking for 1.0 would flag
  correct optimizations. With the default 32 prompts, 0.95 tolerates one divergent answer
  in 32, and flags two. The top-k and margin columns then say whether the divergences were
  near ties.
- 1.0 for a variant that must match exactly: speculative decoding verifies every drafted
  token against the target model, so its greedy output is the target's own
  (`servesweep.sweep.config.must_match_exactly` spots it from the variant's flags).
An engine without logprobs degrades to token comparison alone, and the result says so.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import NamedTuple, cast

from servesweep.correctness.answers import AnswerRead, PassRead
from servesweep.records import reader
from servesweep.sweep.analysis import AnalysisSettings

DEFAULT_THRESHOLD = AnalysisSettings().correctness_threshold  # the schema's, 0.95
SELF_MODE = "all_together_vs_one_at_a_time"  # compare_modes' mode name
SAME_SETTINGS = ("prompts", "seed", "max_tokens")  # what two records must share


class PromptDiff(NamedTuple):
    """One prompt answered on both sides."""

    # mypy objects to a field that shadows tuple.index; the name stays.
    index: int  # type: ignore[assignment]
    match: bool
    first_diff: int | None  # first differing position (the shorter length if one is a prefix)
    logprob_delta: float | None  # variant's chosen-token logprob - reference's, at first_diff
    baseline_in_top_k: bool | None  # the reference's token among the variant's top-k there
    baseline_margin: float | None  # variant's chosen logprob - its logprob of reference's token
    prefix_logprob_delta: float | None  # largest |Δ chosen logprob| over the identical prefix


class ModeComparison(NamedTuple):
    mode: str
    prompts: int
    compared: int  # answered on both sides
    failed: int  # failed on either side: not compared
    exact_matches: int
    exact_match_rate: float | None  # None when nothing could be compared
    mean_first_diff: float | None  # over mismatching prompts
    token_basis: str  # server_ids | server_tokens | retokenized | text
    logprobs: bool  # both sides had logprobs aligned with the compared tokens
    max_abs_logprob_delta: float | None
    baseline_in_top_k_share: float | None  # over mismatches where top-k was returned
    max_baseline_margin: float | None
    max_prefix_logprob_delta: float | None
    threshold: float
    must_match: bool
    changes_outputs: bool | None
    note: str
    example: dict | None  # the first mismatch: index, first_diff, baseline and variant text
    diffs: list[PromptDiff]


def first_difference(a, b) -> int | None:
    """First position where two sequences differ; None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _basis(pairs: list[tuple[dict, dict]]) -> str:
    """The best token sequence every compared pair has on both sides."""
    for basis, key in (
        ("server_ids", "token_ids"),
        ("server_tokens", "tokens"),
        ("retokenized", "retokenized_ids"),
    ):
        if all(v.get(key) is not None and b.get(key) is not None for v, b in pairs):
            return basis
    return "text"


KEYS = {"server_ids": "token_ids", "server_tokens": "tokens", "retokenized": "retokenized_ids"}


def _aligned(answer: dict, seq) -> bool:
    read = AnswerRead.of(answer)
    lp = read.logprobs
    return lp is not None and len(lp) == len(seq) and read.tokens is not None


def prompt_diff(variant: dict, baseline: dict, basis: str) -> PromptDiff:
    """Compare one prompt's two answers on `basis`."""
    key = KEYS.get(basis)
    v_seq = variant[key] if key else variant["text"]
    b_seq = baseline[key] if key else baseline["text"]
    k = first_difference(v_seq, b_seq)
    delta = in_top = margin = prefix = None
    # Logprobs count only where they line up with the compared tokens (the server's own).
    if basis in ("server_ids", "server_tokens") and _aligned(variant, v_seq):
        if _aligned(baseline, b_seq):
            v_lp, b_lp = variant["logprobs"], baseline["logprobs"]
            end = min(len(v_seq), len(b_seq)) if k is None else k
            gaps = [
                abs(x - y)
                for x, y in zip(v_lp[:end], b_lp[:end], strict=True)
                if None not in (x, y)
            ]
            prefix = max(gaps, default=None)
            if k is not None and k < min(len(v_seq), len(b_seq)):
                if v_lp[k] is not None and b_lp[k] is not None:
                    delta = v_lp[k] - b_lp[k]
                tops, wanted = AnswerRead.of(variant).top_logprobs or [], baseline["tokens"]
                top = tops[k] if k < len(tops) else None
                if top and k < len(wanted):
                    wanted = wanted[k]
                    in_top = wanted in top
                    if in_top and v_lp[k] is not None:
                        margin = v_lp[k] - top[wanted]
    return PromptDiff(baseline["index"], k is None, k, delta, in_top, margin, prefix)


def _settings_differ(variant: dict, baseline: dict) -> str | None:
    v, r = PassRead.of(variant), PassRead.of(baseline)
    a, b = v.config or {}, r.config or {}
    differ = [key for key in SAME_SETTINGS if a.get(key) != b.get(key)]
    texts = [[p["text"] for p in read.prompts or []] for read in (v, r)]
    if differ or texts[0] != texts[1]:
        return f"the records' prompts differ ({', '.join(differ) or 'prompt texts'}): not compared"
    return None


def compare_answers(
    variant: list[dict],
    baseline: list[dict],
    mode: str,
    threshold: float = DEFAULT_THRESHOLD,
    must_match: bool = False,
) -> ModeComparison:
    """One mode: answers are paired by prompt index; failures on either side are counted,
    not compared."""
    by_index = {a["index"]: a for a in baseline}
    pairs = [(v, by_index[v["index"]]) for v in variant if v["index"] in by_index]
    ok = [(v, b) for v, b in pairs if v["ok"] and b["ok"]]
    basis = _basis(ok)
    diffs = [prompt_diff(v, b, basis) for v, b in ok]
    misses = [d for d in diffs if not d.match]
    deltas = [abs(d.logprob_delta) for d in misses if d.logprob_delta is not None]
    tops = [d.baseline_in_top_k for d in misses if d.baseline_in_top_k is not None]
    margins = [d.baseline_margin for d in misses if d.baseline_margin is not None]
    prefixes = [d.prefix_logprob_delta for d in diffs if d.prefix_logprob_delta is not None]
    has_logprobs = (
        bool(ok)
        and basis in ("server_ids", "server_tokens")
        and all(_aligned(v, v[KEYS[basis]]) and _aligned(b, b[KEYS[basis]]) for v, b in ok)
    )
    limit = 1.0 if must_match else threshold
    rate = (len(diffs) - len(misses)) / len(diffs) if diffs else None
    notes = []
    if ok and not has_logprobs:
        where = {"retokenized": " (the text re-encoded)", "text": " (characters)"}.get(basis, "")
        notes.append(f"no logprobs: token comparison only{where}")
    if len(baseline) > len(diffs):
        notes.append(f"{len(baseline) - len(diffs)} prompts failed on a side, not compared")
    if must_match:
        notes.append("must match exactly (speculative decoding)")
    example = None
    if misses:
        v, b = next((v, b) for (v, b), d in zip(ok, diffs, strict=True) if not d.match)
        example = {"index": b["index"], "first_diff": misses[0].first_diff}
        example.update(baseline=b["text"][:300], variant=v["text"][:300])
    return ModeComparison(
        mode=mode,
        prompts=len(baseline),
        compared=len(diffs),
        failed=len(baseline) - len(diffs),
        exact_matches=len(diffs) - len(misses),
        exact_match_rate=rate,
        mean_first_diff=sum(cast(int, d.first_diff) for d in misses) / len(misses)
        if misses
        else None,  # a miss has its first difference
        token_basis=basis,
        logprobs=has_logprobs,
        max_abs_logprob_delta=max(deltas, default=None),
        baseline_in_top_k_share=sum(tops) / len(tops) if tops else None,
        max_baseline_margin=max(margins, default=None),
        max_prefix_logprob_delta=max(prefixes, default=None),
        threshold=limit,
        must_match=must_match,
        changes_outputs=None if rate is None else rate < limit,
        note="; ".join(notes),
        example=example,
        diffs=diffs,
    )


def _not_compared(mode: str, prompts: int, limit: float, must_match: bool, why: str):
    return ModeComparison(
        mode, prompts, 0, 0, 0, None, None, "text", False, None, None, None, None,
        limit, must_match, None, why, None, [],
    )  # fmt: skip


def compare_records(
    variant: dict, baseline: dict, threshold: float = DEFAULT_THRESHOLD, must_match: bool = False
) -> list[ModeComparison]:
    """Every mode both records ran, in the variant's order ([] when either has none: a pass
    that was skipped)."""
    why = _settings_differ(variant, baseline)
    out = []
    theirs = PassRead.of(baseline).modes or {}
    for mode, answers in (PassRead.of(variant).modes or {}).items():
        if mode not in theirs:
            continue
        if why:
            limit = 1.0 if must_match else threshold
            out.append(_not_compared(mode, len(answers), limit, must_match, why))
        else:
            out.append(compare_answers(answers, theirs[mode], mode, threshold, must_match))
    return out


def compare_modes(record: dict, threshold: float = DEFAULT_THRESHOLD) -> ModeComparison | None:
    """A record against itself: its all-together answers vs its one-at-a-time ones."""
    modes = PassRead.of(record).modes or {}
    if "all_together" not in modes or "one_at_a_time" not in modes:
        return None
    return compare_answers(modes["all_together"], modes["one_at_a_time"], SELF_MODE, threshold)


CSV_COLUMNS = [
    "stack", "model", "variant", "compared_to_stack", "compared_to_variant", "mode",
    "prompts", "compared", "failed", "exact_matches", "exact_match_rate", "mean_first_diff",
    "token_basis", "logprobs", "max_abs_logprob_delta", "baseline_in_top_k_share",
    "max_baseline_margin", "max_prefix_logprob_delta", "threshold", "must_match",
    "changes_outputs", "note",
]  # fmt: skip


def csv_rows(
    stack: str,
    model: str,
    variant: str,
    compared_to_stack: str,
    compared_to_variant: str,
    comparisons: list[ModeComparison],
) -> list[dict]:
    """Tidy rows for results/correctness.csv: one per mode."""
    keys = {"stack": stack, "model": model, "variant": variant}
    keys.update(compared_to_stack=compared_to_stack, compared_to_variant=compared_to_variant)
    return [
        {**keys, **{c: getattr(m, c) for c in CSV_COLUMNS if c not in keys}} for m in comparisons
    ]


def sweep_rows(
    records: dict[tuple[str, str, str], dict],
    must_match: dict[str, bool] | None = None,
    reference_stack: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    baseline: str = "baseline",
) -> list[dict]:
    """Every row of results/correctness.csv from the sweep's pass records, keyed by (stack,
    model, variant): each variant against its stack and model's baseline (`must_match` per
    variant name), each record's own modes against each other, and with `reference_stack`
    each variant on another stack against the same variant there."""
    rows: list[dict] = []
    for (stack, model, variant), rec in sorted(records.items()):
        ref = records.get((stack, model, baseline))
        if variant != baseline and ref is not None:
            strict = bool((must_match or {}).get(variant))
            found = compare_records(rec, ref, threshold, strict)
            rows += csv_rows(stack, model, variant, stack, baseline, found)
        other = None if reference_stack is None else records.get((reference_stack, model, variant))
        if reference_stack not in (None, stack) and other is not None:
            found = compare_records(rec, other, threshold)
            rows += csv_rows(stack, model, variant, reference_stack, variant, found)
        own = compare_modes(rec, threshold)
        if own is not None:
            rows += csv_rows(stack, model, variant, stack, variant, [own])
    return rows


# A row of results/correctness.csv read back (views): each column it lacks reads as None.
CorrectnessRow = reader("CorrectnessRow", CSV_COLUMNS)


def write_csv(path: Path, rows: list[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
