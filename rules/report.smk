rule collect:
    input:
        cells=all_cells,
        stages=stage_record,
    output:
        summary=report(
            "results/summary.csv",
            category="servesweep",
            caption="../docs/report-caption-summary.rst",
        ),
        verdicts=report(
            "results/verdicts.csv",
            category="servesweep",
            caption="../docs/report-caption-verdicts.rst",
        ),
        correctness="results/correctness.csv",
        first_boots="results/first_boots.csv",
    log:
        "results/logs/collect.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        # Judging changes (a threshold, the baseline) rebuild the tables, never a cell.
        analysis=lambda wildcards: SWEEP.analysis.as_config(),
    script:
        "../scripts/collect.py"


rule report:
    input:
        summary="results/summary.csv",
        verdicts="results/verdicts.csv",
        correctness="results/correctness.csv",
        first_boots="results/first_boots.csv",
        cells=all_cells,
        hunt=hunt_record,
    output:
        report(
            "results/report.html",
            category="servesweep",
            caption="../docs/report-caption.rst",
        ),
    log:
        "results/logs/report.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/report.py"
