"""The self-contained results/report.html and its views."""
