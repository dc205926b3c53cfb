"""ablate: config-driven architecture ablations of the encoder-decoder Transformer (Vaswani et al. 2017).

import ablate
experiment = ablate.load_experiment("experiments/pe.yaml")
run = experiment.run("rotary")
model = ablate.build_model(run.spec.model, src_vocab=8000, tgt_vocab=8000)
"""

from ablate.errors import SpecError
from ablate.experiment import Experiment, Run, load_experiment
from ablate.model import Transformer, build_model, count_parameters
from ablate.registry import REGISTRY, PartParams
from ablate.spec import ModelSpec, RunSpec

__all__ = [
    "REGISTRY",
    "Experiment",
    "ModelSpec",
    "PartParams",
    "Run",
    "RunSpec",
    "SpecError",
    "Transformer",
    "build_model",
    "count_parameters",
    "load_experiment",
]
