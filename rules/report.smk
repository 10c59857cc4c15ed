rule collect:
    input:
        all_cells(),
    output:
        "results/summary.csv",
    log:
        "results/logs/collect.log",
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/collect.py"


rule report:
    input:
        summary="results/summary.csv",
        cells=all_cells(),
    output:
        "results/report.html",
    log:
        "results/logs/report.log",
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/report.py"
