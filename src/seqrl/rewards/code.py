"""Multi-level code reward: syntax → compiles → tests passed in the sandbox, with penalties.

A completion is scored in levels, cheapest first:

1. **extract** the program (`extract_code`): the last fenced ```` ```python ```` block (any fenced
   block when none is tagged python; an unclosed final fence runs to the end), else the last
   ``<answer>…</answer>`` block, else the whole text minus ``<think>…</think>``. Never raises.
2. **syntax** — ``ast.parse`` in this process (parsing executes nothing): 1 or 0.
3. **compiles** — ``compile(tree)`` (no ``exec``; catches ``return`` outside a function, ``nonlocal``
   at module level …): 1 or 0. A program that fails 2 or 3 never reaches the sandbox.
4. **functional** — ``passed / total`` from :func:`seqrl.sandbox.run_python` (unforgeable per-test
   verdicts; records received before a timeout count).
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
from dataclasses import dataclass

from seqrl.data.base import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN, Problem
from seqrl.rewards.base import RewardResult
from seqrl.sandbox import SandboxResult, run_many
from seqrl.sandbox.runner import _stdio_pairs

_FENCE_LANG_RE = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_PY_LANGS = ("python", "py", "python3", "py3")
RUFF_TIMEOUT_S = 10.0


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
    timeout_s: float = 2.0
    """Sandbox wall-clock limit per program."""
    memory_mb: int = 256
    """Sandbox RLIMIT_AS per process."""
    max_workers: int = 2
    """Sandboxed programs run at once when scoring a batch."""
    allow_unconfined: bool = False
    """Run with rlimits only when the sandbox namespaces are unavailable (else SandboxUnavailable)."""
    extract: bool = True
    """Extract the program from the completion (`extract_code`); False: the text is the program."""
    ruff: str | None = None
    """Path of the ruff executable (default: ``ruff`` on PATH)."""

    def __post_init__(self) -> None:
        if self.max_workers < 1:
            raise ValueError(f"code reward: max_workers must be >= 1 (got {self.max_workers})")
        if self.timeout_s <= 0:
            raise ValueError(f"code reward: timeout_s must be > 0 (got {self.timeout_s})")
        if self.min_score > self.max_score:
            raise ValueError(f"code reward: min_score must be <= max_score (got {self.min_score} > {self.max_score})")
        if self.style_max_findings < 1:
            raise ValueError(f"code reward: style_max_findings must be >= 1 (got {self.style_max_findings})")
        self.__name__ = "code_execution"

    # ------------------------------------------------------------------ reward-function interface
    def __call__(self, problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        if len(problems) != len(completions):
            raise ValueError(f"code reward: {len(problems)} problems for {len(completions)} completions")
        items = [(c, *problem_spec(p)) for p, c in zip(problems, completions)]
        return self.score_many(items)

    def score_many(self, items: list[tuple]) -> list[RewardResult]:
        """Score ``(completion, tests, io_cases, entry_point, reference_time_s[, stdio_cases])`` items,
        in order.

        Programs that parse and compile run through `run_many` (``max_workers`` at once); the rest
        never reach the sandbox."""
        static, jobs, job_of = [], [], {}
        for i, item in enumerate(items):
            text, tests, io_cases, entry_point, _ref = item[:5]
            stdio = item[5] if len(item) > 5 else None
            _check_spec(tests, io_cases, entry_point, f"item {i}", stdio)
            code = extract_code(text)[0] if self.extract else (text if isinstance(text, str) else "")
            syn, comp, why = check_static(code)
            static.append((code, syn, comp, why))
            if comp:
                job_of[i] = len(jobs)
                spec = dict(stdio_cases=stdio) if stdio is not None else \
                    dict(tests=tests, io_cases=io_cases, entry_point=entry_point)
                jobs.append(dict(solution=code, **spec, timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                                 allow_unconfined=self.allow_unconfined))
        results = run_many(jobs, self.max_workers) if jobs else []
        out = []
        for i, (code, syn, comp, why) in enumerate(static):
            run = results[job_of[i]] if i in job_of else None
            out.append(self._score(code, syn, comp, why, run, items[i][4]))
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
            parts["error"] = float(run.status in ("runtime_error", "killed", "syntax_error"))
            parts["memory"] = float(run.status == "memory")
            reasons.append(_run_reason(run, self.timeout_s, self.memory_mb))
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


def _run_reason(run: SandboxResult, timeout_s: float, memory_mb: int) -> str:
    """Why a sandboxed run fell short ("" when every test passed)."""
    if run.status == "timeout":
        head = f"timeout after {timeout_s} s" if run.reason == "wall-clock timeout" else f"timeout: {run.reason}"
    elif run.status == "memory":
        head = f"memory limit ({memory_mb} MB): {run.reason}"
    elif run.status != "ok":
        head = f"{run.status.replace('_', ' ')}: {run.reason}"[:300]
    elif run.all_passed:
        return ""
    else:
        head = ""
    first = next((f"{t.name}: {t.reason}" for t in run.tests if not t.passed), "")
    tally = f"{run.passed}/{run.total} tests passed" + (f"; {first[:200]}" if first and run.status == "ok" else "")
    return f"{head}; {tally}" if head else tally


def _check_spec(tests, io_cases, entry_point, where: str, stdio_cases=None) -> None:
    """Fail loudly, by name, on a malformed problem (dataset bugs are not model output)."""
    if stdio_cases is not None:
        if tests is not None or io_cases is not None:
            raise ValueError(f"code reward: {where} has 'stdio_cases' together with 'tests'/'io_cases' (use one)")
        try:
            _stdio_pairs(stdio_cases)
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


def problem_spec(problem: Problem) -> tuple:
    """``(tests, io_cases, entry_point, reference_time_s, stdio_cases)`` from ``problem.metadata``."""
    md = problem.metadata or {}
    ref = md.get("reference_time_s")
    if ref is not None and not (isinstance(ref, (int, float)) and math.isfinite(ref) and ref > 0):
        raise ValueError(f"code reward: problem {problem.uid!r} reference_time_s must be a positive number (got {ref!r})")
    spec = (md.get("tests"), md.get("io_cases"), md.get("entry_point"), ref, md.get("stdio_cases"))
    _check_spec(*spec[:3], f"problem {problem.uid!r}", spec[4])
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
    item = (code, tests, io_cases, entry_point, reference_time_s, stdio_cases)
    return (reward or CodeExecutionReward()).score_many([item])[0]
