"""Tools an agent calls in a multi-turn rollout, in TRL's shape: plain Python functions with type hints
and a Google-style docstring, their JSON schema read by transformers' `get_json_schema` (what a chat
template's ``tools=`` takes).

The model writes a call as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the Hermes
convention; `Toolbox.system_prompt` describes the tools for templates that render no ``tools``, such as
SmolLM2-135M-Instruct's), or in the compact syntax ``[[name arg ...]]`` (`SYNTAXES`). Whatever a call does — raise, hang past ``timeout_s``, return something that
is not text or is huge, name no tool, pass arguments the schema refuses, or is not JSON — comes back
as that call's `ToolResult` with its ``error`` kind, the text the model reads next, and is never raised
in the trainer.

A tool runs in a thread of the trainer's process: a call past its timeout is abandoned, not stopped
(Python cannot kill a thread), so a tool that runs model-written code must run it in the sandbox
(`seqrl.sandbox.run_python`), which confines and kills it.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import shlex
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)
COMPACT_OPEN, COMPACT_CLOSE = "[[", "]]"
_COMPACT = re.compile(re.escape(COMPACT_OPEN) + r"(.*?)" + re.escape(COMPACT_CLOSE), re.S)
SYNTAXES = ("hermes", "compact")
"""How the model writes a call: ``hermes`` — ``<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>``;
``compact`` — ``[[add 3 4]]``, the arguments in the schema's order (quotes around one with spaces), each
read as the schema's type says (a string parameter takes the word as written, ``0`` included; others a
JSON value); ``]]`` cannot appear inside: a few tokens a call for the tiny presets' character-level
vocabulary."""

ERRORS = ("malformed", "unknown_tool", "bad_arguments", "raised", "timeout")
"""The kinds of failed call a `ToolResult.error` names (counted per kind in a rollout's metrics)."""

_JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
               "array": (list,), "object": (dict,), "null": (type(None),)}


class AgentError(ValueError):
    """Bad input to an agent's run — an environment's ``reset`` that fails on a row or returns no text, the
    episodes of one row reset differently, a prompt with no room left for a turn: the CLI reports it as
    one line (it names the row or the length), even from inside the training loop."""


@dataclass(frozen=True)
class ToolCall:
    """One call as the model wrote it: the tool's name and its arguments."""

    name: str
    arguments: dict = field(default_factory=dict)


@dataclass
class ToolResult:
    """What the model reads back for one call: ``content`` (the tool's text, or the error said in a
    line), ``error`` (one of `ERRORS`, "" when the call ran), whether the text was cut to
    ``max_result_chars``, and the call's wall time."""

    name: str
    content: str
    error: str = ""
    truncated: bool = False
    seconds: float = 0.0


_SCHEMAS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # function → its schema (an environment's
# methods are bound afresh for each episode's instance; their schema is the class's)


def _word_value(word: str):
    """A compact call's argument: a JSON value (``3``, ``2.5``, ``true``, ``[1, 2]``), else the word as text."""
    try:
        return json.loads(word)
    except ValueError:
        return word


def tool_schema(fn: Callable) -> dict:
    """The JSON schema of `fn` (``{"type": "function", "function": {...}}``), from its type hints and
    Google-style docstring; ValueError naming the function where they do not give one."""
    from transformers.utils import get_json_schema

    key = getattr(fn, "__func__", fn)
    try:
        return copy.deepcopy(_SCHEMAS[key])
    except (KeyError, TypeError):  # not seen yet, or not weak-referenceable
        pass
    try:
        schema = get_json_schema(fn)
    except Exception as e:  # noqa: BLE001 — transformers' own errors name what is missing
        name = getattr(fn, "__name__", repr(fn))
        raise ValueError(f"tool {name!r}: no JSON schema from its signature and docstring ({e}); give every "
                         f"argument a type hint and an 'Args:' line, and the function a description") from e
    try:
        _SCHEMAS[key] = copy.deepcopy(schema)
    except TypeError:  # not weak-referenceable: computed each time
        pass
    return schema


def _type_ok(value, spec: dict) -> bool:
    kinds = spec.get("type")
    if kinds is None:
        return True
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        types = _JSON_TYPES.get(kind)
        if types is None:
            return True  # a type this check does not know: the tool decides
        if isinstance(value, types) and not (kind in ("integer", "number") and isinstance(value, bool)):
            return True
    return False


def check_arguments(schema: dict, arguments) -> str:
    """Why `arguments` do not fit the tool's `schema` ("" when they do): a mapping, every required
    argument present, no argument the tool does not take, each of its JSON type (and in its ``enum``)."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    params = schema.get("function", {}).get("parameters", {})
    props = params.get("properties", {})
    missing = [k for k in params.get("required", []) if k not in arguments]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    extra = [k for k in arguments if k not in props]
    if extra:
        return f"unknown argument(s): {', '.join(map(str, extra))} (takes: {', '.join(props) or 'none'})"
    for k, v in arguments.items():
        spec = props[k]
        if not _type_ok(v, spec):
            return f"argument {k!r} must be of type {spec.get('type')}, got {type(v).__name__}"
        if "enum" in spec and v not in spec["enum"]:
            return f"argument {k!r} must be one of {spec['enum']}, got {v!r}"
    return ""


def as_text(value, limit: int) -> tuple[str, bool]:
    """A tool's return value as the text the model reads: a string as it is, other JSON-able values as
    JSON, anything else as ``str``; cut to `limit` characters with the cut said. ``(text, truncated)``."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            try:
                text = str(value)
            except Exception as e:  # noqa: BLE001 — a __str__ that raises
                text = f"<{type(value).__name__} that cannot be shown: {type(e).__name__}>"
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n[… {len(text) - limit} more characters cut]", True


class Toolbox:
    """The tools of one rollout: their schemas, the parsing of the model's calls and running them.

    tools: plain functions (their ``__name__`` is the tool's name; two with one name are an error).
    timeout_s: each call's wall-clock limit. max_result_chars: a result's text is cut there.
    max_workers: calls run at once by `run` (a batch's calls from every episode together).
    """

    def __init__(self, tools: Sequence[Callable] = (), timeout_s: float = 10.0, max_result_chars: int = 4000,
                 max_workers: int = 8, syntax: str = "hermes"):
        if syntax not in SYNTAXES:
            raise ValueError(f"Toolbox: syntax must be one of {', '.join(SYNTAXES)} (got {syntax!r})")
        self.syntax = syntax
        if timeout_s <= 0 or max_result_chars < 1 or max_workers < 1:
            raise ValueError(f"Toolbox: timeout_s must be > 0, max_result_chars and max_workers >= 1 (got "
                             f"{timeout_s}, {max_result_chars}, {max_workers})")
        self.tools: dict[str, Callable] = {}
        self.schemas: list[dict] = []
        for fn in tools:
            if not callable(fn):
                raise ValueError(f"Toolbox: {fn!r} is not callable")
            schema = tool_schema(fn)
            name = schema["function"]["name"]
            if name in self.tools:
                raise ValueError(f"Toolbox: two tools named {name!r}")
            self.tools[name] = fn
            self.schemas.append(schema)
        self._schema = {s["function"]["name"]: s for s in self.schemas}
        self.timeout_s, self.max_result_chars, self.max_workers = timeout_s, max_result_chars, max_workers

    @property
    def call_close(self) -> str:
        """The text that closes a call in this toolbox's syntax (the sampler stops there)."""
        return CALL_CLOSE if self.syntax == "hermes" else COMPACT_CLOSE

    def system_prompt(self) -> str:
        """The tools and the call syntax in words, for a system message where the chat template renders
        no ``tools`` (SmolLM2-135M-Instruct's): one JSON schema a line."""
        if self.syntax == "compact":
            return self.compact_prompt()
        lines = "\n".join(json.dumps(s, ensure_ascii=False) for s in self.schemas)
        return ("You can use tools. Their JSON schemas, one a line, are between <tools> and </tools>:\n"
                f"<tools>\n{lines}\n</tools>\n"
                "To call one, write a JSON object with its name and arguments between tool-call tags, "
                f'for example {CALL_OPEN}{{"name": "NAME", "arguments": {{"ARG": VALUE}}}}{CALL_CLOSE}. '
                "The result comes back in a tool turn. Answer without a call when you are done.")

    def compact_prompt(self) -> str:
        """The tools in one line each (``add(a: integer, b: integer): Add two integers.``) and the call
        syntax: for a short context (the tiny presets)."""
        lines = []
        for sch in self.schemas:
            f = sch["function"]
            args = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in f.get("parameters", {}).get("properties", {}).items())
            lines.append(f"{f['name']}({args}): {f.get('description', '')}".rstrip(": "))
        call = (f'{CALL_OPEN}{{"name": ..., "arguments": {{...}}}}{CALL_CLOSE}' if self.syntax == "hermes"
                else f"{COMPACT_OPEN}name arg ...{COMPACT_CLOSE}")
        return "Tools: " + "; ".join(x.rstrip(".") for x in lines) + f". Call: {call}"

    def parse(self, text: str) -> tuple[list[ToolCall | ToolResult], bool]:
        """The calls in one model turn, in order: a `ToolCall` for each well-formed one, a `ToolResult`
        with ``error="malformed"`` for one that is not a JSON object with a string ``name`` and object
        ``arguments`` (a JSON-encoded object string is read too; in the compact syntax: no name, or more
        arguments than the tool takes); and whether the turn holds any call (an opened tag never closed
        counts as a malformed call)."""
        if self.syntax == "compact":
            return self._parse_compact(text)
        out: list[ToolCall | ToolResult] = []
        for m in _CALL.finditer(text):
            body = m.group(1).strip()
            try:
                obj = json.loads(body)
                if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                    raise ValueError('a JSON object with a string "name" is needed')
                args = obj.get("arguments", obj.get("parameters", {}))
                if isinstance(args, str):
                    args = json.loads(args) if args.strip() else {}
                if not isinstance(args, dict):
                    raise ValueError('"arguments" must be a JSON object')
                out.append(ToolCall(obj["name"], args))
            except (ValueError, RecursionError) as e:
                out.append(ToolResult("?", f"error: malformed tool call ({str(e)[:200]}): {body[:200]}",
                                      error="malformed"))
        tail = text[text.rfind(CALL_CLOSE) + len(CALL_CLOSE):] if out else text
        if CALL_OPEN in tail:
            out.append(ToolResult("?", f"error: a {CALL_OPEN} tag was never closed with {CALL_CLOSE}",
                                  error="malformed"))
        return out, bool(out)

    def _parse_compact(self, text: str) -> tuple[list[ToolCall | ToolResult], bool]:
        out: list[ToolCall | ToolResult] = []
        for m in _COMPACT.finditer(text):
            body = m.group(1).strip()
            try:
                words = shlex.split(body)
            except ValueError as e:  # an unclosed quote
                out.append(ToolResult("?", f"error: malformed tool call ({e}): {body[:200]}", error="malformed"))
                continue
            if not words or not re.fullmatch(r"[A-Za-z_]\w*", words[0]):
                out.append(ToolResult("?", f"error: malformed tool call (a tool name first): {body[:200]}",
                                      error="malformed"))
                continue
            props = self._schema.get(words[0], {}).get("function", {}).get("parameters", {}).get("properties", {})
            params = list(props)
            name = words[0]
            values = [w if props.get(p, {}).get("type") == "string" else _word_value(w)  # text stays text: "0"
                      for p, w in zip(params + [None] * len(words), words[1:])]
            if name in self.tools and len(values) > len(params):
                out.append(ToolResult(name, f"error: {name} takes {len(params)} argument(s), got {len(values)}",
                                      error="bad_arguments"))
                continue
            out.append(ToolCall(name, dict(zip(params, values))))
        tail = text[text.rfind(COMPACT_CLOSE) + len(COMPACT_CLOSE):] if out else text
        if COMPACT_OPEN in tail:
            out.append(ToolResult("?", f"error: a {COMPACT_OPEN} call was never closed with {COMPACT_CLOSE}",
                                  error="malformed"))
        return out, bool(out)

    def call(self, call: ToolCall) -> ToolResult:
        """Run one call with the limits; every failure is a result (see the module docstring)."""
        fn = self.tools.get(call.name)
        if fn is None:
            return ToolResult(call.name, f"error: unknown tool {call.name!r} (tools: {', '.join(self.tools) or 'none'})",
                              error="unknown_tool")
        why = check_arguments(self._schema[call.name], call.arguments)
        if why:
            return ToolResult(call.name, f"error: {why}", error="bad_arguments")
        box: dict = {}

        def work():
            try:
                box["value"] = fn(**call.arguments)
            except BaseException as e:  # noqa: BLE001 — SystemExit too: the tool's failure, the model's to read
                box["error"] = e

        t0 = time.perf_counter()
        worker = threading.Thread(target=work, name=f"seqrl-tool-{call.name}", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        seconds = time.perf_counter() - t0
        if worker.is_alive():
            return ToolResult(call.name, f"error: {call.name} did not return within {self.timeout_s:g} s",
                              error="timeout", seconds=seconds)
        if "error" in box:
            e = box["error"]
            return ToolResult(call.name, f"error: {type(e).__name__}: {str(e)[:500]}", error="raised",
                              seconds=seconds)
        value = box.get("value")
        if inspect.isawaitable(value):
            if hasattr(value, "close"):
                value.close()
            return ToolResult(call.name, f"error: {call.name} is async; give a plain function", error="raised",
                              seconds=seconds)
        text, cut = as_text(value, self.max_result_chars)
        return ToolResult(call.name, text, truncated=cut, seconds=seconds)

    def run(self, calls: Sequence[ToolCall | ToolResult]) -> list[ToolResult]:
        """Every call of a batch, `max_workers` at a time, results in the calls' order (a `ToolResult`
        already, such as a malformed call's, passes through)."""
        todo = [c for c in calls if isinstance(c, ToolCall)]
        if len(todo) <= 1 or self.max_workers == 1:
            done = [self.call(c) for c in todo]
        else:
            with ThreadPoolExecutor(max_workers=min(self.max_workers, len(todo))) as ex:
                done = list(ex.map(self.call, todo))
        it = iter(done)
        return [next(it) if isinstance(c, ToolCall) else c for c in calls]


def run_episode_calls(jobs: Sequence[tuple[Toolbox, Sequence[ToolCall | ToolResult]]], max_workers: int = 8
                      ) -> list[list[ToolResult]]:
    """The calls of several episodes, each with its own toolbox (an environment's instance): one episode's
    calls in order (they may share state: an edit then a test run), the episodes at once, `max_workers`
    at a time. Results per job, in its calls' order."""

    def one(job: tuple[Toolbox, Sequence[ToolCall | ToolResult]]) -> list[ToolResult]:
        box, calls = job
        return [box.call(c) if isinstance(c, ToolCall) else c for c in calls]

    busy = [j for j in jobs if any(isinstance(c, ToolCall) for c in j[1])]
    if len(busy) <= 1 or max_workers == 1:
        return [one(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(busy))) as ex:
        return list(ex.map(one, jobs))
