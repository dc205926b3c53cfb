"""`ablate check`: the reference baselines under results/reference/, re-run through the sweep and compared.

reference  a reference file: its spec, what its seeds measured, where, and its tolerances (no torch)
measure    its seeds trained as the sweep trains jobs, and read back
compare    a re-run against the reference, exactly or within seed noise: the rows, the table, the verdict (no torch)
run        `ablate check`: each reference measured and compared, or rewritten (`--update`)
"""
