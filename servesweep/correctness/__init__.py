"""The correctness pass: greedy answers after the levels, their comparison against the
reference, and the report's view of them."""
