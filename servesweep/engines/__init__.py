"""Engine adapters: each turns (interpreter, model dir, host, port, variant flags) into a
launch command and knows its readiness, metrics and cache-flush endpoints.

Add an engine by subclassing `Engine` in its own module and registering it in ENGINES.
"""

from servesweep.engines.base import Engine, flags_to_args
from servesweep.engines.command import CommandEngine
from servesweep.engines.sglang import SGLangEngine
from servesweep.engines.transformers import TransformersEngine
from servesweep.engines.vllm import VLLMEngine

ENGINES: dict[str, type[Engine]] = {
    "transformers": TransformersEngine,
    "command": CommandEngine,
    "sglang": SGLangEngine,
    "vllm": VLLMEngine,
}


def get_engine(name: str, options: dict | None = None) -> Engine:
    try:
        return ENGINES[name](options)
    except KeyError:
        raise ValueError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})") from None


__all__ = ["ENGINES", "Engine", "flags_to_args", "get_engine"]
