# servesweep: benchmark inference-server configurations.
# stacks -> models -> one run_cell job per (stack, model, variant) -> summary -> report.
from snakemake.utils import min_version, validate

min_version("9.0")

# No `configfile:` here: Snakemake would merge a user's --configfile into it key by key.
# rules/common.smk loads the sweep in force instead (servesweep/sweep/sweep_file.py).


include: "rules/common.smk"
include: "rules/stacks.smk"
include: "rules/models.smk"
include: "rules/cells.smk"
include: "rules/hunt.smk"
include: "rules/stages.smk"
include: "rules/report.smk"
include: "rules/plan.smk"


rule all:
    default_target: True
    input:
        "results/report.html",
