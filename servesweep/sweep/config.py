"""Configuration: validation, defaults, variant inheritance, cells and their specs.

Everything here is pure (no I/O besides reading the schema), so the Snakefile and the
tests see exactly the same resolution.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from servesweep import CLIENT_VERSION
from servesweep.level import Kind, Level
from servesweep.level import load_kind as load_kind_of
from servesweep.records import CellRead, CellSpec
from servesweep.server.engines import ENGINES, get_engine
from servesweep.server.settings import ServerSettings
from servesweep.sizing import measured_requests
from servesweep.sweep import checks
from servesweep.sweep.analysis import AnalysisSettings
from servesweep.sweep.benchmark import BenchmarkSettings
from servesweep.sweep.checks import (
    CheckError,
    check_analysis,
    check_loads,
    check_precision,
    check_stacks,
    check_variant_gpus,
)
from servesweep.sweep.hunt import SweepHunt, check_hunt, hunt_of
from servesweep.sweep.schema import filled, schema
from servesweep.sweep.stages import RepeatsRule, repeats_rule

# Variant keys that configure the engine adapter rather than the server's flags.
ENGINE_OPTION_KEYS = (
    "command",
    "health_path",
    "models_path",
    "model_name",
    "metrics_path",
    "peak_gauges",
)
# Flags that turn on speculative decoding: SGLang, vLLM (0.6+, and the older spelling).
SPECULATIVE_FLAGS = (
    "speculative-algorithm",
    "speculative-draft-model-path",
    "speculative-config",
    "speculative-model",
)


class ConfigError(ValueError):
    """A bad configuration; the message is one line naming the key."""


def _key_path(path: Iterable[Any]) -> str:
    """Render a jsonschema path as `variants.ep8.flags[0]`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def validate_schema(config: dict) -> None:
    """Validate against the JSON schema; raise ConfigError with the most specific problem."""
    validator = jsonschema.Draft202012Validator(schema())
    errors = list(validator.iter_errors(config))
    if not errors:
        return
    best = jsonschema.exceptions.best_match(errors)
    alternatives = None
    if best.context and all(not e.relative_path for e in best.context):
        # A oneOf/anyOf of plain values (an integer or `auto`): say every alternative.
        alternatives = " or ".join(dict.fromkeys(e.message for e in best.context))
    # Descend into oneOf/anyOf to name the deepest key.
    while best.context:
        best = jsonschema.exceptions.best_match(best.context)
    message = alternatives or best.message
    if best.validator == "additionalProperties":
        message = message.replace("Additional properties are not allowed", "unknown key")
    elif (
        best.validator in ("maxProperties", "minProperties")
        and best.path
        and (best.path[0] == "models")
    ):
        message = "needs exactly one source kind: synthetic, hf or path"
    elif best.validator == "pattern" and list(best.path)[-1:] == ["hf"]:
        message = f"{best.instance!r} must be org/name@revision (pin a revision)"
    raise ConfigError(f"config: {_key_path(best.absolute_path)}: {message}")


def with_defaults(config: dict) -> dict:
    """A copy of a valid config with every default of the schema filled in. The schema is
    the one home of the defaults: this fills them as `snakemake.utils.validate` does, so a
    config resolves the same whether Snakemake's validate has run on it or not."""
    return filled(config)  # validate_schema has already refused an invalid config


def must_match_exactly(flags: dict[str, Any] | list[list[Any]]) -> bool:
    """Whether a variant's flags (a mapping or [name, value] pairs) turn on speculative
    decoding, whose greedy output must equal the target model's exactly."""
    pairs = flags.items() if isinstance(flags, dict) else flags
    return any(
        str(name).lstrip("-").replace("_", "-") in SPECULATIVE_FLAGS and value not in (None, False)
        for name, value in pairs
    )


def resolve_variants(variants: dict, default_engine: str) -> dict:
    """Resolve `extends` chains once: each variant gets its parents' flags and env,
    overridden by its own; a flag or env var set to null in a child is removed."""
    resolved: dict[str, dict] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict:
        if name in resolved:
            return resolved[name]
        if name in chain:
            cycle = " -> ".join((*chain, name))
            raise ConfigError(f"config: variants.{chain[0]}.extends: cycle {cycle}")
        own = variants[name]
        parent_name = own.get("extends")
        if parent_name is not None and parent_name not in variants:
            raise ConfigError(
                f"config: variants.{name}.extends: unknown variant {parent_name!r} "
                f"(known: {', '.join(sorted(variants))})"
            )
        base: dict[str, Any]
        if parent_name is None:
            base = {
                "engine": default_engine,
                "engine_options": {},
                "flags": {},
                "env": {},
                "gpus": None,
                "must_match": None,
                "chain": [],
            }
        else:
            base = resolve(parent_name, (*chain, name))
        flags = {**base["flags"], **own.get("flags", {})}
        env = {**base["env"], **own.get("env", {})}
        options = {**base["engine_options"]}
        options.update({k: own[k] for k in ENGINE_OPTION_KEYS if k in own})
        result = {
            "engine": own.get("engine", base["engine"]),
            "engine_options": options,
            "flags": {k: v for k, v in flags.items() if v is not None},
            "env": {k: str(v) for k, v in env.items() if v is not None},
            "gpus": own.get("gpus", base["gpus"]),
            "must_match": own.get("correctness_must_match", base.get("must_match")),
            "chain": [*base["chain"], name],
            "description": own.get("description", ""),
        }
        resolved[name] = result
        return result

    for name in variants:
        resolve(name, ())
    return resolved


@dataclass(frozen=True)
class Sweep:
    """A validated, resolved configuration."""

    stacks: dict
    models: dict
    variants: dict  # resolved
    server: ServerSettings  # `server:` typed; raw["server"] the section as the spec holds it
    benchmark: BenchmarkSettings  # `benchmark:` typed; raw["benchmark"] the section as given
    retries: dict
    analysis: AnalysisSettings  # `analysis:` typed; .as_config() the section as configured
    gpu_slots: dict
    raw: dict
    hunt: SweepHunt | None = None  # `hunt:` (servesweep.sweep.hunt): its arms are the cells

    def variant(self, name: str) -> dict:
        """A declared variant, or a hunt's composed one (`start+cand`), resolved."""
        if name in self.variants or self.hunt is None:
            return self.variants[name]
        return self.hunt.variant(name)

    @property
    def cells(self) -> list[tuple[str, str, str]]:
        # A hunt has none fixed in advance: its steps name its boots.
        return [] if self.hunt else list(itertools.product(self.stacks, self.models, self.variants))

    @property
    def correctness(self) -> dict | bool:
        """The correctness pass's settings (False: off), the schema's defaults filled in."""
        return self.raw["correctness"]

    def must_match(self, variant: str) -> bool:
        """Whether the variant's greedy answers must equal the baseline's exactly: its own
        `correctness_must_match`, else speculative decoding in its flags."""
        v = self.variant(variant)
        return v["must_match"] if v["must_match"] is not None else must_match_exactly(v["flags"])

    @property
    def repeats_rule(self) -> RepeatsRule:
        """`benchmark.repeats` as stages (fixed n: min = max = n)."""
        return repeats_rule(self.benchmark.repeats)

    @property
    def repeats(self) -> int:
        """Boots every cell gets before any stage decides (fixed: all of them)."""
        return self.repeats_rule.min

    @property
    def jobs(self) -> list[tuple[str, str, str, int]]:
        """(stack, model, variant, repeat) of every run_cell job known before anything is
        measured (under `repeats: auto` the first stage's), in the order they should run:
        every cell's first boot, then every cell's second, … so that variants interleave
        and a drift over the sweep's hours is spread over all of them."""
        return [(*cell, r) for r in range(self.repeats) for cell in self.cells]

    @property
    def load_kind(self) -> Kind:
        """`concurrency` (benchmark.levels) or `rate` (benchmark.rate)."""
        return self.benchmark.kind

    @property
    def levels(self) -> list[Level]:
        """The configured levels, in order: concurrencies, or rates (math.inf for inf)."""
        return list(self.benchmark.levels)

    def num_prompts(self, level: Level) -> int:
        """A level's measured requests (under `auto`, the most it may send): what a spec
        records in `num_prompts_per_level`, by sizing's one rule."""
        return measured_requests(self.benchmark, level)

    def _spec_benchmark(self) -> dict:
        """The benchmark part of a spec. A concurrency sweep's is exactly as before rate
        levels existed (its cells keep their spec hashes); a rate sweep's names its rates
        and its arrival settings resolved."""
        bench = {k: v for k, v in self.raw["benchmark"].items() if k != "repeats"}
        if self.load_kind == "rate":
            bench["rate"] = [lv.json for lv in self.levels]
            bench["arrival"] = self.benchmark.arrival._asdict()
        bench["num_prompts_per_level"] = {lv.key: self.num_prompts(lv) for lv in self.levels}
        return bench

    def gpus(self, variant: str) -> int:
        return self.server.gpus_of(self.variant(variant))

    def spec(self, stack: str, model: str, variant: str) -> CellSpec:
        """Everything a cell's measurement depends on. Runtime values (interpreter,
        model directory, port) appear as placeholders; the stack manifest and the
        model files are tracked by Snakemake as inputs instead."""
        v = self.variant(variant)
        engine = get_engine(v["engine"], v["engine_options"])
        command = engine.command(
            python="<stack>/bin/python",
            model_path="<model>",
            host=self.server.host,
            port="<port>",
            flags=v["flags"],
            gpus=self.gpus(variant),
        )
        spec = CellSpec(
            stack={"name": stack, **self.stacks[stack]},
            model={"name": model, "source": self.models[model]},
            variant=variant,
            extends_chain=v["chain"],
            engine=v["engine"],
            engine_options=v["engine_options"],
            # Pairs, not a mapping: the canonical JSON sorts mapping keys, and the
            # server must get its flags in the order the config gives them.
            flags=[[name, value] for name, value in v["flags"].items()],
            command=command,
            env=v["env"],
            gpus=self.gpus(variant),
            server=self.raw["server"],
            correctness=self.correctness,
            # Without `repeats`: how many boots a sweep asks for is not something one boot's
            # measurement depends on, so raising it runs only the new boots.
            benchmark=self._spec_benchmark(),
            client_version=CLIENT_VERSION,
        )
        if self.benchmark.search is not None:
            # The capacity search judges levels as they run, so its SLO is part of what a
            # boot measures; without a search `slo` only judges (and stays out of the spec).
            spec["slo"] = self.raw["slo"]
        return spec


def next_attempt(cell_json: Path, retries: dict) -> int:
    """The attempt number a cell's next measurement would carry.

    It is a Snakemake param of run_cell: while it stays equal to the attempt recorded in
    the cell's result, nothing reruns; it moves on (and so reruns the cell) only for a
    failed cell when `retries.failed_cells` is on and attempts remain.
    """
    try:
        previous = json.loads(Path(cell_json).read_text())
    except (OSError, ValueError):
        return 0
    previous = CellRead.of(previous)
    attempt = int(previous.attempt)
    if (
        previous.status == "failed"
        and retries["failed_cells"]
        and attempt + 1 < retries["max_attempts"]
    ):
        return attempt + 1
    return attempt


def spec_json(spec: CellSpec | dict) -> str:
    """Canonical JSON: the same spec always gives the same text (and hash)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def spec_from_json(text: str) -> CellSpec:
    """The spec `spec_json` wrote (run_cell's param), as the cell spec it was."""
    return json.loads(text)


def spec_hash(spec: CellSpec | dict) -> str:
    return hashlib.sha256(spec_json(spec).encode()).hexdigest()[:12]


def check_semantics(config: dict, server: ServerSettings) -> None:
    """Checks a JSON schema cannot express; one line naming the key for each (`server` is
    the config's `server:`, typed)."""
    variants = config["variants"]
    baseline = config["analysis"]["baseline"]
    if baseline not in variants:
        where = "variants" if baseline == "baseline" else "analysis.baseline"
        raise ConfigError(
            f"config: {where}: missing {baseline!r} (every comparison is against it; "
            f"have: {', '.join(sorted(variants))})"
        )
    if variants[baseline].get("extends"):
        raise ConfigError(f"config: variants.{baseline}.extends: the baseline cannot extend")
    default_engine = config["engine"]
    if default_engine not in ENGINES:
        raise ConfigError(
            f"config: engine: unknown engine {default_engine!r} (known: {', '.join(ENGINES)})"
        )
    for name, variant in variants.items():
        engine = variant.get("engine")
        if engine is not None and engine not in ENGINES:
            raise ConfigError(
                f"config: variants.{name}.engine: unknown engine {engine!r} "
                f"(known: {', '.join(ENGINES)})"
            )
    resolved = resolve_variants(variants, default_engine)
    for name, variant in resolved.items():
        if variant["engine"] == "command" and not variant["engine_options"].get("command"):
            raise ConfigError(f"config: variants.{name}.command: required for engine 'command'")
    for name, variant in resolved.items():
        try:
            checks.check_flags(variant)
        except ValueError as exc:
            raise ConfigError(f"config: variants.{name}.flags: {exc}") from None
    try:
        check_variant_gpus(server, resolved)
        check_stacks(config)
        check_loads(config)
        check_precision(config)
        check_analysis(config)
        check_hunt(server, hunt_of(config, resolved, server), checks.check_flags)
    except CheckError as exc:
        raise ConfigError(str(exc)) from None
    bench = config["benchmark"]
    rule = bench["num_prompts"]
    if rule == "auto" and "rate" in bench:
        raise ConfigError(
            "config: benchmark.num_prompts: auto sizes concurrency levels only (not benchmark.rate)"
        )
    if rule != "auto" and rule["min"] > rule["max"]:
        raise ConfigError("config: benchmark.num_prompts: min is larger than max")
    repeats = bench["repeats"]
    if isinstance(repeats, dict) and repeats["min"] > repeats["max"]:
        raise ConfigError("config: benchmark.repeats: min is larger than max")
    if repeats_rule(repeats).staged and "hunt" in config:
        raise ConfigError("config: benchmark.repeats: a hunt sizes its own boots (hunt.boots)")
    reference = config["analysis"].get("reference_stack")
    if reference is not None and reference not in config["stacks"]:
        raise ConfigError(
            f"config: analysis.reference_stack: unknown stack {reference!r} "
            f"(known: {', '.join(sorted(config['stacks']))})"
        )


def key_boot_cv_by_level(bench: dict) -> None:
    """A per-level `precision.boot_cv_pct` keyed as the workflow names levels (`Level.key`:
    "1", "inf"), in level order, in place. The spec's canonical JSON sorts its keys: YAML's
    int keys (2 before 10) and the spec's own read back from JSON ("10" before "2") would
    give two texts of one spec, and a map mixing the two cannot be sorted at all."""
    precision = bench.get("precision") or {}
    per_level = precision.get("boot_cv_pct")
    if isinstance(per_level, dict):
        kind = load_kind_of(bench)
        levels = sorted((Level.parse(k, kind), v) for k, v in per_level.items())
        precision["boot_cv_pct"] = {level.key: v for level, v in levels}


def load(config: dict) -> Sweep:
    """Validate (schema, then semantics) and resolve a config dict."""
    validate_schema(config)
    config = with_defaults(config)
    server = ServerSettings.of(config["server"])
    check_semantics(config, server)
    key_boot_cv_by_level(config["benchmark"])
    variants = resolve_variants(config["variants"], config["engine"])
    hunt = hunt_of(config, variants, server)  # check_semantics has checked it
    return Sweep(
        stacks=copy.deepcopy(config["stacks"]),
        # `synthetic:` with no parameters reads as null; it means "all defaults".
        models={
            name: {kind: ({} if value is None else copy.deepcopy(value))}
            for name, source in config["models"].items()
            for kind, value in source.items()
        },
        variants=variants,
        server=server,
        benchmark=BenchmarkSettings.of(config["benchmark"]),
        retries=config["retries"],
        analysis=AnalysisSettings.of(config["analysis"]),
        gpu_slots=config["gpu_slots"],
        raw=copy.deepcopy(config),
        hunt=hunt,
    )


def read_sweep(path: str | Path) -> dict:
    """A sweep file as a mapping; ConfigError with one line naming the file otherwise."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file {path}{where}: not valid YAML") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: must be a mapping of keys")
    return data


def load_file(path: str | Path) -> Sweep:
    return load(read_sweep(path))
