"""One boot of a cell end to end: launch, ready, its levels in order, teardown; the SLURM
job it runs in."""
