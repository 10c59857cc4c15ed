"""The prompts a level sends, by workload kind."""
