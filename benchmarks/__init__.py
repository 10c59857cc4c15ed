"""Benchmarks of servesweep itself, by kind (benchmarks/README.md). Run from the repo root as
modules, e.g. `python -m benchmarks.simulation.aa_verdicts --seeds 2`, so that `servesweep`,
`benchmarks.support` and the test fixtures (`tests.fixtures`) import without path edits."""
