"""A sweep's results: its table (results.csv), its grid points, its timeline index."""
