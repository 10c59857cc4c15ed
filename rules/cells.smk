# One job per cell: launch, readiness, every level in order, teardown (docs/design.md §3).
rule run_cell:
    input:
        stack="resources/stacks/{stack}/manifest.json",
        model="resources/models/{model}/manifest.json",
    output:
        cell="results/cells/{stack}/{model}/{variant}/cell.json",
        levels=directory("results/cells/{stack}/{model}/{variant}/levels"),
    log:
        job="results/logs/run_cell/{stack}/{model}/{variant}.log",
        server="results/cells/{stack}/{model}/{variant}/server.log",
    conda:
        "../envs/workflow.yaml"
    resources:
        gpu=cell_gpus,
    params:
        spec=cell_spec,
        attempt=cell_attempt,
    script:
        "../scripts/run_cell.py"
