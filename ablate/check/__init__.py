"""`ablate check`: the reference baselines under results/reference/, re-run through the sweep and compared."""
