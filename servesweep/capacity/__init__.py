"""The capacity search: its maths (brackets, probes), its run inside a boot, and its
comparison across boots."""
