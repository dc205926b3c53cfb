"""ablate's default kernels, as `--set` overrides: experiments/base.yaml pins the ones the committed evidence was
trained with (torch's dropout, loss and Adam, batches padded to their longest sentence), and a benchmark of
what ablate does today sets them back.

Every field whose default changed after results were committed is marked `config.added(was=...)`; this lists
each at its default, so a new one joins without an edit here.
"""

from __future__ import annotations

import json

from ablate.config import hash_marks
from ablate.train.spec import RunSpec

NOT_TIMED = ["training.early_stopping=null", "evaluation.select=last", "evaluation.budgets=null"]
"""What a benchmark of training steps turns off, so that an experiment at convergence (experiments/converged.yaml:
early stopping, the best checkpoint scored, budget points) loads without the validations and checkpoints they
need."""


def default_kernels() -> list[str]:
    """`section.key=value` for every field whose default is not what the committed evidence had."""
    defaults = RunSpec.model_validate({"training": {"max_steps": 1}}).model_dump(mode="json")
    out = []
    for path, (mark, was) in sorted(hash_marks(RunSpec).items()):
        section, key = path  # every such field sits in a section
        if mark == "unless default" and defaults[section][key] != was:
            out.append(f"{section}.{key}={json.dumps(defaults[section][key])}")
    return out
