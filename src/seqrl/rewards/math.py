"""Math answer reward: find the final answer in a completion, check it with math-verify.

Extraction (`extract_final_answer`) looks for

1. ``\\boxed{…}`` / ``\\fbox{…}`` (a brace counter handles nested and escaped braces; a box
   inside a box is one answer; any unclosed box makes the answer malformed: it earns nothing),
2. ``<answer>…</answer>`` (the last block),
3. GSM8K's ``#### x`` (the last one),
4. "the answer is x" (case-insensitive, the last one, trailing period stripped),
5. the last number in the text — lenient mode only, and only when 1–4 found nothing.

In lenient mode, when several of 1–4 are present, the one stated last wins (a text that states an
answer and then corrects it is scored on the correction). Strict mode takes only the place the
prompt asked for (``where="answer_tag"`` or ``"boxed"``), with no fallbacks. Hedging is never
rewarded: several *different* boxed answers (or several different ``<answer>`` blocks) score 0
with ``"hedged: 3 different boxed answers"``; repeating the same answer is fine. "Different"
compares the text with spaces, ``$`` and a trailing period removed. All extraction is linear in
the text.

Comparison is `seqrl.answers.compare_answers` (shared with the task verifiers): guards
before parsing, hedges and equations, then exact numbers or math-verify with its signal timeouts
off, so the verdict is the same in any thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from seqrl.answers import MAX_ANSWER_CHARS, compare_answers  # noqa: F401 — MAX_ANSWER_CHARS re-exported
from seqrl.types import ANSWER_CLOSE, ANSWER_OPEN, Problem, RewardResult

Mode = Literal["strict", "lenient"]
Where = Literal["answer_tag", "boxed"]
MODES = ("strict", "lenient")
WHERES = ("answer_tag", "boxed")

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_BARE_RE = re.compile(r"\\boxed +([^\s${}]+)")  # MATH-style "\boxed 5"
_GSM8K_RE = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS_RE = re.compile(r"the[ \t]+(?:final[ \t]+)?answer[ \t]+is[ \t]*:?[ \t]*", re.I)
_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def find_boxed(text: str) -> list[str]:
    """Contents of every outermost ``\\boxed{…}`` / ``\\fbox{…}`` with balanced braces, in order.

    A box inside a box is one answer (``\\boxed{\\boxed{x}}`` → ``x``); ``\\{`` and ``\\}``
    count as text, not braces; an unclosed box is skipped (see `has_unclosed_box`). One pass over
    the text: nested boxes are not copied out one by one.

    >>> find_boxed(r"so \\boxed{\\frac{a}{b}} and \\fbox{\\{1,2\\}} but \\boxed{oops")
    ['\\\\frac{a}{b}', '\\\\{1,2\\\\}']
    >>> find_boxed(r"\\boxed{ \\boxed{\\boxed{7}} }")
    ['7']
    """
    close = _matching_braces(text)
    found, after = [], 0
    for m in _BOXED_RE.finditer(text):
        if m.start() < after or m.end() - 1 not in close:
            continue  # inside an earlier box, or unclosed
        start, end = m.end(), close[m.end() - 1]
        after = end
        while True:  # unwrap boxes that are the whole content: \boxed{\boxed{x}} is x
            while start < end and text[start].isspace():
                start += 1
            inner = _BOXED_RE.match(text, start)
            stop = end
            while stop > start and text[stop - 1].isspace():
                stop -= 1
            if not inner or close.get(inner.end() - 1) != stop - 1:
                break
            start, end = inner.end(), stop - 1
        found.append(text[start:end].strip())
    if not found and not has_unclosed_box(text, close):
        found = [m.group(1) for m in _BOXED_BARE_RE.finditer(text)]
    return found


def has_unclosed_box(text: str, close: dict[int, int] | None = None) -> bool:
    """Whether some ``\\boxed{`` / ``\\fbox{`` never closes (a malformed answer).

    >>> has_unclosed_box(r"\\boxed{5"), has_unclosed_box(r"\\boxed{5}")
    (True, False)
    """
    close = _matching_braces(text) if close is None else close
    return any(m.end() - 1 not in close for m in _BOXED_RE.finditer(text))


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
    found: list[tuple[int, str, str]] = []  # (where the statement ends, answer, source)
    if not strict or where == "boxed":
        close = _matching_braces(text)
        if has_unclosed_box(text, close):
            return None, "malformed: unclosed \\boxed{"
        boxed = [b for b in find_boxed(text) if b]
        if boxed:
            answer, hedge = _pick(boxed, "boxed answers")
            if answer is None:
                return None, hedge
            found.append((_last_box_end(text), answer, "boxed"))
    if not strict or where == "answer_tag":
        tagged = [a.strip() for a in _answer_blocks(text)]
        tagged = [a for a in tagged if a]
        if tagged:
            answer, hedge = _pick(tagged, "<answer> blocks")
            if answer is None:
                return None, hedge
            found.append((text.rfind(ANSWER_CLOSE), answer, "answer_tag"))
    if not strict:
        gsm = [(m.start(), m.group(1).strip()) for m in _GSM8K_RE.finditer(text) if m.group(1).strip()]
        if gsm:
            found.append((*gsm[-1], "gsm8k"))
        said = _last_answer_is(text)
        if said is not None:
            found.append((*said, "answer_is"))
    if found:  # a text that states an answer and later corrects it is scored on the last statement
        _, answer, source = max(found, key=lambda f: f[0])
        return answer, source
    if not strict:
        last = None
        for last in _NUMBER_RE.finditer(text):
            pass
        if last is not None:
            return last.group(0), "last_number"
    return None, "none"


def _last_box_end(text: str) -> int:
    last = None
    for last in _BOXED_RE.finditer(text):
        pass
    return last.start() if last is not None else -1


def _last_answer_is(text: str) -> tuple[int, str] | None:
    """Position and sentence of the last "the answer is …" (the anchor is found in one pass)."""
    last = None
    for last in _ANSWER_IS_RE.finditer(text):
        pass
    if last is None:
        return None
    answer = _answer_is(text[last.end():last.end() + 200].split("\n", 1)[0])
    return (last.start(), answer) if answer else None


def _answer_is(rest: str) -> str:
    """The sentence after "the answer is": cut at the first ". ", trailing period stripped."""
    rest = re.split(r"\.\s", rest, maxsplit=1)[0].strip()
    return rest[:-1].rstrip() if rest.endswith(".") else rest


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def math_reward(pred_text: str, gold: str, mode: Mode = "lenient", where: Where = "answer_tag") -> RewardResult:
    """1.0 when the completion's final answer equals ``gold`` (`compare_answers`), else 0.0 with a reason.

    ``parts``: ``extracted`` (1.0 when an answer was found) and ``equivalent`` (1.0 when it
    matched). Never raises on model output; no signal timers (same verdict in any thread): cost is
    bounded by the guards in `seqrl.answers` and by the caller's per-call time limit.

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
        reason = source if source.startswith(("hedged", "malformed")) else "no answer found"
        return RewardResult(0.0, reason, {"extracted": 0.0, "equivalent": 0.0})
    parts = {"extracted": 1.0, "equivalent": 0.0}
    equal, why = compare_answers(str(gold), answer)
    if not equal:
        for head in ("not equivalent", "unparseable answer"):
            if why.startswith(head):
                detail = f" vs {_short(str(gold).strip())}" if head == "not equivalent" else ""
                why = f"{head}: {_short(answer)}{detail}{why[len(head):]}"
        return RewardResult(0.0, why, parts)
    return RewardResult(1.0, "", {"extracted": 1.0, "equivalent": 1.0})


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
