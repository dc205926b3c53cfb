"""What every spec section is built from: strict pydantic models, and fields that name a registered part.

The spec (ablate.spec) and the settings that live beside the code using them (data/dataset.py's
DataSpec, data/tokenizer.py's TokenizerSpec) all import this; it imports nothing of theirs.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ablate.registry import Slot

Probability = Annotated[float, Field(ge=0.0, lt=1.0)]


class Section(BaseModel):
    """A spec section: unknown keys and loose types are errors."""

    model_config = ConfigDict(extra="forbid", strict=True)


def part(slot: Slot, default: str) -> Any:
    """A field whose value names a part of `slot`: `learned` or `{name: learned, max_len: 512}`."""
    return Field(default=default, validate_default=True, description=slot.description)
