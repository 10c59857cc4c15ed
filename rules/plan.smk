# What the sweep would do, before any GPU hour is spent: launches nothing.
rule plan:
    output:
        txt="results/plan.txt",
        json="results/plan.json",
    log:
        "results/logs/plan.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        # Rebuilt exactly when the sweep or its records change.
        state=plan_state,
        sweep_files=IN_FORCE.files,
        is_default=IN_FORCE.is_default,
    script:
        "../scripts/plan.py"
