"""Training one run: the trainer and its spec, schedules, checkpoints, FLOPs, evaluation, and the worker
that trains, decodes and scores one job in its own process. Knows nothing of sweeps or reports."""
