"""Engine adapters: each turns (interpreter, model dir, host, port, variant flags) into a
launch command and knows its readiness, metrics and cache-flush endpoints.

Add an engine by subclassing `Engine` in its own module and registering it in ENGINES.
"""

from servesweep.records import CellSpec
from servesweep.server.engines.base import Engine, flags_to_args
from servesweep.server.engines.command import CommandEngine
from servesweep.server.engines.sglang import SGLangEngine
from servesweep.server.engines.transformers import TransformersEngine
from servesweep.server.engines.vllm import VLLMEngine

ENGINES: dict[str, type[Engine]] = {
    "transformers": TransformersEngine,
    "command": CommandEngine,
    "sglang": SGLangEngine,
    "vllm": VLLMEngine,
}


# Every stack's own facts, whatever engine runs on it (the manifest's order: torch first).
STACK_PACKAGES: dict[str, tuple[str, ...]] = {"torch": ("torch",)}


def probed_packages() -> dict[str, tuple[str, ...]]:
    """What the stack probe asks (servesweep.resources.stack_probe): the stack's own
    packages, then every engine's, in ENGINES' order. A key two engines share must name the
    same distributions."""
    out = dict(STACK_PACKAGES)
    for engine in ENGINES.values():
        for key, dists in engine.probed_packages.items():
            if out.setdefault(key, dists) != dists:
                raise ValueError(f"engines disagree on the distributions of {key!r}")
    return out


def get_engine(name: str, options: dict | None = None) -> Engine:
    try:
        return ENGINES[name](options)
    except KeyError:
        raise ValueError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})") from None


def launch_command(spec: CellSpec, python: str, model_path: str, host: str, port) -> list[str]:
    """The argv that starts a cell's server on host:port (the spec's `server.host`, read by
    the caller's ServerSettings): what run_cell launches and the plan shows."""
    engine = get_engine(spec["engine"], spec["engine_options"])
    return engine.command(
        python=python,
        model_path=model_path,
        host=host,
        port=port,
        flags=dict(spec["flags"]),  # [name, value] pairs, in the config's order
        gpus=spec["gpus"],
    )


def launch_env(spec: CellSpec) -> dict[str, str]:
    """The variables a cell's server gets on top of the job's own environment."""
    return get_engine(spec["engine"], spec["engine_options"]).env(spec["env"])


__all__ = [
    "ENGINES",
    "STACK_PACKAGES",
    "Engine",
    "flags_to_args",
    "get_engine",
    "launch_command",
    "launch_env",
    "probed_packages",
]
