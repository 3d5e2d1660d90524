"""Automatic step labels (Math-Shepherd, Wang et al. 2024) from a policy's own solutions.

    seqrl data prm-labels --policy runs/sft/checkpoint-400 --task arith --n 4 --rollouts 8 --out labels.jsonl

For each problem the policy samples N solutions; for each step prefix s_1..s_t of a solution, K
completions continue from it (in the house format: after the last think step the prefix closes
``</think>``, `rollout_prefix`) and are verified against the gold answer:

    hard label  y_t = 1[any of the K completions is correct]        soft label  y_t = (# correct) / K

The final (answer) step needs no rollouts: its label is whether the solution itself verifies. All
prefixes of a round of problems go through the rollout engine in one call. Rows are appended to the
output (TRL's stepwise format, ``labels`` = soft or hard per ``--label``, plus ``hard``, ``soft``,
``problem`` and, on arithmetic, the exact ``truth``) as each round finishes, so an interrupted run
resumes where it stopped: problems already in the file are not recomputed. ``<out>.meta.json``
holds the settings, the generated-token cost and, on arithmetic, the labels' accuracy against the
exact step truth (`arith_step_truth`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Protocol

from seqrl.config import parse_json_object
from seqrl.data.stepwise import arith_step_truth, prefix_text, split_steps
from seqrl.models.lm import Policy
from seqrl.rollout import SamplingParams, generate
from seqrl.types import ANSWER_OPEN, STEP_SEP, THINK_CLOSE, THINK_OPEN, Problem, Task
from seqrl.utils.jsonl import jsonl_rows
from seqrl.utils.progress import progress_bar


class Continuer(Protocol):
    """Continues texts: `n` continuations of each (question, prefix) pair and the tokens generated."""

    def continue_texts(self, questions: list[str], prefixes: list[str], n: int, seed: int
                       ) -> tuple[list[list[str]], int]: ...


@dataclass
class PolicyContinuer:
    """A `Policy` through the rollout engine: the prefix follows the templated question; one call
    for all pairs. Pairs whose prompt leaves no room in the context get no continuations ([])."""

    policy: Policy
    temperature: float = 1.0
    max_new_tokens: int = 64

    def continue_texts(self, questions: list[str], prefixes: list[str], n: int, seed: int
                       ) -> tuple[list[list[str]], int]:
        tok, limit = self.policy.tokenizer, self.policy.max_seq_len
        cache: dict[str, list[int]] = {}
        ids = []
        for q, pre in zip(questions, prefixes):
            if q not in cache:
                cache[q] = self.policy.encode_prompts([q])[0]
            ids.append(cache[q] + (tok.encode(pre, add_special_tokens=False) if pre else []))
        fits = [i for i, x in enumerate(ids) if len(x) < limit]
        out: list[list[str]] = [[] for _ in ids]
        if not fits:
            return out, 0
        params = SamplingParams(temperature=self.temperature, max_new_tokens=self.max_new_tokens, seed=seed)
        ro = generate(self.policy, [ids[i] for i in fits], n, params)
        for j, i in enumerate(fits):
            out[i] = ro.texts[j * n:(j + 1) * n]
        return out, ro.num_generated_tokens


@dataclass
class LabelConfig:
    """How to label."""

    n: int = 4
    """Solutions sampled per problem (N)."""
    rollouts: int = 8
    """Completions per step prefix (K)."""
    temperature: float = 1.0
    """Sampling temperature of solutions and completions."""
    max_new_tokens: int = 64
    """Cap on each solution and completion."""
    problems_per_round: int = 8
    """Problems whose prefixes share one generation call (and one write to disk)."""
    label: Literal["soft", "hard"] = "soft"
    """Which label goes into the rows' ``labels`` field (both are written)."""
    seed: int = 0
    """Sampling seed (round r uses seed + r)."""

    def __post_init__(self) -> None:
        for name in ("n", "rollouts", "max_new_tokens", "problems_per_round"):
            if getattr(self, name) < 1:
                raise ValueError(f"prm-labels: {name} must be >= 1 (got {getattr(self, name)})")
        if self.label not in ("soft", "hard"):
            raise ValueError(f"prm-labels: label must be 'soft' or 'hard' (got {self.label!r})")


@dataclass
class LabelStats:
    problems_done: int = 0
    problems_skipped: int = 0
    """Problems found in the output already (a resumed run)."""
    rows: int = 0
    steps: int = 0
    generated_tokens: int = 0
    prefixes_too_long: int = 0
    """Step prefixes that left no room to generate in the policy's context (labelled by the
    solution's own outcome)."""
    truth_steps: int = 0
    hard_correct: int = 0
    soft_correct: int = 0
    hard_correct_prefix: int = 0
    soft_correct_prefix: int = 0
    seconds: float = 0.0

    @property
    def label_acc_hard(self) -> float | None:
        """Hard labels against the exact truth of each step on its own (`arith_step_truth`)."""
        return self.hard_correct / self.truth_steps if self.truth_steps else None

    @property
    def label_acc_soft(self) -> float | None:
        return self.soft_correct / self.truth_steps if self.truth_steps else None

    @property
    def label_acc_hard_prefix(self) -> float | None:
        """Hard labels against the prefix truth — a step is good iff it and every step before it are
        right — which is what a Math-Shepherd label estimates (can the solution still succeed from
        here); a right step after a wrong one is good by the step truth and bad by this one."""
        return self.hard_correct_prefix / self.truth_steps if self.truth_steps else None

    @property
    def label_acc_soft_prefix(self) -> float | None:
        return self.soft_correct_prefix / self.truth_steps if self.truth_steps else None

    def count(self, hard: list, soft: list[float], truth: list[bool]) -> None:
        """Add one labelled solution's agreement with its exact step truth."""
        prefix = list(itertools.accumulate(truth, lambda a, b: a and b))
        self.truth_steps += len(truth)
        self.hard_correct += sum(bool(h) == t for h, t in zip(hard, truth))
        self.soft_correct += sum((x >= 0.5) == t for x, t in zip(soft, truth))
        self.hard_correct_prefix += sum(bool(h) == t for h, t in zip(hard, prefix))
        self.soft_correct_prefix += sum((x >= 0.5) == t for x, t in zip(soft, prefix))

    def accuracies(self) -> dict[str, float | None]:
        return {k: getattr(self, k) for k in ("label_acc_hard", "label_acc_soft", "label_acc_hard_prefix",
                                              "label_acc_soft_prefix")}


def _read_done(out: Path, problems: list[Problem]) -> tuple[set[int], LabelStats]:
    """Problem indices already labelled in `out`, checked against `problems` (same prompts)."""
    done: set[int] = set()
    stats = LabelStats()
    if not out.exists():
        return done, stats
    for i, row in jsonl_rows(out.read_text(encoding="utf-8"), str(out)):
        try:
            k = int(row["problem"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{out} line {i}: not a prm-labels row (resume needs the 'problem' field); "
                             f"write to a new --out") from None
        if k >= len(problems) or problems[k].prompt != row.get("prompt"):
            raise ValueError(f"{out} line {i}: problem {k} does not match this task/split/seed "
                             f"({row.get('prompt')!r}); write to a new --out")
        done.add(k)
        stats.rows += 1
        stats.steps += len(row.get("hard", []))
        if "truth" in row:
            stats.count(row["hard"], row["soft"], row["truth"])
    return done, stats


def rollout_prefix(steps: list[str], t: int) -> str:
    """The text a rollout continues after think step `t` of a solution, in the house format: the
    separator after a step that another think step follows, ``</think>`` after the solution's last
    think step when an answer step follows it — a policy that learned the format then writes the
    answer, where after a separator it would invent one more step.

    >>> rollout_prefix(["7+5=12", "4+8+1=13", "<answer>132</answer>"], 0)
    '<think>7+5=12\\n\\n'
    >>> rollout_prefix(["7+5=12", "4+8+1=13", "<answer>132</answer>"], 1)
    '<think>7+5=12\\n\\n4+8+1=13</think>'
    >>> rollout_prefix(["7+5=12", "4+8+1=13"], 1)  # no answer step (cut off): another step may follow
    '<think>7+5=12\\n\\n4+8+1=13\\n\\n'
    """
    head = steps[: t + 1]
    answered = any(x.startswith(ANSWER_OPEN) for x in steps[t + 1:])
    last_think = all(x.startswith(ANSWER_OPEN) for x in steps[t + 1:])
    if answered and last_think:
        return f"{THINK_OPEN}{STEP_SEP.join(head)}{THINK_CLOSE}"
    return prefix_text(head)


def label_problems(policy: Policy | Continuer, task: Task, problems: list[Problem], cfg: LabelConfig,
                   out: str | Path, progress: bool = True, exact_truth: bool | None = None) -> LabelStats:
    """Label `problems` into `out` (appending; problems already there are skipped) and write
    ``<out>.meta.json``. `policy` is a `Policy` (sampled through the rollout engine) or any
    `Continuer`. exact_truth: compare with `arith_step_truth` (default: when the task's name starts
    with ``arith``)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(policy, Policy):
        policy = PolicyContinuer(policy, cfg.temperature, cfg.max_new_tokens)
    exact = task.name.startswith("arith") if exact_truth is None else exact_truth
    done, stats = _read_done(out, problems)
    meta_file = out.with_name(out.name + ".meta.json")
    if meta_file.exists():
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        stats.generated_tokens = int(meta.get("generated_tokens", 0))
        done |= {k for k in meta.get("done", []) if k < len(problems)}  # also those that gave no row
    stats.problems_skipped = len(done)
    todo = [k for k in range(len(problems)) if k not in done]
    t0 = time.perf_counter()
    with progress_bar(len(problems), f"prm-labels {out.name}", disable=not progress) as bar:
        bar.advance(len(done))
        for start in range(0, len(todo), cfg.problems_per_round):
            round_ids = todo[start:start + cfg.problems_per_round]
            seed = cfg.seed + round_ids[0]  # a function of the problems, not of how many were done before
            chunk = [problems[k] for k in round_ids]
            sols, tokens = policy.continue_texts([p.prompt for p in chunk], [""] * len(chunk), cfg.n, seed)
            stats.generated_tokens += tokens

            # every step prefix (except the answer step) of every solution, in one rollout call
            solutions = []  # (problem j, steps, outcome)
            questions, prefixes, owners = [], [], []  # owners: (solution index, step index)
            for j, texts in enumerate(sols):
                for text in texts:
                    steps = split_steps(text)
                    if not steps:
                        continue
                    solutions.append((j, steps, task.verify(chunk[j], text).correct))
                    for t in range(len(steps)):
                        if not steps[t].startswith(ANSWER_OPEN):
                            questions.append(chunk[j].prompt)
                            prefixes.append(rollout_prefix(steps, t))
                            owners.append((len(solutions) - 1, t))
            correct: dict[tuple[int, int], int] = {}
            if prefixes:
                conts, tokens = policy.continue_texts(questions, prefixes, cfg.rollouts, seed + 1)
                stats.generated_tokens += tokens
                for (s, t), head, texts in zip(owners, prefixes, conts):
                    if not texts:
                        stats.prefixes_too_long += 1
                        continue
                    j = solutions[s][0]
                    correct[(s, t)] = sum(task.verify(chunk[j], head + c).correct for c in texts)

            rows = []
            for s, (j, steps, outcome) in enumerate(solutions):
                soft = [correct[(s, t)] / cfg.rollouts if (s, t) in correct else float(outcome)
                        for t in range(len(steps))]
                hard = [x > 0 for x in soft]
                row = {"prompt": chunk[j].prompt, "completions": steps,
                       "labels": soft if cfg.label == "soft" else hard,
                       "hard": hard, "soft": soft, "problem": round_ids[j], "outcome": outcome}
                if exact:
                    truth = arith_step_truth(chunk[j], steps)
                    row["truth"] = truth
                    stats.count(hard, soft, truth)
                stats.steps += len(steps)
                rows.append(row)
            with open(out, "a", encoding="utf-8") as f:  # a round is on disk before the next starts
                f.writelines(json.dumps(row) + "\n" for row in rows)
            stats.rows += len(rows)
            stats.problems_done += len(round_ids)
            done.update(round_ids)
            _write_meta(meta_file, cfg, task, stats, done)
            bar.advance(len(round_ids), rows=stats.rows, acc_hard=stats.label_acc_hard or 0.0)
    stats.seconds = time.perf_counter() - t0
    _write_meta(meta_file, cfg, task, stats, done)
    return stats


def _write_meta(path: Path, cfg: LabelConfig, task: Task, stats: LabelStats, done: set[int]) -> None:
    data = {"config": asdict(cfg), "task": task.name, **asdict(stats), "done": sorted(done), **stats.accuracies()}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(path)


def cli_main(argv: list[str]) -> int:
    """``seqrl data prm-labels`` (see the module docstring)."""
    p = argparse.ArgumentParser(prog="seqrl data prm-labels", description="Math-Shepherd step labels from a policy")
    p.add_argument("--policy", required=True, help="a causal-LM folder (e.g. runs/sft/checkpoint-400)")
    p.add_argument("--task", default="arith")
    p.add_argument("--task-kwargs", default="{}", help='JSON, e.g. \'{"digits": 3}\'')
    p.add_argument("--split", default="train", choices=("train", "test"))
    p.add_argument("--problems", type=int, default=100, help="problems to label")
    p.add_argument("--n", type=int, default=4, help="solutions per problem (N)")
    p.add_argument("--rollouts", type=int, default=8, help="completions per step prefix (K)")
    p.add_argument("--label", default="soft", choices=("soft", "hard"))
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--problems-per-round", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="stepwise JSONL (appended to; an existing file resumes)")
    args = p.parse_args(argv)
    import torch

    from seqrl.data import get_task
    from seqrl.models.lm import ModelConfig, load_policy
    from seqrl.prompts import saved_prompt

    torch.set_num_threads(max(1, args.threads))
    kwargs = parse_json_object(args.task_kwargs, "--task-kwargs")
    if args.problems < 1:
        raise ValueError(f"--problems must be >= 1 (got {args.problems})")
    task = get_task(args.task, **kwargs)
    cfg = LabelConfig(n=args.n, rollouts=args.rollouts, temperature=args.temperature,
                      max_new_tokens=args.max_new_tokens, problems_per_round=args.problems_per_round,
                      label=args.label, seed=args.seed)
    policy = load_policy(ModelConfig(path=args.policy))
    policy.prompt = saved_prompt(args.policy)  # asked as the run that wrote it was trained
    problems = task.problems(args.split, args.problems, args.seed)
    stats = label_problems(policy, task, problems, cfg, args.out)
    print(json.dumps({"out": args.out, **asdict(stats), **stats.accuracies()}))
    return 0
