"""ablate: config-driven architecture ablations of the encoder-decoder Transformer (Vaswani et al. 2017).

import ablate
experiment = ablate.load_experiment("experiments/pe.yaml")
run = experiment.run("rotary")
model = ablate.build_model(run.spec.model, src_vocab=8000, tgt_vocab=8000)

Names are imported when first used, so `ablate report` and `ablate check`'s comparison read result
files without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "SpecError": "ablate.errors",
    "Experiment": "ablate.sweep.experiment",
    "Run": "ablate.sweep.experiment",
    "load_experiment": "ablate.sweep.experiment",
    "Transformer": "ablate.model.transformer",
    "build_model": "ablate.model.transformer",
    "count_parameters": "ablate.model.transformer",
    "REGISTRY": "ablate.registry",
    "PartParams": "ablate.registry",
    "ModelSpec": "ablate.model.spec",
    "RunSpec": "ablate.train.spec",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'ablate' has no attribute '{name}'")
    return getattr(importlib.import_module(_WHERE[name]), name)
