"""The hunt through the workflow: its boots observed from their records, its steps and
hunt.json, its plan and its section of the report. The decisions are the core's
(`servesweep.hunt.state`); these modules only read and write the files around them."""
