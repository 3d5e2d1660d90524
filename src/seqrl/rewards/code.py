"""Multi-level code reward: syntax → compiles → tests passed in the sandbox, with penalties.

A completion is scored in levels, cheapest first:

1. **extract** the program (`extract_code`): the last fenced ```` ```python ```` block (any fenced
   block when none is tagged python; an unclosed final fence runs to the end), else the last
   ``<answer>…</answer>`` block, else the whole text minus ``<think>…</think>``. Never raises.
2. **syntax** — ``ast.parse`` in this process (parsing executes nothing): 1 or 0.
3. **compiles** — ``compile(tree)`` (no ``exec``; catches ``return`` outside a function, ``nonlocal``
   at module level …): 1 or 0. A program that fails 2 or 3 never reaches the sandbox.
4. **functional** — ``passed / total`` from :func:`seqrl.sandbox.run_python` (unforgeable per-test
   verdicts; records received before a timeout count; io values and stdio tokens by one number rule,
   `seqrl.sandbox.numbers_equal`: an integer answer exactly, a float one within 1e-6).
5. **timeout / error / memory** — 0/1 indicators of the sandbox status (``timeout``;
   ``runtime_error`` or ``killed``; ``memory``), weighted by *negative* weights.
6. **efficiency** — ``clip(reference_time_s / runtime_s, 0, 1)`` where ``runtime_s`` is the sum of
   the per-test times (sandbox start-up excluded); only when every test passed (else 0), skipped
   without a reference time.
7. **style** — ``max(0, 1 - findings / style_max_findings)`` from ``ruff check`` (ruff only
   parses), skipped when ruff is not installed.

``total = clip(Σ_k weight_k · part_k, min_score, max_score)``; every computed part is in
``RewardResult.parts``; parts with weight 0 that cost something (efficiency, style) are not computed.
The reason names the first failure (``"syntax error line 3: …"``, ``"timeout after 2.0 s"``,
``"2/5 tests passed; case[1]: …"``) followed by any weighted part that was skipped.

Problem metadata contract (`CodeExecutionReward` as a reward function):
``tests`` (assert-style test code) and/or ``io_cases`` (``[[args…], expected]``), ``entry_point``
(required with ``io_cases`` and with ``def check(candidate)`` tests), optional ``reference_time_s``;
or, for programs that read stdin and print (competitive programming), ``stdio_cases``
(``[input, expected_output]`` pairs or ``{"input", "output"}`` dicts) alone.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from seqrl.sandbox import Limits, SandboxResult, run_many, stdio_pairs
from seqrl.types import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN, Problem, RewardResult

_FENCE_LANG_RE = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_PY_LANGS = ("python", "py", "python3", "py3")
RUFF_TIMEOUT_S = 10.0
MAX_CODE_CHARS = 200_000
"""Longer programs score 0 unparsed: ``ast.parse`` costs ≈ 0.5 GB and 3 s per MB in this process."""
MAX_COMPLETION_CHARS = 4 * MAX_CODE_CHARS
"""Longer completions score 0 before the program is even looked for."""


def extract_code(text: str) -> tuple[str, str]:
    """The program in a completion and where it came from (``fence``, ``answer_tag``, ``text``).

    >>> extract_code("Here:\\n```python\\nx = 1\\n```\\nbetter:\\n```python\\nx = 2\\n```")
    ('x = 2\\n', 'fence')
    >>> extract_code("<think>easy</think><answer>\\ndef f():\\n    return 1\\n</answer>")
    ('\\ndef f():\\n    return 1\\n', 'answer_tag')
    >>> extract_code("<think>hm</think>print(1)"), extract_code(None)
    (('print(1)', 'text'), ('', 'none'))
    """
    if not isinstance(text, str):
        return "", "none"
    blocks, unclosed = _fences(text)
    python = [body for lang, body in blocks if lang in _PY_LANGS]
    if python or blocks:
        return (python or [body for _, body in blocks])[-1], "fence"
    # A truncated generation: an opening fence with no closing one runs to the end of the text.
    if unclosed is not None and (unclosed[0] in _PY_LANGS or not unclosed[0]):
        return text[unclosed[1]:], "fence"
    close = text.rfind(ANSWER_CLOSE)
    start = text.rfind(ANSWER_OPEN, 0, close) if close >= 0 else -1
    if start >= 0:
        return text[start + len(ANSWER_OPEN):close], "answer_tag"
    end = text.rfind(THINK_CLOSE)
    if text.lstrip().startswith(THINK_OPEN) and end >= 0:
        text = text[end + len(THINK_CLOSE):]
    return text, "text"


def _fences(text: str) -> tuple[list[tuple[str, str]], tuple[str, int] | None]:
    """The closed fenced blocks ``(lang, body)`` in order, and ``(lang, body start)`` of an opening
    fence that never closes (None when there is none). One left-to-right pass with ``str.find``:
    a fence regex with a lazy body rescans the rest of the text from every unclosed fence."""
    blocks, pos = [], 0
    while (start := text.find("```", pos)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:
            break
        lang = _FENCE_LANG_RE.match(text, start + 3).group(1).lower()
        close = text.find("```", newline + 1)
        if close < 0:
            return blocks, (lang, newline + 1)
        blocks.append((lang, text[newline + 1:close]))
        pos = close + 3
    return blocks, None


def check_static(code: str) -> tuple[float, float, str]:
    """``(syntax, compiles, reason)`` without executing anything (``ast.parse`` then ``compile``).

    >>> check_static("def f(:\\n    pass")
    (0.0, 0.0, 'syntax error line 1: invalid syntax')
    >>> check_static("return 1")
    (1.0, 0.0, "compile error line 1: 'return' outside function")
    >>> check_static("x = 1")
    (1.0, 1.0, '')
    """
    if len(code) > MAX_CODE_CHARS:
        return 0.0, 0.0, f"program too long ({len(code)} > {MAX_CODE_CHARS} characters), not parsed"
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return 0.0, 0.0, f"syntax error line {e.lineno}: {e.msg}"
    except Exception as e:  # noqa: BLE001 — null bytes (ValueError), RecursionError, MemoryError
        return 0.0, 0.0, f"syntax error: {type(e).__name__}: {e}"[:300]
    try:
        compile(tree, "<solution>", "exec")
    except SyntaxError as e:
        return 1.0, 0.0, f"compile error line {e.lineno}: {e.msg}"
    except Exception as e:  # noqa: BLE001
        return 1.0, 0.0, f"compile error: {type(e).__name__}: {e}"[:300]
    return 1.0, 1.0, ""


def ruff_findings(code: str, ruff: str | None = None, timeout_s: float = RUFF_TIMEOUT_S) -> tuple[int | None, str]:
    """``(number of ruff findings, "")``, or ``(None, why)`` when ruff is missing or fails.

    Runs ``ruff check --isolated --quiet --output-format=json -`` with the code on stdin (ruff
    parses, it never executes), so the project's own ruff config does not apply.
    """
    exe = ruff or shutil.which("ruff")
    if exe is None:
        return None, "ruff not installed"
    try:
        r = subprocess.run([exe, "check", "--isolated", "--quiet", "--output-format=json", "-"],
                           input=code.encode("utf-8", "replace"), capture_output=True, timeout=timeout_s,
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    except subprocess.TimeoutExpired:
        return None, f"ruff timed out after {timeout_s} s"
    except OSError as e:
        return None, f"ruff failed: {e}"
    try:
        findings = json.loads(r.stdout or b"[]")
    except ValueError:
        return None, f"ruff failed (exit {r.returncode}): {r.stderr.decode(errors='replace')[-200:]}"
    if not isinstance(findings, list):
        return None, f"ruff failed: unexpected output {r.stdout[:100]!r}"
    return len(findings), ""


@dataclass(frozen=True)
class CodeTests:
    """What a program is checked against (a problem's metadata, see the module docstring)."""

    tests: str | None = None
    """Assert-style test code."""
    io_cases: list | None = None
    """``[[args…], expected]`` pairs for ``entry_point``."""
    entry_point: str | None = None
    """The function the io cases (and ``def check(candidate)``) call."""
    stdio_cases: list | None = None
    """``[input, expected_output]`` pairs for a whole program (alone)."""
    reference_time_s: float | None = None
    """Runtime of a reference solution, for the efficiency part."""


@dataclass
class CodeExecutionReward:
    """The multi-level code reward; an instance is a reward function ``(problems, completions)``.

    total = clip(Σ_k weight_k · part_k, min_score, max_score); see the module docstring for the parts.
    """

    syntax: float = 0.1
    """Weight of the syntax part (``ast.parse`` succeeds)."""
    compiles: float = 0.1
    """Weight of the compiles part (``compile()`` succeeds)."""
    functional: float = 0.8
    """Weight of the fraction of tests passed."""
    efficiency: float = 0.0
    """Weight of clip(reference_time_s / runtime_s, 0, 1) (0: not computed)."""
    style: float = 0.0
    """Weight of max(0, 1 − ruff findings / style_max_findings) (0: ruff is not run)."""
    timeout_penalty: float = -0.2
    """Weight of the timeout indicator (wall clock or CPU limit); negative."""
    error_penalty: float = -0.1
    """Weight of the runtime-error indicator (raised/exited at import, died early, killed); negative."""
    memory_penalty: float = -0.1
    """Weight of the memory indicator (MemoryError under the address-space limit); negative."""
    min_score: float = -1.0
    """Lower clip of the total."""
    max_score: float = 1.0
    """Upper clip of the total."""
    style_max_findings: int = 10
    """Findings at which the style part reaches 0."""
    limits: Limits = field(default_factory=Limits)
    """Sandbox limits per program (wall clock ``timeout_s`` = 2 s, ``memory_mb`` = 256, …; a dict of
    `seqrl.sandbox.Limits` fields is accepted)."""
    max_workers: int = 2
    """Sandboxed programs run at once when scoring a batch."""
    allow_unconfined: bool = False
    """Run with rlimits only when the sandbox namespaces are unavailable (else SandboxUnavailable)."""
    extract: bool = True
    """Extract the program from the completion (`extract_code`); False: the text is the program."""
    ruff: str | None = None
    """Path of the ruff executable (default: ``ruff`` on PATH)."""
    static_timeout_s: float = 2.0
    """Limit of extracting and parsing one completion (levels 1–3, in a worker process); past it the
    completion scores 0 with reason "timeout"."""

    def __post_init__(self) -> None:
        if self.max_workers < 1:
            raise ValueError(f"code reward: max_workers must be >= 1 (got {self.max_workers})")
        if isinstance(self.limits, dict):
            try:
                self.limits = Limits(**self.limits)
            except TypeError as e:
                raise ValueError(f"code reward: limits: {e}") from None
        if not isinstance(self.limits, Limits):
            raise ValueError(f"code reward: limits must be a seqrl.sandbox.Limits (got {type(self.limits).__name__})")
        if self.min_score > self.max_score:
            raise ValueError(f"code reward: min_score must be <= max_score (got {self.min_score} > {self.max_score})")
        if not self.static_timeout_s > 0:
            raise ValueError(f"code reward: static_timeout_s must be > 0 (got {self.static_timeout_s})")
        if self.style_max_findings < 1:
            raise ValueError(f"code reward: style_max_findings must be >= 1 (got {self.style_max_findings})")
        self.__name__ = "code_execution"

    # ------------------------------------------------------------------ reward-function interface
    def __call__(self, problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        if len(problems) != len(completions):
            raise ValueError(f"code reward: {len(problems)} problems for {len(completions)} completions")
        return self.score_many(completions, [problem_spec(p) for p in problems])

    def score_many(self, completions: list[str], specs: list[CodeTests]) -> list[RewardResult]:
        """Score ``completions[i]`` against ``specs[i]``, in order.

        Programs that parse and compile run through `run_many` (``max_workers`` at once); the rest
        never reach the sandbox."""
        if len(completions) != len(specs):
            raise ValueError(f"code reward: {len(specs)} specs for {len(completions)} completions")
        for i, spec in enumerate(specs):
            _check_spec(spec, f"item {i}")
        static = _static_checks(list(completions), self.extract, self.static_timeout_s)
        jobs, job_of = [], {}
        for i, spec in enumerate(specs):
            code, _syn, comp, _why = static[i]
            if comp:
                job_of[i] = len(jobs)
                cases = dict(stdio_cases=spec.stdio_cases) if spec.stdio_cases is not None else \
                    dict(tests=spec.tests, io_cases=spec.io_cases, entry_point=spec.entry_point)
                jobs.append(dict(solution=code, **cases, limits=self.limits, allow_unconfined=self.allow_unconfined))
        results = run_many(jobs, self.max_workers) if jobs else []
        out = []
        for i, (code, syn, comp, why) in enumerate(static):
            run = results[job_of[i]] if i in job_of else None
            out.append(self._score(code, syn, comp, why, run, specs[i].reference_time_s))
        return out

    # ------------------------------------------------------------------ one program
    def _score(self, code: str, syntax: float, compiles: float, why: str, run: SandboxResult | None,
               reference_time_s: float | None) -> RewardResult:
        parts = {"syntax": syntax, "compiles": compiles, "functional": 0.0}
        reasons = [why] if why else []
        skipped = []
        if run is not None:
            parts["functional"] = run.passed / run.total if run.total else 0.0
            parts["timeout"] = float(run.status == "timeout")
            # a run that ended early; an exception inside a test is a failed test, not a penalty
            parts["error"] = float(not run.completed and run.status in ("runtime_error", "killed", "syntax_error"))
            parts["memory"] = float(run.status == "memory")
            reasons.append(_run_reason(run, self.limits))
        if self.efficiency and run is not None:
            if reference_time_s is None:
                skipped.append("efficiency skipped: no reference_time_s")
            elif not run.all_passed:
                parts["efficiency"] = 0.0
            else:
                runtime = sum(t.elapsed for t in run.tests)
                parts["efficiency"] = 1.0 if runtime <= 0 else min(1.0, max(0.0, reference_time_s / runtime))
                if parts["efficiency"] < 1.0:
                    reasons.append(f"slower than reference: {runtime:.3g} s vs {reference_time_s:.3g} s")
        if self.style and syntax:
            n, skip = ruff_findings(code, self.ruff)
            if n is None:
                skipped.append(f"style skipped: {skip}")
            else:
                parts["style"] = max(0.0, 1.0 - n / self.style_max_findings)
                if n:
                    reasons.append(f"{n} ruff finding{'s' if n != 1 else ''}")
        elif self.style:
            parts["style"] = 0.0
        weights = {"syntax": self.syntax, "compiles": self.compiles, "functional": self.functional,
                   "efficiency": self.efficiency, "style": self.style, "timeout": self.timeout_penalty,
                   "error": self.error_penalty, "memory": self.memory_penalty}
        total = sum(weights[k] * v for k, v in parts.items())
        total = min(self.max_score, max(self.min_score, total))
        reason = "; ".join(r for r in [*reasons, *skipped] if r)
        return RewardResult(round(total, 12), reason, parts)


def static_check(text, extract: bool = True) -> list:
    """``[code, syntax, compiles, reason]`` of one completion: levels 1–3, run in a worker."""
    if isinstance(text, str) and len(text) > MAX_COMPLETION_CHARS:
        return ["", 0.0, 0.0, f"completion too long ({len(text)} > {MAX_COMPLETION_CHARS} characters), not parsed"]
    code = extract_code(text)[0] if extract else (text if isinstance(text, str) else "")
    return [code, *check_static(code)]


def _static_checks(texts: list, extract: bool, timeout_s: float) -> list[tuple]:
    """`static_check` of every text in the worker pool (each within ``timeout_s``); in a worker, here."""
    from seqrl.sandbox import workers

    if workers.IN_WORKER:
        return [tuple(static_check(t, extract)) for t in texts]
    out = []
    for t, o in zip(texts, workers.shared_pool().map(static_check, [(t, extract) for t in texts], timeout_s)):
        v = o.value.get("value") if o.status == "ok" else None
        if (isinstance(v, list) and len(v) == 4 and isinstance(v[0], str) and len(v[0]) <= MAX_COMPLETION_CHARS
                and v[1] in (0.0, 1.0) and v[2] in (0.0, 1.0) and isinstance(v[3], str)):
            out.append((v[0], float(v[1]), float(v[2]), v[3][:300]))
        elif o.status == "timeout":
            out.append(("", 0.0, 0.0, f"timeout: extracting and parsing took over {timeout_s:g} s"))
        else:
            out.append(("", 0.0, 0.0, f"static check failed: {o.reason or 'malformed reply'}"[:300]))
    return out


def _run_reason(run: SandboxResult, limits: Limits) -> str:
    """Why a sandboxed run fell short ("" when every test passed)."""
    if run.status == "timeout":
        head = f"timeout after {limits.timeout_s} s" if run.reason == "wall-clock timeout" else f"timeout: {run.reason}"
    elif run.status == "memory":
        head = f"memory limit ({limits.memory_mb} MB): {run.reason}"
    elif not run.completed:
        head = f"{run.status.replace('_', ' ')}: {run.reason}"[:300]
    elif run.all_passed:
        return ""
    else:
        head = ""
    first = next((f"{t.name}: {t.reason}" for t in run.tests if not t.passed), "")
    tally = f"{run.passed}/{run.total} tests passed" + (f"; {first[:200]}" if first and run.completed else "")
    return f"{head}; {tally}" if head else tally


def _check_spec(spec: CodeTests, where: str) -> None:
    """Fail loudly, by name, on a malformed problem (dataset bugs are not model output)."""
    if not isinstance(spec, CodeTests):
        raise ValueError(f"code reward: {where} must be a CodeTests (got {type(spec).__name__})")
    tests, io_cases, entry_point, stdio_cases = spec.tests, spec.io_cases, spec.entry_point, spec.stdio_cases
    if stdio_cases is not None:
        if tests is not None or io_cases is not None:
            raise ValueError(f"code reward: {where} has 'stdio_cases' together with 'tests'/'io_cases' (use one)")
        try:
            stdio_pairs(stdio_cases)
        except ValueError as e:
            raise ValueError(f"code reward: {where} metadata {str(e).removeprefix('run_python: ')}") from None
        return
    if tests is None and io_cases is None:
        raise ValueError(f"code reward: {where} has neither 'tests', 'io_cases' nor 'stdio_cases' in its metadata")
    if tests is not None and not isinstance(tests, str):
        raise ValueError(f"code reward: {where} metadata 'tests' must be a string (got {type(tests).__name__})")
    if io_cases is not None:
        if not entry_point:
            raise ValueError(f"code reward: {where} has 'io_cases' but no 'entry_point'")
        if not isinstance(io_cases, (list, tuple)):
            raise ValueError(f"code reward: {where} metadata 'io_cases' must be a list (got {type(io_cases).__name__})")
        for k, case in enumerate(io_cases):
            if not (isinstance(case, (list, tuple)) and len(case) == 2 and isinstance(case[0], (list, tuple))):
                raise ValueError(f"code reward: {where} io_cases[{k}] must be [[args...], expected] (got {case!r:.80})")


def problem_spec(problem: Problem) -> CodeTests:
    """The `CodeTests` in ``problem.metadata``; ``ValueError`` naming the problem when malformed."""
    md = problem.metadata or {}
    ref = md.get("reference_time_s")
    if ref is not None and not (isinstance(ref, (int, float)) and math.isfinite(ref) and ref > 0):
        raise ValueError(f"code reward: problem {problem.uid!r} reference_time_s must be a positive number (got {ref!r})")
    spec = CodeTests(tests=md.get("tests"), io_cases=md.get("io_cases"), entry_point=md.get("entry_point"),
                     stdio_cases=md.get("stdio_cases"), reference_time_s=ref)
    _check_spec(spec, f"problem {problem.uid!r}")
    return spec


def score_code(code: str, tests: str | None = None, io_cases: list | None = None, entry_point: str | None = None,
               reference_time_s: float | None = None, reward: CodeExecutionReward | None = None,
               stdio_cases: list | None = None) -> RewardResult:
    """Score one completion (or bare program) with `CodeExecutionReward` (default weights unless given).

    >>> score_code("```python\\ndef add(a, b):\\n    return a + b\\n```",
    ...            io_cases=[[[1, 2], 3], [[2, 2], 4]], entry_point="add")
    RewardResult(score=1.0, reason='', parts={'syntax': 1.0, 'compiles': 1.0, 'functional': 1.0, 'timeout': 0.0, 'error': 0.0, 'memory': 0.0})
    >>> print(score_code("def add(a, b) return a + b", io_cases=[[[1, 2], 3]], entry_point="add").reason)
    syntax error line 1: expected ':'
    """
    spec = CodeTests(tests=tests, io_cases=io_cases, entry_point=entry_point, stdio_cases=stdio_cases,
                     reference_time_s=reference_time_s)
    return (reward or CodeExecutionReward()).score_many([code], [spec])[0]
