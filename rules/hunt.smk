# The hunt (docs/hunt.md): one checkpoint per stage of boots. Step s replays the hunt over
# the boots steps 0..s-1 asked for; its inputs are step s-1 and those boots' cell.json, each
# an ordinary run_cell job of a composed variant (start+cand).
checkpoint hunt_step:
    input:
        unpack(hunt_step_inputs),
    output:
        "results/hunt/steps/s{step}.json",
    log:
        "results/logs/hunt_step/s{step}.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        # Editing the hunt (a candidate, the objective, the boots) re-decides every step.
        hunt=hunt_params,
    script:
        "../scripts/hunt_step.py"


# The path, the final configuration and the ledger, once a step says the hunt is done.
rule hunt:
    input:
        hunt_steps,
    output:
        "results/hunt/hunt.json",
    log:
        "results/logs/hunt.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        hunt=hunt_params,
    script:
        "../scripts/hunt.py"
