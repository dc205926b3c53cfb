"""The parts: their slots and declarations (`declared.py`, torch-free), and the modules that build them (torch).
Importing this package imports the declarations alone; ablate.model.transformer imports the modules."""

from ablate.parts.declared import (
    EMBEDDING_SCALE,
    FEEDFORWARD,
    NORM,
    NORM_PLACEMENT,
    POSITIONS,
    PROJECTION,
    SCALING,
    TYING,
)

__all__ = ["EMBEDDING_SCALE", "FEEDFORWARD", "NORM", "NORM_PLACEMENT", "POSITIONS", "PROJECTION", "SCALING", "TYING"]
