# One job per boot of a cell: launch, readiness, every level in order, teardown
# (docs/design.md §3). Boots of all cells interleave (priority), r0 of every cell first.
rule run_cell:
    input:
        # The manifests, ancient while the boot stands for them (docs/design.md §3).
        unpack(cell_inputs),
    output:
        cell="results/cells/{stack}/{model}/{variant}/r{repeat}/cell.json",
        levels=directory("results/cells/{stack}/{model}/{variant}/r{repeat}/levels"),
        correctness="results/cells/{stack}/{model}/{variant}/r{repeat}/correctness.json",
    log:
        job="results/logs/run_cell/{stack}/{model}/{variant}/r{repeat}.log",
        server="results/cells/{stack}/{model}/{variant}/r{repeat}/server.log",
    priority: job_priority
    conda:
        "../envs/workflow.yaml"
    resources:
        gpu=cell_gpus,
    params:
        spec=cell_spec,
        attempt=cell_attempt,
    script:
        "../scripts/run_cell.py"
