"""The built-in parts. Importing this package registers them all in `ablate.registry.REGISTRY`."""

from ablate.parts.attention import SCALING
from ablate.parts.embeddings import EMBEDDING_SCALE, TYING
from ablate.parts.feedforward import FEEDFORWARD
from ablate.parts.norms import NORM, NORM_PLACEMENT
from ablate.parts.positions import POSITIONS
from ablate.parts.projections import PROJECTION

__all__ = ["EMBEDDING_SCALE", "FEEDFORWARD", "NORM", "NORM_PLACEMENT", "POSITIONS", "PROJECTION", "SCALING", "TYING"]
