"""A sweep: experiment files expanded into jobs, planned, placed on devices, launched (local processes,
torchrun, Slurm) and watched, then summarised with the report's table."""
