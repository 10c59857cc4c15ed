# servesweep: benchmark inference-server configurations.
# stacks -> models -> one run_cell job per (stack, model, variant) -> summary -> report.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/stacks.smk"
include: "rules/models.smk"
include: "rules/cells.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        "results/report.html",
