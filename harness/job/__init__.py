"""Running one job: validate, start its ranks, decide and write its result."""
