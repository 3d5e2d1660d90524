"""Held-out evaluation of a policy on a task: greedy accuracy, pass@k and maj@k.

* greedy accuracy — one temperature-0 completion per problem, verified by the task; ``eval/no_answer``
  is the share of those completions with no answer in the task's answer format
  (`seqrl.answers.ANSWER_FORMATS`);
* pass@k — from `n_samples` ≥ k sampled completions per problem with c correct, the unbiased
  estimator 1 − C(n−c, k)/C(n, k) averaged over problems;
* maj@k — the answer most of the first k samples commit to (ties: first seen), answers grouped by
  `seqrl.answers.answer_key` (``1,000`` and ``1000.0`` are one vote); correct when a completion giving
  that answer verifies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from seqrl.answers import answer_key
from seqrl.core.metrics import majority_vote, pass_at_k
from seqrl.types import Problem, Task

if TYPE_CHECKING:  # torch loads with the first evaluation, not with `EvalConfig` (a config is checked first)
    from seqrl.models.lm import Policy

_METRIC_RE = re.compile(r"^(greedy|pass@(\d+)|maj@(\d+))$")


def parse_metrics(spec: str) -> tuple[bool, list[int], list[int]]:
    """``"greedy,pass@8,maj@8"`` → (greedy?, pass ks, maj ks); unknown names are an error.

    >>> parse_metrics("greedy,pass@8,maj@4")
    (True, [8], [4])
    """
    greedy, passes, majs = False, [], []
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        m = _METRIC_RE.match(name)
        if not m or (m.group(2) or m.group(3) or "1") == "0":
            raise ValueError(f"unknown metric {name!r}; valid: greedy, pass@K, maj@K (K >= 1)")
        if name == "greedy":
            greedy = True
        elif m.group(2):
            passes.append(int(m.group(2)))
        else:
            majs.append(int(m.group(3)))
    return greedy, passes, majs


@dataclass
class EvalResult:
    metrics: dict[str, float]
    records: list[dict] = field(default_factory=list)
    """Per problem: prompt, answer, greedy completion/score/reason, sample scores."""


def _batched(items: list, size: int):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def evaluate(
    policy: Policy,
    task: Task,
    problems: list[Problem],
    *,
    greedy: bool = True,
    pass_k: tuple[int, ...] | list[int] = (),
    maj_k: tuple[int, ...] | list[int] = (),
    n_samples: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    batch_size: int = 256,
    seed: int = 0,
    stop: tuple[str, ...] | list[str] = (),
) -> EvalResult:
    """Evaluate `policy` on `problems` (metrics namespaced ``eval/…``); prompts rendered by the
    policy (`Policy.prompt`); `stop`: stop strings of every generation."""
    from seqrl.rollout import SamplingParams, generate

    if not problems:
        why = task.empty_split_reason("test") if hasattr(task, "empty_split_reason") else "the task's test split is empty"
        raise ValueError(f"no held-out problems to evaluate: {why}")
    want = max([*pass_k, *maj_k], default=0)
    n = max(n_samples, want)
    metrics: dict[str, float] = {}
    records = [{"prompt": p.prompt, "answer": p.answer} for p in problems]
    prompts = policy.encode_prompts(problems)

    if greedy:
        correct = lengths = truncated = no_answer = 0
        params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=tuple(stop))
        for start, chunk in zip(range(0, len(prompts), batch_size), _batched(prompts, batch_size)):
            ro = generate(policy, chunk, 1, params)
            for j, text in enumerate(ro.texts):
                rec, prob = records[start + j], problems[start + j]
                res = task.verify(prob, text)
                rec.update(greedy=text, score=res.score, reason=res.reason)
                correct += res.score >= 1.0
                truncated += ro.finish_reasons[j] == "length"
                no_answer += task.extract_answer(text) is None
            lengths += int(ro.lengths.sum())
        metrics["eval/accuracy"] = correct / len(problems)
        metrics["eval/no_answer"] = no_answer / len(problems)  # in the task's answer format
        metrics["eval/mean_length"] = lengths / len(problems)
        metrics["eval/truncated"] = truncated / len(problems)

    if n > 0:
        params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, stop=tuple(stop),
                                seed=seed)
        per_call = max(1, batch_size // n)
        pass_sum = {k: 0.0 for k in pass_k}
        maj_sum = {k: 0.0 for k in maj_k}
        for start, chunk in zip(range(0, len(prompts), per_call), _batched(prompts, per_call)):
            ro = generate(policy, chunk, n, params)
            for j in range(len(chunk)):
                prob, rec = problems[start + j], records[start + j]
                texts = ro.texts[j * n : (j + 1) * n]
                results = [task.verify(prob, t) for t in texts]
                scores = [r.score >= 1.0 for r in results]
                rec["sample_scores"] = [r.score for r in results]
                for k in pass_k:
                    pass_sum[k] += pass_at_k(n, sum(scores), k)
                answers = [task.extract_answer(t) for t in texts]
                keys = [answer_key(a) for a in answers]
                for k in maj_k:
                    winner, _ = majority_vote(answers[:k], key=answer_key)
                    won = answer_key(winner)
                    maj_sum[k] += any(a == won and s for a, s in zip(keys[:k], scores[:k])) if winner else 0
        metrics.update({f"eval/pass@{k}": v / len(problems) for k, v in pass_sum.items()})
        metrics.update({f"eval/maj@{k}": v / len(problems) for k, v in maj_sum.items()})
    return EvalResult(metrics, records)


@dataclass
class EvalConfig:
    """Held-out greedy evaluation during and after training."""

    every: int = 0
    """Steps between evaluations (0: only after the last step)."""
    max_new_tokens: int = 64
    """Generation cap for evaluation."""
    batch_size: int = 256
    """Prompts per generation call."""
    samples: int = 0
    """Also sample this many completions per problem at temperature 1 and report eval/pass@1
    (the held-out mean sampled reward); 0: greedy only."""
    temperature: float = 1.0
    """Temperature of those samples."""
    stop: list[str] = field(default_factory=list)
    """Stop strings (e.g. ["</answer>"]); empty: the trainer's sampling.stop where it has one."""

    def __post_init__(self) -> None:
        if any(not isinstance(x, str) or not x for x in self.stop):
            raise ValueError(f"eval.stop must be a list of non-empty strings (got {self.stop!r})")


def run_evaluation(policy: Policy, task, problems: list[Problem], cfg: EvalConfig, seed: int,
                   stop: list[str] | tuple[str, ...] = ()) -> dict[str, float]:
    """Held-out greedy accuracy, plus the mean sampled accuracy (pass@1) when cfg.samples > 0.
    stop: the trainer's sampling stop strings, used when cfg.stop is empty."""
    return evaluate(policy, task, problems, pass_k=[1] if cfg.samples else [], n_samples=cfg.samples,
                    temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size,
                    seed=seed, stop=list(cfg.stop) or list(stop)).metrics
