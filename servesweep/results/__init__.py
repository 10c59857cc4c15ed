"""From records to what a reviewer reads: the tidy summary, statistics, plots and the report."""
