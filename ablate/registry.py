"""The registry: one slot per ablation axis, each holding parts by name.

A part is a class. Its declaration says what a spec may write: its name, what it is (the docstring), its own
pydantic `Params` and the dimensions it needs (`check`), so that both `positions: learned` and
`positions: {name: learned, max_len: 512}` validate, without torch. The class that builds it subclasses the
declaration and is registered under the same name; the slot is where a spec's name for a part becomes that class:

    @POSITIONS.declare("learned")                      # ablate/parts/declared.py: no torch
    class LearnedPositions(Positions):
        class Params(PartParams):
            max_len: PositiveInt = 1024

    @POSITIONS.register("learned")                     # ablate/parts/positions.py: the nn.Module
    class LearnedPositions(declared.LearnedPositions, Positions): ...

A class registered under a name nobody declared declares itself, its Params and check on it: a plugin's parts,
the schedules and the corpora. Every class that builds a part subclasses the slot's `builds` base (for the model's
slots, the nn.Module beside the code), not just the declarations' torch-free one.

A plugin is a module (or a .py file) that registers parts when imported; an experiment file's `plugins:` names it,
and `load_plugin` imports it, in the sweep and again in each worker.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationError
from pydantic_core import core_schema

from ablate.errors import Issue, SpecError, SpecValueError, did_you_mean, issues_from

T = TypeVar("T")


class PartParams(BaseModel):
    """A part's own parameters. Parts without any keep this empty model."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Part:
    """What every registered class gets: its name, its slot and its parameters model."""

    Params: ClassVar[type[PartParams]] = PartParams
    name: ClassVar[str] = ""
    slot: ClassVar[str] = ""

    @classmethod
    def check(cls, params: PartParams, *, d_model: int, heads: int, d_k: int, d_v: int, d_ff: int) -> None:
        """Raises SpecValueError when this part cannot work with the model's dimensions."""

    @classmethod
    def description(cls) -> str:
        """The docstring's first paragraph on one line: what `ablate parts` and the schema show."""
        doc = inspect.getdoc(cls) or ""
        return " ".join(doc.split("\n\n")[0].split())


@dataclass(frozen=True)
class PartSpec:
    """A validated choice for one slot: the part's name and its parameters."""

    slot: str
    name: str
    params: PartParams

    @property
    def cls(self) -> type[Part]:
        """The class that builds the part (its module imported: ablate.model.transformer imports the built-in ones)."""
        return REGISTRY[self.slot][self.name]

    @property
    def declared(self) -> type[Part]:
        """The part's declaration: its Params, its check and what its slot asks of it, without torch."""
        return REGISTRY[self.slot].declaration(self.name)

    def non_default_params(self) -> dict[str, Any]:
        """The parameters that differ from their defaults; a required parameter (no default) always counts."""
        fields = type(self.params).model_fields
        return {k: v for k, v in self.params
                if fields[k].is_required() or fields[k].get_default(call_default_factory=True) != v}  # fmt: skip

    def dump(self) -> str | dict[str, Any]:
        """The YAML form: the bare name when every parameter has its default."""
        changed = self.non_default_params()
        return {"name": self.name, **changed} if changed else self.name

    def __str__(self) -> str:
        changed = self.non_default_params()
        args = ", ".join(f"{k}={v}" for k, v in changed.items())
        return f"{self.name}({args})" if args else self.name


class Slot(Generic[T]):
    """One ablation axis: the parts a spec may name in it (declared, all subclasses of `base`) and the classes that
    build them (registered, each a subclass of its declaration)."""

    def __init__(self, name: str, base: type[T], description: str):
        self.name = name
        self.base = base
        self.builder = base  # what a class that builds a part subclasses: `base`, or the subclass `builds` names
        self.description = description
        self.declared: dict[str, type[T]] = {}
        self.parts: dict[str, type[T]] = {}

    def _admit(self, name: str, cls: type[T], base: type) -> None:
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TypeError(f"{self.name}: part '{name}' must subclass {base.__name__} ({base.__module__}), "
                            f"got {cls!r}")  # fmt: skip
        if not issubclass(cls.Params, PartParams):
            raise TypeError(f"{self.name}: {cls.__name__}.Params must subclass PartParams")

    def builds(self, base: type[T]) -> type[T]:
        """Class decorator: the base of every class that builds a part of this slot, a subclass of the slot's base
        (the declarations' base is torch-free; this one is the nn.Module beside the code)."""
        if not issubclass(base, self.base):
            raise TypeError(f"{self.name}: {base.__name__} must subclass the slot's base {self.base.__name__}")
        self.builder = base
        return base

    def declare(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: makes the class what a spec knows of the part `name`, before any code builds it."""

        def add(cls: type[T]) -> type[T]:
            if name in self.declared:
                raise ValueError(f"{self.name}: a part named '{name}' is already declared ({self.declared[name]!r})")
            self._admit(name, cls, self.base)
            cls.name, cls.slot = name, self.name
            self.declared[name] = cls
            return cls

        return add

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: makes the class the part `name` of this slot, the one that builds it. A declared part's
        class subclasses its declaration and leaves Params and check to it; any other class declares itself."""

        def add(cls: type[T]) -> type[T]:
            if name in self.parts:
                raise ValueError(f"{self.name}: a part named '{name}' is already registered ({self.parts[name]!r})")
            self._admit(name, cls, self.builder)
            declaration = self.declared.get(name)
            if declaration is not None:
                if not issubclass(cls, declaration):
                    raise TypeError(f"{self.name}: part '{name}' must subclass its declaration "
                                    f"{declaration.__module__}.{declaration.__qualname__}, got {cls!r}")  # fmt: skip
                if own := [key for key in ("Params", "check") if key in vars(cls)]:
                    raise TypeError(f"{self.name}: {cls.__name__} redefines {' and '.join(own)}: a declared part's "
                                    f"are its declaration's ({declaration.__module__})")  # fmt: skip
            cls.name, cls.slot = name, self.name
            self.declared.setdefault(name, cls)
            self.parts[name] = cls
            return cls

        return add

    def declaration(self, name: str) -> type[T]:
        """What a spec knows of the part `name`: its Params, check and description."""
        if name not in self.declared:
            raise SpecValueError(f"unknown {self.name} '{name}'{did_you_mean(name, self.declared)} "
                                 f"(registered: {', '.join(self.declared)})")  # fmt: skip
        return self.declared[name]

    def __getitem__(self, name: str) -> type[T]:
        """The class that builds the part `name`."""
        if name not in self.parts:
            declaration = self.declaration(name)
            raise LookupError(f"{self.name} '{name}' is declared ({declaration.__module__}) but no class that builds "
                              "it is registered: import its module (ablate.model.transformer imports the built-in "
                              "parts)")  # fmt: skip
        return self.parts[name]

    def __iter__(self):
        """The declared parts, in the order they were declared."""
        return iter(self.declared.values())

    def build(self, spec: PartSpec, **dims: Any) -> T:
        """Instantiates the chosen part with the dimensions its slot passes and its own parameters."""
        if spec.slot != self.name:
            raise ValueError(f"a {spec.slot} part cannot fill the {self.name} slot")
        return self[spec.name](**dims, **dict(spec.params))

    def parse(self, value: Any) -> PartSpec:
        """`name` or `{name: ..., param: value}` -> PartSpec, with errors a person can act on."""
        if isinstance(value, PartSpec):
            if value.slot != self.name:
                raise SpecValueError(f"a {value.slot} part cannot fill the {self.name} slot")
            return value
        if isinstance(value, str):
            name, raw = value, {}
        elif isinstance(value, dict):
            if "name" not in value:
                raise SpecValueError(
                    f"a mapping for {self.name} needs a 'name' (registered: {', '.join(self.declared)})"
                )
            name, raw = value["name"], {k: v for k, v in value.items() if k != "name"}
            if not isinstance(name, str):
                raise SpecValueError(f"expected a part name, got {name!r}", ("name",))
        else:
            raise SpecValueError(f"expected a part name or a mapping with 'name', got {value!r}")
        cls = self.declaration(name)
        try:
            params = cls.Params.model_validate(raw)
        except ValidationError as error:
            issues = issues_from(error, cls.Params)
            if not cls.Params.model_fields:
                issues = [Issue(issue.loc, f"{self.name} '{name}' takes no parameters") for issue in issues]
            raise SpecValueError.many(issues) from None
        return PartSpec(self.name, name, params)

    def json_schema(self) -> dict[str, Any]:
        forms: list[dict[str, Any]] = [{"enum": list(self.declared)}]
        for name, cls in self.declared.items():
            params = cls.Params.model_json_schema()
            forms.append(
                {
                    "type": "object",
                    "description": cls.description(),
                    "properties": {"name": {"const": name}, **params.get("properties", {})},
                    "required": ["name"],
                    "additionalProperties": False,
                }
            )
        return {"description": self.description, "anyOf": forms}

    # pydantic hooks: `Annotated[PartSpec, SLOT]` validates with `parse` and documents
    # the parts registered when the schema is asked for, plugins included.
    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            self.parse, serialization=core_schema.plain_serializer_function_ser_schema(PartSpec.dump)
        )

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> dict:
        return self.json_schema()


REGISTRY: dict[str, Slot] = {}


def slot(name: str, base: type[T], description: str) -> Slot[T]:
    """Declares an ablation axis. Each axis is declared once, beside its base class."""
    if not issubclass(base, Part):
        raise TypeError(f"slot '{name}': the base class {base.__name__} must subclass Part")
    if name in REGISTRY:
        raise ValueError(f"slot '{name}' is already declared")
    REGISTRY[name] = Slot(name, base, description)
    return REGISTRY[name]


def part_rows() -> list[tuple[str, str, str, str, bool]]:
    """(slot, part, its parameters with defaults, description, last of its slot) for `ablate parts`."""
    rows = []
    for slot in REGISTRY.values():
        for i, part in enumerate(slot):
            params = ", ".join(
                f"{name}={'(required)' if field.is_required() else field.default}"
                for name, field in part.Params.model_fields.items()
            )
            rows.append(
                (slot.name if i == 0 else "", part.name, params or "-", part.description(), i == len(slot.declared) - 1)
            )
    return rows


_PLUGINS: dict[str, str] = {}  # what a plugin was given as -> the module name it was imported under


def load_plugin(plugin: str, relative_to: Path, loc: tuple) -> str:
    """Imports a plugin (module name, or .py path relative to the spec) once; returns how to import it again."""
    is_file = plugin.endswith(".py") or "/" in plugin
    key = str((relative_to.parent / plugin).resolve()) if is_file else plugin
    if key in _PLUGINS:
        return key
    try:
        if is_file:
            if not Path(key).is_file():
                raise FileNotFoundError(f"no such file: {key}")
            module_name = f"ablate_plugin_{Path(key).stem}_{abs(hash(key)):x}"
            module_spec = importlib.util.spec_from_file_location(module_name, key)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_name] = module
            module_spec.loader.exec_module(module)
        else:
            module_name = plugin
            importlib.import_module(plugin)
    except Exception as error:  # a plugin's own bug is the user's to see, in one line
        sys.modules.pop(f"ablate_plugin_{Path(key).stem}_{abs(hash(key)):x}", None)
        raise SpecError.at(
            relative_to, [Issue(loc, f"cannot import plugin '{plugin}': {type(error).__name__}: {error}")]
        ) from None
    _PLUGINS[key] = module_name
    return key
