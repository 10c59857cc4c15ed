"""The hunt: a greedy optimization search whose every adopt / reject is a
group-sequential test across server boots.

Pure modules, no servers and no Snakemake: `sequential` (boundaries and the per-look
decision of one arm), `spec` (the hunt's definition and composed variants), `state` (the
deterministic state machine `advance(spec, observations)`), `simulate` (known truth, for
tests and benchmarks). docs/hunt.md gives the rules and the statistics.
"""
