"""A sweep's results: its table (results.csv) and its timeline index."""
