"""servesweep: benchmark LLM inference-server configurations.

All logic lives here; Snakemake rules and scripts/ only call into it. Nothing in
this package imports Snakemake.
"""

__version__ = "0.1.0"

# Bumped whenever the benchmark client's measurement changes; results carry it
# so the report can mark rows measured by an older client as stale.
CLIENT_VERSION = "2"

# Bumped whenever a metric's definition in servesweep.bench.metrics changes. Level
# summaries carry it; `collect` recomputes the summaries of an older definition from the
# stored request records, without launching anything.
METRICS_VERSION = "2"
