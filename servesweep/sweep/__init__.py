"""The sweep: which file is in force, validation and resolution into cells and specs, where
files live, and the plan."""
