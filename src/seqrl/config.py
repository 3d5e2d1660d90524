"""Strict dataclass configs: YAML files + dotted command-line overrides, errors that name the field.

Configs are plain (nested) ``@dataclass`` classes defined beside the code that uses them, in modules
that do not import torch (``algos/sft_config.py`` for ``algos/sft.py``, ``models/config.py``, …), so
the command line builds and checks a whole config in a fraction of a second and only then loads torch
(seconds). This module only turns untrusted input into them:

* `from_dict` builds a config from a mapping and rejects anything it does not expect: unknown keys
  (with the valid ones and a did-you-mean), wrong types, missing required fields, and the
  ``ValueError``\\ s a dataclass's ``__post_init__`` raises — all as `ConfigError` with the dotted
  path of the offending field, e.g. ``sft.optim.lr: expected float, got str 'fast'``.
* `parse_overrides` turns ``--optim.lr=3e-4`` into ``{"optim": {"lr": 0.0003}}``.
* `load_config` = YAML file, deep-merged with overrides, then `from_dict`.
* `to_dict` / `dump_yaml` write the resolved config back (``runs/<name>/config.yaml``).

YAML is read with YAML 1.2 core-schema scalars: ``3e-4`` is a float (PyYAML's YAML 1.1 reads it as a
string), only ``true``/``false`` are booleans (``yes``/``no``/``on``/``off`` stay strings), and
numbers with a leading zero (``010``) stay strings instead of becoming octal. The dumper uses the
same rules, so `dump_yaml` → `load_config` round-trips.

>>> from dataclasses import dataclass
>>> @dataclass
... class Optim:
...     lr: float = 1e-3
...     warmup_steps: int = 0
>>> load_config(Optim, overrides=["--lr=3e-4"])
Optim(lr=0.0003, warmup_steps=0)
>>> from_dict(Optim, {"lrr": 1}, path="sft.optim")
Traceback (most recent call last):
...
seqrl.config.ConfigError: sft.optim.lrr: unknown key; did you mean 'lr'? valid keys: lr, warmup_steps

Annotations are resolved with ``typing.get_type_hints``, so config classes live at module level.
"""

from __future__ import annotations

import json

import copy
import dataclasses
import difflib
import os
import re
import tempfile
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import yaml

__all__ = ["ConfigError", "dump_yaml", "from_dict", "load_config", "merge", "parse_overrides", "to_dict"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value, key, file or override is invalid; the message starts with its dotted path."""


# ---------------------------------------------------------------------------------------------------
# YAML with YAML 1.2 core-schema scalars (shared by the loader and the dumper)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose implicit scalars follow the YAML 1.2 core schema (see module docstring)."""

    yaml_implicit_resolvers: dict = {}


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes exactly the strings `_Loader` would not read back as strings."""

    yaml_implicit_resolvers: dict = {}


_CORE_SCALARS = [
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("tag:yaml.org,2002:int", r"[-+]?(?:0|[1-9][0-9]*)", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        list("-+.0123456789"),
    ),
    ("tag:yaml.org,2002:merge", r"<<", ["<"]),
]
for _cls in (_Loader, _Dumper):
    for _tag, _pattern, _first in _CORE_SCALARS:
        _cls.add_implicit_resolver(_tag, re.compile(rf"^(?:{_pattern})$"), _first)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 — _Loader is a SafeLoader


# ---------------------------------------------------------------------------------------------------
# from_dict: strict construction


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _prefix(path: str, message: str) -> str:
    return f"{path}: {message}" if path else message


def _describe(value: Any) -> str:
    """``str 'fast'`` — the type and a short repr of an offending value."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _type_name(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


RENAMED_KEYS = {"eval_every": "eval.every", "eval_batch_size": "eval.batch_size"}
"""Old spellings of config fields (the reward-model trainers' top-level ``eval_every``): refused naming the
new one, and read as the new one in a run folder's saved config.yaml when it is resumed."""


def from_dict(cls: type[T], data: Mapping[str, Any], path: str = "") -> T:
    """Build dataclass `cls` from `data`, strictly; every error is a `ConfigError` naming its field.

    `path` is the name the caller gives the root (``"sft"``); error paths continue it with dots
    (``sft.optim.lr``) and list indices (``sft.stages[1].lr``). Keys missing from `data` keep their
    defaults — inside a nested section too, where the default is the field's own (its default or
    default_factory instance), not the section class's; a field without a default must be given. Fields declared with ``init=False`` are
    computed by the dataclass and cannot be set. Annotations may be: int (bools rejected), float
    (ints accepted and converted), str, bool, ``X | None``, ``list[X]``, ``tuple[X, ...]`` and
    fixed ``tuple[X, Y]`` (lists accepted, converted to tuples), ``dict[str, X]``, ``Literal[...]``,
    ``Any`` and nested dataclasses (from a mapping). A ``ValueError`` from ``__post_init__`` is
    re-raised as ``ConfigError`` prefixed with `path`.
    """
    if not _is_dataclass_type(cls):
        raise TypeError(f"from_dict: {cls!r} is not a dataclass type")
    if not isinstance(data, Mapping):
        raise ConfigError(_prefix(path, f"expected a mapping for {cls.__name__}, got {_describe(data)}"))
    try:
        hints = typing.get_type_hints(cls)
    except NameError as e:
        raise TypeError(f"from_dict: cannot resolve the annotations of {cls.__qualname__}: {e}") from e

    fields = {f.name: f for f in dataclasses.fields(cls)}
    settable = sorted(name for name, f in fields.items() if f.init)
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(_prefix(path, f"keys must be strings, got {_describe(key)}"))
        if key in fields and not fields[key].init:
            raise ConfigError(f"{_join(path, key)}: computed field (init=False); it cannot be set")
        if key not in fields and RENAMED_KEYS.get(key, ".").split(".")[0] in fields:
            raise ConfigError(f"{_join(path, key)}: renamed to {_join(path, RENAMED_KEYS[key])} (the same spelling in "
                              f"every trainer); write that instead")
        own = getattr(cls, "RENAMED", {})  # a class's own renames (STaR's per-iteration `steps`), with its reason
        if key not in fields and key in own:
            why = getattr(cls, "RENAMED_WHY", "")
            raise ConfigError(f"{_join(path, key)}: renamed to {_join(path, own[key])}{f' ({why})' if why else ''}; "
                              f"write that instead")
        derived = getattr(cls, "DERIVED", {})  # read-only values computed from fields (ODT's `steps`)
        if key not in fields and key in derived:
            raise ConfigError(f"{_join(path, key)}: computed, not set: {_join(path, key)} = {derived[key]}")
        if key not in fields:
            close = difflib.get_close_matches(key, settable, n=1)
            hint = f" did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{_join(path, key)}: unknown key;{hint} valid keys: {', '.join(settable)}")

    kwargs = {}
    for name in settable:
        field = fields[name]
        if name in data:
            value = data[name]
            default = _field_default(field)
            if _is_dataclass_type(hints[name]) and isinstance(default, hints[name]) and isinstance(value, Mapping):
                # A partial section keeps the field's own default (e.g. a factory with other
                # values than the section class's defaults) for the keys it does not give.
                value = merge(to_dict(default), value)
            kwargs[name] = _convert(value, hints[name], _join(path, name))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{_join(path, name)}: missing required field")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(_prefix(path, str(e))) from e


def _field_default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Check `value` against annotation `tp` and return it converted (int → float, list → tuple)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if _is_dataclass_type(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping for {tp.__name__}, got {_describe(value)}")
        return from_dict(tp, value, path)
    if origin in (Union, types.UnionType):
        return _convert_union(value, tp, args, path)
    if origin is Literal:
        if any(value == choice and type(value) is type(choice) for choice in args):
            return value
        allowed = ", ".join(repr(choice) for choice in args)
        raise ConfigError(f"{path}: expected one of {allowed}, got {_describe(value)}")
    if tp is bool:
        if type(value) is bool:
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (_TextDict, _TextList)):  # typed on the command line: the text itself
            return value.text
    elif origin is list:
        if isinstance(value, (list, tuple)):
            return [_convert(item, args[0], f"{path}[{i}]") for i, item in enumerate(value)]
    elif origin is tuple:
        if isinstance(value, (list, tuple)):
            return _convert_tuple(value, tp, args, path)
    elif origin is dict:
        if isinstance(value, Mapping):
            return _convert_dict(value, args, path)
    else:
        raise TypeError(f"{path}: unsupported config annotation {_type_name(tp)}")
    raise ConfigError(f"{path}: expected {_type_name(tp)}, got {_describe(value)}")


def _convert_union(value: Any, tp: Any, args: tuple, path: str) -> Any:
    if value is None and type(None) in args:
        return None
    options = [arg for arg in args if arg is not type(None)]
    if len(options) == 1:  # X | None: X's own message is the most precise one
        return _convert(value, options[0], path)
    for option in options:
        try:
            return _convert(value, option, path)
        except ConfigError:
            continue
    raise ConfigError(f"{path}: expected {_type_name(tp)}, got {_describe(value)}")


def _convert_tuple(value: list | tuple, tp: Any, args: tuple, path: str) -> tuple:
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert(item, args[0], f"{path}[{i}]") for i, item in enumerate(value))
    if len(value) != len(args):
        raise ConfigError(f"{path}: expected {_type_name(tp)} ({len(args)} items), got {_describe(value)}")
    return tuple(_convert(item, arg, f"{path}[{i}]") for i, (item, arg) in enumerate(zip(value, args)))


def _convert_dict(value: Mapping, args: tuple, path: str) -> dict:
    key_type, value_type = args
    if key_type is not str:
        raise TypeError(f"{path}: config dicts must have str keys, not {_type_name(key_type)}")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ConfigError(f"{path}: keys must be strings, got {_describe(key)}")
        out[key] = _convert(item, value_type, _join(path, key))
    return out


# ---------------------------------------------------------------------------------------------------
# to_dict / dump_yaml


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as plain data: nested dataclasses → dicts, tuples → lists (``init=False`` fields,
    being computed, are left out so that the result loads back with `from_dict`)."""
    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
        raise TypeError(f"to_dict: expected a dataclass instance, got {_describe(cfg)}")
    return _plain(cfg)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def user_file_mode() -> int:
    """The mode a plain ``open()`` would give a new file under the user's umask (``mkstemp`` gives 0600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def dump_yaml(cfg: Any, path: str | os.PathLike) -> Path:
    """Write the resolved config `cfg` as YAML to `path` atomically (temp file + ``os.replace``)."""
    path = Path(path)
    text = yaml.dump(to_dict(cfg), Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, user_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# ---------------------------------------------------------------------------------------------------
# overrides, merging, loading


def parse_json_object(text: str, flag: str) -> dict[str, Any]:
    """A JSON object given on the command line (``--task-kwargs '{"digits": 3}'``); a ConfigError naming
    the flag otherwise.

    >>> parse_json_object('{"digits": 3}', "--task-kwargs")
    {'digits': 3}
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag} {text!r}: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} {text!r}: expected a JSON object, e.g. '{{\"digits\": 3}}'")
    return value


class _TextDict(dict):
    """A mapping YAML read from a command-line value; ``text`` is what was typed, used where the field is
    a string (``--prompt.template=Q: {question}`` is text, not ``{'Q': {'question': None}}``)."""

    text: str = ""


class _TextList(list):
    """A list YAML read from a command-line value, with the typed ``text`` (see `_TextDict`)."""

    text: str = ""


class WholeMapping(dict):
    """An empty mapping given on the command line (``--task.kwargs={}``): `merge` puts it in place of the
    mapping it overrides, so a preset's keys can be removed (dotted keys after it add new ones). A
    non-empty mapping merges key by key, so ``--optim={lr: 1e-4}`` keeps the preset's other fields."""


_Dumper.add_representer(_TextDict, lambda d, v: d.represent_dict(dict(v)))
_Dumper.add_representer(_TextList, lambda d, v: d.represent_list(list(v)))


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """``["--optim.lr=3e-4", "train.steps=10", "--tags", "[a, b]"]`` → a nested dict.

    Each override is ``--KEY=VALUE``, ``KEY=VALUE`` or ``--KEY VALUE`` (two items); KEY is dotted,
    VALUE is read as YAML (``3e-4`` → float, ``true`` → bool, ``[1, 2]`` → list, ``null`` → None;
    quote to force a string: ``--name='"123"'``; a value that is not YAML, or starts with ``{`` and
    names only keys, is the text itself: a format string like ``{question} in {unit}``; a value YAML
    reads as a mapping or list, given to a string field, is the text as typed: ``Q: {question}``). Later
    overrides win. A dotted key changes one field and keeps the others (``--task.kwargs.digits=3``),
    and so does a mapping (merged key by key); an empty mapping clears the one it overrides
    (``--task.kwargs={}`` drops a preset's ``digits``; `WholeMapping`).

    >>> parse_overrides(["--optim.lr=3e-4", "--train.bf16", "true"])
    {'optim': {'lr': 0.0003}, 'train': {'bf16': True}}
    >>> merge({"task": {"kwargs": {"digits": 2}}}, parse_overrides(["--task.kwargs={}"]))
    {'task': {'kwargs': {}}}
    """
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        body = arg[2:] if arg.startswith("--") else arg
        if "=" in body:
            key, text = body.split("=", 1)
            i += 1
        elif arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            key, text = body, args[i + 1]
            arg = f"{arg} {text}"
            i += 2
        else:
            raise ConfigError(f"override {arg!r}: expected --KEY=VALUE or --KEY VALUE")
        parts = key.split(".")
        if not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part) for part in parts):
            raise ConfigError(f"override {arg!r}: invalid key {key!r} (expected dotted names like optim.lr)")
        try:
            value = _yaml_load(text)
        except yaml.YAMLError as e:
            if text.lstrip().startswith("["):  # an unclosed list is a typo, not text
                raise ConfigError(f"override {arg!r}: cannot parse value {text!r} as YAML: {e}") from e
            value = text  # not YAML: the text itself ("{question} in {unit}", "Q: {question} A:"); a field
            # that is no string then says what it expected
        if isinstance(value, dict) and value and all(v is None for v in value.values()) and text.lstrip().startswith("{"):
            value = text  # "{question}": a format string, not a mapping of empty keys
        if isinstance(value, dict) and not value:
            value = WholeMapping()
        elif type(value) in (dict, list):
            value = (_TextDict if isinstance(value, dict) else _TextList)(value)
            value.text = text
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                prefix = ".".join(parts[: depth + 1])
                raise ConfigError(f"override {arg!r}: {prefix} was already set to a value, not a section")
            node = child
        if isinstance(node.get(parts[-1]), dict):
            raise ConfigError(f"override {arg!r}: {key} is a section set by an earlier override")
        node[parts[-1]] = value
    return out


def merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge: nested mappings merge key by key (a `WholeMapping` replaces), anything else in `update` wins.

    Neither input is mutated and the result shares no mutable values with them.

    >>> merge({"optim": {"lr": 1.0, "wd": 0.1}, "steps": 5}, {"optim": {"lr": 2.0}})
    {'optim': {'lr': 2.0, 'wd': 0.1}, 'steps': 5}
    """
    out = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, WholeMapping):
            out[key] = copy.deepcopy(dict(value))
        elif isinstance(out.get(key), Mapping) and isinstance(value, Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_config(
    cls: type[T],
    path: str | os.PathLike | None = None,
    overrides: list[str] | None = None,
    root: str = "",
) -> T:
    """YAML file `path` (optional; an empty file means all defaults) deep-merged with `overrides`
    (`parse_overrides` syntax; they win), then `from_dict` with `root` as the error-path prefix."""
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file {str(file)!r} not found")
        try:
            loaded = _yaml_load(file.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            what = " ".join(str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or str(e)
            raise ConfigError(f"config file {str(file)!r}{where}: invalid YAML: {what}") from e
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(
                f"config file {str(file)!r}: expected a mapping at the top, got {_describe(loaded)}"
            )
        data = loaded or {}
    if overrides:
        data = merge(data, parse_overrides(overrides))
    return from_dict(cls, data, path=root)
