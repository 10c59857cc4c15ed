"""The sweep's `server:` section as one type (where a cell's server listens, how long it may
take to boot and to stop, and the GPUs a cell holds by default), read by attribute.

It is built once where the sweep is loaded (`Sweep.server`) and once per boot from the
cell's spec (`ServerSettings.of(spec["server"])`), each time from the section with the
schema's defaults filled (servesweep/sweep/schemas/config.schema.yaml, the one home of its
defaults; a spec's section is the sweep's, filled, so it has every key). The spec itself is
still written from the section's mapping (`Sweep.raw`), so its canonical JSON, and so every
cell's hash, stays what it was: this type is for reading, not for writing specs. It sits
with the server, below the sweep, so the engine adapters and the boot can read it too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Literal


@dataclass(frozen=True)
class ServerSettings:
    """`server:`, one field a key of the schema (tests/unit/server/test_settings.py)."""

    host: str
    port: int | Literal["auto"]  # "auto": a free port, fresh for every launch
    boot_timeout_s: float
    teardown_grace_s: float
    gpus: int  # the GPUs of a variant that does not set its own (`gpus_of`)

    @classmethod
    def of(cls, section: Mapping) -> ServerSettings:
        """From a sweep's `server` mapping or a spec's, the schema's defaults filled (a key
        it lacks is a KeyError naming the key: the schema has not filled it)."""
        return cls(**{f.name: section[f.name] for f in fields(cls)})

    @property
    def auto_port(self) -> bool:
        return self.port == "auto"

    def gpus_of(self, variant: Mapping) -> int:
        """The GPUs a resolved variant's cell holds: its own `gpus`, else `server.gpus`."""
        return self.gpus if variant["gpus"] is None else variant["gpus"]
