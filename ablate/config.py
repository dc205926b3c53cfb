"""What every spec section is built from: strict pydantic models, fields that name a registered part, and how
a section reads as dotted keys.

Every section lives in a torch-free module of the wing that uses it (ModelSpec in model/spec.py, DataSpec in
data/spec.py, TokenizerSpec in data/tokenizer.py, TrainingSpec and EvaluationSpec in train/spec.py), and
train/spec.py's RunSpec assembles them; they all import this, and it imports nothing of theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ablate.registry import Slot

Probability = Annotated[float, Field(ge=0.0, lt=1.0)]

# How a field counts towards a run's config hash (ablate.rundir.config_hash), marked on the field itself:
BOOKKEEPING = {"config_hash": "never"}  # changes neither the trained model nor its scores
ADDED = {"config_hash": "unless default"}  # added after results were committed: at its default, earlier hashes hold


def added(was: Any) -> dict[str, Any]:
    """ADDED for a field whose default is not what runs did before it existed (a faster kernel made the default):
    at `was` a spec hashes as before, and a stored spec without the field is read at `was` (rundir.as_stored)."""
    return {"config_hash": "unless default", "was": was}


class Section(BaseModel):
    """A spec section: unknown keys and loose types are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def part(slot: Slot, default: str, hashed: dict[str, str] | None = None) -> Any:
    """A field whose value names a part of `slot`: `learned` or `{name: learned, max_len: 512}`; `hashed`: ADDED
    for a slot added after results were committed."""
    return Field(default=default, validate_default=True, description=slot.description, json_schema_extra=hashed)


def hash_marks(section: type[BaseModel], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], tuple[str, Any]]:
    """Every field below `section` that is marked BOOKKEEPING or ADDED: dotted path -> (the mark, its default, or
    for ADDED the value runs had before the field existed: `added(was=...)`)."""
    marks: dict[tuple[str, ...], tuple[str, Any]] = {}
    for name, field in section.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if "config_hash" in extra:
            default = extra["was"] if "was" in extra else field.get_default(call_default_factory=True)
            marks[(*prefix, name)] = (str(extra["config_hash"]), default)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            marks |= hash_marks(annotation, (*prefix, name))
    return marks


def show(value: Any) -> str:
    """A value as people read it: a part with parameters as `name(k=v)`, a list as `a, b`."""
    if isinstance(value, dict):
        params = ", ".join(f"{k}={v}" for k, v in value.items() if k != "name")
        return f"{value.get('name')}({params})" if params else str(value.get("name"))
    if isinstance(value, list | tuple):
        return "(" + ", ".join(map(str, value)) + ")"
    return str(value)


def flatten(section: BaseModel | dict[str, Any], show: Callable[[Any], str] = show, prefix: str = "") -> dict[str, str]:
    """Dotted key -> `show(value)`, for a spec section or its dump (config.yaml); a part counts as one value."""
    items = ((n, getattr(section, n)) for n in type(section).model_fields) if isinstance(section, BaseModel) else (
        section.items())  # fmt: skip
    out: dict[str, str] = {}
    for key, value in items:
        if isinstance(value, BaseModel) or (isinstance(value, dict) and "name" not in value):
            out |= flatten(value, show, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = show(value)
    return out
