"""Spec errors: every problem as `FILE: dotted.key: what is wrong`, never a traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Issue:
    """One problem at one place of a spec."""

    loc: Loc
    msg: str

    def where(self) -> str:
        return dotted(self.loc) or "(top level)"


class UserError(Exception):
    """Bad input the user can fix (a spec, a corpus file, a flag): shown as lines, never as a traceback."""

    def __init__(self, lines: Sequence[str] | str):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))


class SpecError(UserError):
    """A spec that cannot be used: one line per problem, `FILE: dotted.key: what is wrong`."""

    @classmethod
    def at(cls, file: Path | str | None, issues: Iterable[Issue], context: str = "") -> SpecError:
        prefix = f"{file}: " if file is not None else ""
        suffix = f" ({context})" if context else ""
        return cls([f"{prefix}{issue.where()}: {issue.msg}{suffix}" for issue in issues])

    @classmethod
    def of(cls, error: ValidationError, file: Path | str | None, model: type[BaseModel] | None = None,
           context: str = "") -> SpecError:  # fmt: skip
        """pydantic's errors as `FILE: key: what` lines: the one way a validation error is shown."""
        return cls.at(file, issues_from(error, model), context)

    @classmethod
    def merge(cls, errors: Iterable[SpecError]) -> SpecError:
        return cls([line for error in errors for line in error.lines])


class SpecValueError(ValueError):
    """Raised inside pydantic validators: a message, and the key below the validated value it concerns."""

    def __init__(self, msg: str, loc: Loc = ()):
        super().__init__(msg)
        self.msg = msg
        self.loc = tuple(loc)
        self.issues: list[Issue] = [Issue(self.loc, msg)]

    @classmethod
    def many(cls, issues: Iterable[Issue]) -> SpecValueError:
        issues = list(issues)
        error = cls(issues[0].msg, issues[0].loc)
        error.issues = issues
        return error


def dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def unknown_key(key: str, choices: Iterable[str]) -> str:
    choices = sorted(choices)
    hint = did_you_mean(key, choices)
    return f"unknown key '{key}'{hint}" if hint else f"unknown key '{key}' (valid: {', '.join(choices)})"


def fields_at(model: type[BaseModel], loc: Loc) -> list[str] | None:
    """Names of the fields of the model found by walking `loc` down from `model`, if it is one."""
    annotation: Any = model
    for part in loc:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        else:
            return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return None


def union_tag(part: str | int) -> bool:
    """Whether a part of pydantic's error location names a member of a union (`constrained-float`,
    `literal['epoch']`, `SeedSpreadFrom`), not a key of the spec."""
    return isinstance(part, str) and (part in ("int", "float", "str", "bool", "none") or "-" in part or "[" in part
                                      or part[:1].isupper())  # fmt: skip


def either(errors: list[dict[str, Any]], model: type[BaseModel] | None) -> str:
    """One line for a value that matched no member of a union: what each accepts, and what it got."""
    said = []
    for e in errors:
        tag, msg = e["loc"][-1], e["msg"].removeprefix("Input should be ")
        if tag.startswith("literal["):
            said.append(msg)
        elif tag[:1].isupper():
            said.append(mapping_of(model, tag) or "a mapping")
        else:
            kind = "a whole number" if "int" in tag else "a number" if "float" in tag else f"a {tag}"
            said.append(kind if msg.startswith("a valid") else f"{kind} {msg}" if not msg.startswith("a ") else msg)
    got = errors[0].get("input")
    return f"expected {' or '.join(dict.fromkeys(said))}" + ("" if isinstance(got, dict | list) else f" (got {got!r})")


def mapping_of(model: type[BaseModel] | None, name: str) -> str | None:
    """`{key: ..., ...}` for the pydantic model called `name` among `model`'s fields, at any depth."""
    seen: set[type] = set()
    todo: list[Any] = [model] if model else []
    while todo:
        annotation = todo.pop()
        for member in get_args(annotation) or (annotation,):
            if isinstance(member, type) and issubclass(member, BaseModel) and member not in seen:
                seen.add(member)
                if member.__name__ == name:
                    keys = [field.alias or key for key, field in member.model_fields.items()]
                    return "{" + ", ".join(f"{key}: ..." for key in keys) + "}"
                todo += [field.annotation for field in member.model_fields.values()]
            elif get_args(member):
                todo.append(member)
    return None


def issues_from(error: ValidationError, model: type[BaseModel] | None = None) -> list[Issue]:
    """Turns pydantic's errors into short `key: what` issues; a value that matched no member of a union (an
    either-or key) is one issue naming what it accepts."""
    issues, unions = [], {}
    for e in error.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        if loc and union_tag(loc[-1]) and not (isinstance((e.get("ctx") or {}).get("error"), SpecValueError)):
            unions.setdefault(loc[:-1], []).append(e | {"loc": loc})
            continue
        cause = (e.get("ctx") or {}).get("error")
        if isinstance(cause, SpecValueError):
            issues += [Issue(loc + issue.loc, issue.msg) for issue in cause.issues]
            continue
        if e["type"] == "extra_forbidden":
            names = fields_at(model, loc[:-1]) if model else None
            msg = unknown_key(str(loc[-1]), names) if names else f"unknown key '{loc[-1]}'"
        elif e["type"] == "missing":
            msg = "required key is missing"
        else:
            msg = e["msg"].removeprefix("Value error, ")
            msg = msg[:1].lower() + msg[1:]
            if "input" in e and not isinstance(e["input"], dict | list):
                msg += f" (got {e['input']!r})"
        issues.append(Issue(loc, msg))
    for loc, errors in unions.items():
        issues.append(Issue(loc, either(errors, model)) if len(errors) > 1 else Issue(loc, _one(errors[0])))
    return issues


def _one(e: dict[str, Any]) -> str:
    msg = e["msg"].removeprefix("Value error, ")
    msg = msg[:1].lower() + msg[1:]
    return msg + (f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict | list) else "")
