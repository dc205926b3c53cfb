"""Spec files as data: mappings merged (`extends`), dotted keys set and checked (variants, `--set KEY=VALUE`).

Used by experiment files (ablate.sweep.experiment) and by `ablate run --set` (ablate.cli); ablate.files reads
the YAML and ablate.registry imports plugins. Every problem is a SpecError naming the file, the key and what
is wrong.
"""

from __future__ import annotations

import copy
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from ablate.errors import Issue, SpecError, dotted, unknown_key
from ablate.files import load_yaml
from ablate.registry import Slot


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Deep merge. A mapping naming a different part (`name:`) replaces the old one instead of merging."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        old = out.get(key)
        if (
            isinstance(old, dict)
            and isinstance(value, dict)
            and old.get("name", value.get("name")) == value.get("name")
        ):
            out[key] = merge(old, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def keys_of(data: dict[str, Any], prefix: tuple) -> Iterable[str]:
    for key, value in data.items():
        yield dotted((*prefix, key))
        if isinstance(value, dict):
            yield from keys_of(value, (*prefix, key))


def parse_overrides(items: Sequence[str], flag: str = "--set") -> dict[str, Any]:
    """`['model.heads=4']` -> `{'model.heads': 4}`, values parsed as YAML."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            example = "model.heads=4" if flag == "--set" else "account=nlp"
            raise SpecError([f"{flag}: expected KEY=VALUE such as {example}, got '{item}'"])
        try:
            out[key.strip()] = load_yaml(value)
        except yaml.YAMLError as error:
            raise SpecError([f"{flag}: {key}: value is not valid YAML: {error}"]) from None
    return out


def apply_overrides(data: dict[str, Any], changes: dict[str, Any], file: Path | str, where: tuple) -> dict[str, Any]:
    """Sets each dotted key in a copy of `data`; a key must name a field of the spec."""
    data = copy.deepcopy(data)
    for key, value in changes.items():
        parts = key.split(".")
        _check_key(parts, file, (*where, key))
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if isinstance(child, str):  # a part given by name gets parameters: learned -> {name: learned}
                child = {"name": child}
            elif not isinstance(child, dict):
                child = {}
            node[part] = child
            node = child
        if isinstance(value, dict) and "name" not in value and isinstance(node.get(parts[-1]), dict):
            value = merge(node[parts[-1]], value)
        node[parts[-1]] = value
    return data


def _section(annotation: Any) -> Any:
    """A field's section model, an optional one too (`EarlyStoppingSpec | None`: a dotted key below it sets the
    section up with its defaults); else the annotation itself."""
    members = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return members[0] if len(members) == 1 else annotation


def _check_key(parts: list[str], file: Path | str, loc: tuple) -> None:
    from ablate.train.spec import RunSpec

    model: Any = RunSpec
    for i, part in enumerate(parts):
        if isinstance(model, Slot):  # below a part: its name or parameters, checked when the spec validates
            return
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise SpecError.at(file, [Issue(loc, f"'{'.'.join(parts[:i])}' is a value, it has no key '{part}'")])
        if part not in model.model_fields:
            raise SpecError.at(file, [Issue(loc, f"no such key in the spec: {unknown_key(part, model.model_fields)}")])
        field_info = model.model_fields[part]
        slots = [m for m in field_info.metadata if isinstance(m, Slot)]
        model = slots[0] if slots else _section(field_info.annotation)
