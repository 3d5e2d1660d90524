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

from collections.abc import Callable

from seqrl.answers import (  # noqa: F401 — the extraction lives in seqrl.answers; re-exported here
    MAX_ANSWER_CHARS,
    MODES,
    WHERES,
    Mode,
    Where,
    compare_answers,
    extract_final_answer,
    find_boxed,
    has_unclosed_box,
)
from seqrl.types import Problem, RewardResult

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
