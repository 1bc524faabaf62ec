"""What crosses a process boundary, torch-free: a job directory's paths, result.json,
rank outcomes and the phase file."""
