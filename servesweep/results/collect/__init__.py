"""Every boot's records into results/summary.csv: recomputation, validity gates, goodput."""
