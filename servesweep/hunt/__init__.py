"""The hunt: a greedy optimization search whose every adopt / reject is a
group-sequential test across server boots.

Pure modules, no servers and no Snakemake: `sequential` (boundaries, the boots a side a
round's power needs, and the per-look decision of one arm), `spec` (the hunt's definition,
composed variants, a round's design), `rounds` (one round's looks and boots), `state` (the
deterministic state machine `replay(spec, observations)`), `simulate` (known truth, for
tests and benchmarks). The hunt through the workflow (its boots' records, steps, hunt.json,
its plan) is `servesweep.hunt_run`. docs/hunt.md gives the rules and the statistics.
"""
