"""Files: results written atomically, so an interrupted write never leaves a half file behind; YAML read strictly
(a duplicate key is a one-line error naming the file and the line; a file that is not a mapping, one naming
the file)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from ablate.errors import SpecError, dotted


class Loader(yaml.SafeLoader):
    """PyYAML's safe loader, but `1e-9` and `3E5` are the numbers they mean, as YAML 1.2 reads them (YAML 1.1, which
    PyYAML follows, wants a dot: `1.0e-9`, and reads `1e-9` as a string)."""


Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def load_yaml(text: str) -> Any:
    """A YAML document as data, safely (no Python objects), numbers in exponent form included."""
    return yaml.load(text, Loader=Loader)  # a SafeLoader: no Python objects


def umask_mode() -> int:
    """The mode a file created now gets from open(): 0o666 less the process's umask (mkstemp's files are 0o600
    whatever the umask, which hides results from colleagues on a shared file system)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_bytes(path: Path, data: bytes) -> None:
    """`data` as `path`, atomically (a temporary file beside it, then renamed), with the umask's permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, umask_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def cache_dir() -> Path:
    """ablate's cache (vocabularies, FLOP counts, a machine's peak, BLEU statistics): $ABLATE_CACHE_DIR, else
    $XDG_CACHE_HOME/ablate or ~/.cache/ablate. Everything in it can be deleted; it is made again."""
    if os.environ.get("ABLATE_CACHE_DIR"):
        return Path(os.environ["ABLATE_CACHE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ablate"


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def write_yaml(path: Path, data: Any) -> None:
    write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def read_yaml(path: Path) -> dict[str, Any]:
    if path.is_dir():
        found = sorted(str(p) for p in path.glob("*.yaml"))[:3]
        hint = f" such as {', '.join(found)}" if found else ""
        raise SpecError([f"{path}: a directory, not a YAML file: give the experiment files{hint}"])
    if not path.is_file():
        raise SpecError([f"{path}: no such file"])
    try:
        text = path.read_text(encoding="utf-8")
        repeated = duplicate_keys(text)
        data = load_yaml(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(top level)"
        raise SpecError([f"{path}: {where}: not valid YAML: {getattr(error, 'problem', None) or error}"]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError([f"{path}: cannot read: {error}"]) from None
    if repeated:
        raise SpecError([f"{path}: {key}: line {line}: duplicate key (first given at line {first}); keep one"
                         for key, line, first in repeated])  # fmt: skip
    if not isinstance(data, dict):
        raise SpecError([f"{path}: (top level): expected a mapping of keys, got {type(data).__name__}"])
    return data


def duplicate_keys(text: str) -> list[tuple[str, int, int]]:
    """(dotted key, line, line of its first occurrence) for every key a mapping repeats.

    PyYAML keeps the last of two equal keys without a word; a spec file that says `heads:` twice is a
    mistake the user must see, so the composed node tree is walked first.
    """
    found: list[tuple[str, int, int]] = []

    def walk(node: yaml.Node, path: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                line = key_node.start_mark.line + 1
                if key is not None and key in seen:
                    found.append((dotted((*path, key)), line, seen[key]))
                elif key is not None:
                    seen[key] = line
                walk(value_node, (*path, key) if key is not None else path)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    root = yaml.compose(text, Loader=Loader)
    if root is not None:
        walk(root, ())
    return found
