rule download_model:
    output:
        "resources/models/{model}/manifest.json",
    log:
        "results/logs/download_model/{model}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        source=model_source,
    script:
        "../scripts/download_model.py"
