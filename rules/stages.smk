# benchmark.repeats: auto (servesweep/results/judge/stages.py): one checkpoint per stage of
# boots. Step s decides over the boots step s-1 asked for (its inputs: ordinary run_cell
# jobs) and asks for the next stage's, for the variants whose verdict is still open.
checkpoint repeats_stage:
    input:
        unpack(stage_inputs),
    output:
        "results/stages/s{step}.json",
    log:
        "results/logs/repeats_stage/s{step}.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        # Editing the rule or how verdicts are judged re-decides every step.
        stages=stage_params,
    script:
        "../scripts/repeats_stage.py"
