"""What pins the planner's constants to a machine: calibration files, the one-GPU give-way
probe and its delay statistics, and the public measured runs the planner is checked against."""
