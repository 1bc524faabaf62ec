"""One rank's process: build, warm up, time and profile a training step, and report it."""
