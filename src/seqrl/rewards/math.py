"""Math answer reward: find the final answer in a completion, check it with math-verify.

Extraction (`extract_final_answer`) looks, in order of priority, for

1. ``\\boxed{…}`` / ``\\fbox{…}`` (a brace counter handles nested and escaped braces; the last one),
2. ``<answer>…</answer>`` (the last block),
3. GSM8K's ``#### x`` (the last one),
4. "the answer is x" (case-insensitive, the last one, trailing period stripped),
5. the last number in the text — lenient mode only.

Strict mode takes only the place the prompt asked for (``where="answer_tag"`` or ``"boxed"``), with
no fallbacks. Hedging is never rewarded: several *different* boxed answers (or several different
``<answer>`` blocks) score 0 with ``"hedged: 3 different boxed answers"``; repeating the same
answer is fine. "Different" compares the text with spaces, ``$`` and a trailing period removed.

Verification is ``verify(parse(gold), parse(pred))`` (gold first: math-verify is not symmetric).
A bare answer is wrapped in ``$…$`` before parsing, so LaTeX such as ``\\frac{1}{2}``, ``2\\pi``
or ``10^{3}`` parses as LaTeX (bare, math-verify reads ``2\\pi`` as 2 and ``10^{3}`` as 10).

Threads: math-verify times out parse/verify with ``signal.alarm``, which only works in the main
thread (elsewhere it raises ValueError). Called from another thread, we pass
``parsing_timeout=None`` / ``timeout_seconds=None`` (no timeout at all) and rely on the
`MAX_ANSWER_CHARS` cap to keep parsing short; if you need a hard limit there, score in worker
processes. In the main thread, a SIGALRM timer the caller had set (pytest-timeout's signal method,
say) is re-armed after each call, since math-verify's ``alarm(0)`` would otherwise cancel it.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Literal

from seqrl.types import ANSWER_CLOSE, ANSWER_OPEN, Problem, RewardResult

Mode = Literal["strict", "lenient"]
Where = Literal["answer_tag", "boxed"]
MODES = ("strict", "lenient")
WHERES = ("answer_tag", "boxed")

MAX_ANSWER_CHARS = 500
"""Longer extracted answers are not parsed (math-verify's parser slows with size and nesting)."""

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_BARE_RE = re.compile(r"\\boxed +([^\s${}]+)")  # MATH-style "\boxed 5"
_GSM8K_RE = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS_RE = re.compile(r"the\s+(?:final\s+)?answer\s+is\s*:?[ \t]*([^\n]{0,200})", re.I)
_WORD_RE = re.compile(r"[^\W\d_]{2,}(?:[ '-][^\W\d_]+)*")  # "Paris", "New York": text, not maths
_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def find_boxed(text: str) -> list[str]:
    """Contents of every ``\\boxed{…}`` / ``\\fbox{…}`` with balanced braces, in order.

    ``\\{`` and ``\\}`` inside count as text, not braces; an unclosed box is skipped.

    >>> find_boxed(r"so \\boxed{\\frac{a}{b}} and \\fbox{\\{1,2\\}} but \\boxed{oops")
    ['\\\\frac{a}{b}', '\\\\{1,2\\\\}']
    """
    close = _matching_braces(text)
    found = [text[m.end():close[m.end() - 1]].strip() for m in _BOXED_RE.finditer(text) if m.end() - 1 in close]
    found += [m.group(1) for m in _BOXED_BARE_RE.finditer(text)] if not found else []
    return found


def _matching_braces(text: str) -> dict[int, int]:
    """Index of each ``{`` → index of its ``}``, in one pass (a backslash escapes the next character)."""
    close, stack, i, n = {}, [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            close[stack.pop()] = i
        i += 1
    return close


def _answer_blocks(text: str) -> list[str]:
    """Contents of the ``<answer>…</answer>`` blocks (like a lazy regex, but linear in the text)."""
    blocks, pos = [], 0
    while (start := text.find(ANSWER_OPEN, pos)) >= 0:
        end = text.find(ANSWER_CLOSE, start + len(ANSWER_OPEN))
        if end < 0:
            break
        blocks.append(text[start + len(ANSWER_OPEN):end])
        pos = end + len(ANSWER_CLOSE)
    return blocks


def _key(answer: str) -> str:
    """What two answers must share to count as the same answer when checking for hedging."""
    return re.sub(r"\s+|\$", "", answer).rstrip(".")


def _pick(candidates: list[str], what: str) -> tuple[str | None, str]:
    """The last candidate, or (None, "hedged: …") when they differ."""
    distinct = {_key(c) for c in candidates}
    if len(distinct) > 1:
        return None, f"hedged: {len(distinct)} different {what}"
    return candidates[-1], ""


def extract_final_answer(text: str, mode: Mode = "lenient", where: Where = "answer_tag") -> tuple[str | None, str]:
    """The completion's final answer and where it came from.

    Returns ``(answer, source)``; source is ``"boxed"``, ``"answer_tag"``, ``"gsm8k"``,
    ``"answer_is"`` or ``"last_number"``; when there is no usable answer, answer is None and
    source is ``"none"`` or a ``"hedged: …"`` message. ``where`` only matters in strict mode.

    >>> extract_final_answer(r"so \\boxed{\\frac{1}{2}}.")
    ('\\\\frac{1}{2}', 'boxed')
    >>> extract_final_answer("<think>6*12</think><answer> 72 </answer>")
    ('72', 'answer_tag')
    >>> extract_final_answer("6 * 12 = 72\\n#### 72")
    ('72', 'gsm8k')
    >>> extract_final_answer("So the answer is 7.")
    ('7', 'answer_is')
    >>> extract_final_answer("I think 3 or maybe 4"), extract_final_answer("I think 3 or maybe 4", "strict")
    (('4', 'last_number'), (None, 'none'))
    >>> extract_final_answer(r"\\boxed{1} \\boxed{2} \\boxed{3}")
    (None, 'hedged: 3 different boxed answers')
    """
    if not isinstance(text, str):
        return None, "none"
    if mode not in MODES:
        raise ValueError(f"math reward mode must be one of {MODES} (got {mode!r})")
    if where not in WHERES:
        raise ValueError(f"math reward where must be one of {WHERES} (got {where!r})")
    strict = mode == "strict"
    if not strict or where == "boxed":
        boxed = [b for b in find_boxed(text) if b]
        if boxed:
            answer, hedge = _pick(boxed, "boxed answers")
            return (answer, "boxed") if answer is not None else (None, hedge)
    if not strict or where == "answer_tag":
        tagged = [a.strip() for a in _answer_blocks(text)]
        tagged = [a for a in tagged if a]
        if tagged:
            answer, hedge = _pick(tagged, "<answer> blocks")
            return (answer, "answer_tag") if answer is not None else (None, hedge)
    if strict:
        return None, "none"
    gsm = [g.strip() for g in _GSM8K_RE.findall(text) if g.strip()]
    if gsm:
        return gsm[-1], "gsm8k"
    said = [_answer_is(s) for s in _ANSWER_IS_RE.findall(text)]
    said = [s for s in said if s]
    if said:
        return said[-1], "answer_is"
    numbers = _NUMBER_RE.findall(text)
    if numbers:
        return numbers[-1], "last_number"
    return None, "none"


def _answer_is(rest: str) -> str:
    """The sentence after "the answer is": cut at the first ". ", trailing period stripped."""
    rest = re.split(r"\.\s", rest, maxsplit=1)[0].strip()
    return rest[:-1].rstrip() if rest.endswith(".") else rest


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _keep_outer_alarm():
    """Re-arm a SIGALRM interval timer the caller had set; math-verify's ``alarm(0)`` cancels it."""
    remaining, interval = signal.getitimer(signal.ITIMER_REAL)
    start = time.monotonic()
    try:
        yield
    finally:
        if remaining > 0 and signal.getitimer(signal.ITIMER_REAL)[0] == 0:
            left = max(remaining - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def _parse(answer: str, timeout_s: int | None):
    """math-verify's parse of an answer, wrapped in ``$…$`` first when it has no ``$``.

    Empty unless something parsed to a sympy object (math-verify also returns the raw matched
    string as a fallback, which would make any junk "parse").
    """
    from math_verify import parse

    candidates = [answer, f"${answer.replace('$', '')}$"] if "$" in answer else [f"${answer}$", answer]
    for candidate in candidates:
        parsed = parse(candidate, parsing_timeout=timeout_s)
        if any(not isinstance(p, str) for p in parsed):
            return parsed
    return []


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def math_reward(pred_text: str, gold: str, mode: Mode = "lenient", where: Where = "answer_tag",
                timeout_s: int = 5) -> RewardResult:
    """1.0 when the completion's final answer equals ``gold`` by math-verify, else 0.0 with a reason.

    ``timeout_s`` is math-verify's per-call limit in the main thread (no limit in other threads,
    see the module docstring). ``parts``: ``extracted`` (1.0 when an answer was found) and
    ``equivalent`` (1.0 when it matched). Never raises on model output.

    >>> math_reward(r"<think>half</think><answer>\\frac{1}{2}</answer>", "0.5")
    RewardResult(score=1.0, reason='', parts={'extracted': 1.0, 'equivalent': 1.0})
    >>> math_reward("<answer>3</answer>", "4").reason
    'not equivalent: 3 vs 4'
    >>> math_reward("the total is 12", "12", mode="strict").reason
    'no answer found'
    >>> math_reward(r"\\boxed{12} or \\boxed{13}", "12").reason
    'hedged: 2 different boxed answers'
    """
    answer, source = extract_final_answer(pred_text, mode, where)
    if answer is None:
        reason = source if source.startswith("hedged") else "no answer found"
        return RewardResult(0.0, reason, {"extracted": 0.0, "equivalent": 0.0})
    parts = {"extracted": 1.0, "equivalent": 0.0}
    if len(answer) > MAX_ANSWER_CHARS:
        return RewardResult(0.0, f"unparseable answer: too long ({len(answer)} chars > {MAX_ANSWER_CHARS})", parts)
    gold = str(gold).strip()
    timeout = timeout_s if _in_main_thread() and timeout_s and timeout_s > 0 else None
    try:
        from math_verify import verify

        with _keep_outer_alarm() if timeout else _no_op():
            gold_parsed = [] if _WORD_RE.fullmatch(gold) else _parse(gold, timeout)
            pred_parsed = _parse(answer, timeout) if gold_parsed else []
            if not gold_parsed:  # words ("Paris" would parse as the product P·a·r·i·s) or junk: compare text
                equal = _key(gold).casefold() == _key(answer).casefold()
                if not equal:
                    return RewardResult(0.0, f"not equivalent: {_short(answer)} vs {_short(gold)} (as text)", parts)
            elif not pred_parsed:
                return RewardResult(0.0, f"unparseable answer: {_short(answer)}", parts)
            else:
                equal = bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    except BaseException as e:  # noqa: BLE001 — math-verify's own timeout, sympy recursion, anything
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return RewardResult(0.0, f"unparseable answer: {_short(answer)} ({type(e).__name__})", parts)
    if not equal:
        return RewardResult(0.0, f"not equivalent: {_short(answer)} vs {_short(gold)}", parts)
    return RewardResult(1.0, "", {"extracted": 1.0, "equivalent": 1.0})


@contextmanager
def _no_op():
    yield


def make_math_reward(mode: Mode = "strict", where: Where = "answer_tag") -> Callable[[list[Problem], list[str]], list[RewardResult]]:
    """A reward function ``(problems, completions) -> list[RewardResult]`` using ``problem.answer`` as gold.

    >>> fn = make_math_reward("lenient")
    >>> [r.score for r in fn([Problem("1+1?", "2")] * 2, ["it is 2", "it is 3"])]
    [1.0, 0.0]
    """
    if mode not in MODES:
        raise ValueError(f"math reward mode must be one of {MODES} (got {mode!r})")
    if where not in WHERES:
        raise ValueError(f"math reward where must be one of {WHERES} (got {where!r})")

    def reward(problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        return [math_reward(c, p.answer, mode=mode, where=where) for p, c in zip(problems, completions)]

    reward.__name__ = f"math_{mode}_{where}"
    return reward


def math_answer_reward(problems: list[Problem], completions: list[str]) -> list[RewardResult]:
    """The builtin "math" reward: strict mode on the house ``<answer>…</answer>`` tag.

    Strict because a training reward should pay only for the answer the format asks for, not for
    whatever number happens to come last.

    >>> [r.score for r in math_answer_reward([Problem("half?", "1/2")] * 3,
    ...     ["<answer>0.5</answer>", "<answer>\\\\frac{1}{2}</answer>", "so 1/2"])]
    [1.0, 1.0, 0.0]
    """
    return [math_reward(c, p.answer, mode="strict", where="answer_tag") for p, c in zip(problems, completions)]
