"""Statistics across boots and the verdicts against the baseline."""
