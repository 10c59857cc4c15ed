rule setup_env:
    input:
        stack_requirements,
    output:
        "resources/stacks/{stack}/manifest.json",
    log:
        "results/logs/setup_env/{stack}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        stack=stack_config,
    script:
        "../scripts/setup_env.py"
