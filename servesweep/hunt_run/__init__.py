"""The hunt through the workflow: its boots observed from their records, its steps and
hunt.json, its plan. The decisions are the core's (`servesweep.hunt.state`); these modules
only read and write the files around them. The report's hunt section reads hunt.json
(`servesweep.results.report.hunt_views`)."""
