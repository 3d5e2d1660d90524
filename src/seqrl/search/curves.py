"""Accuracy-vs-N curves of best-of-N selection rules, with their token cost (`seqrl search bon`).

    seqrl search bon --policy runs/sft/checkpoint-400 --scorer prm:runs/prm/checkpoint-300,orm:runs/orm/checkpoint-300 \\
        --task arith --budget 1,2,4,8,16,32,64 --seeds 0,1,2 --out runs/bon

For each seed, max(budget) samples per held-out problem are drawn once and every scorer scores them
once; the curve at N uses the first N samples of each problem (so the curves of one seed are nested,
as in search-and-learn). Rules: first, majority, and for each scorer <name>_max and <name>_weighted;
``oracle`` is pass@N (any of the N samples verifies). Cost at N: generated tokens and each scorer's
tokens for N samples per problem (the seed's totals × N / max N: the samples are i.i.d.).
Writes ``bon.json``, ``bon.png`` and ``bon.md`` into the output folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from seqrl.config import parse_json_object
from seqrl.search.best_of_n import Account, Sampler, Scorer, best_of_n, choose, scored_solutions
from seqrl.types import Problem, Task


def bon_curves(problems: Sequence[Problem], make_sampler: Callable[[int], Sampler], scorers: dict[str, Scorer],
               task: Task, budgets: Sequence[int], seeds: Sequence[int], aggregation: str = "last",
               progress: bool = False) -> dict:
    """Accuracy at each N of every rule, mean and per seed, plus costs (see the module docstring);
    `progress`: a bar over the seeds."""
    from seqrl.utils.progress import progress_bar

    with progress_bar(len(seeds), "search bon", disable=not progress) as bar:
        return _bon_curves(problems, make_sampler, scorers, task, budgets, seeds, aggregation, bar)


def _bon_curves(problems, make_sampler, scorers, task, budgets, seeds, aggregation, bar) -> dict:
    budgets = sorted(set(budgets))
    if not budgets or budgets[0] < 1:
        raise ValueError(f"budget must be positive integers (got {list(budgets)})")
    n_max = budgets[-1]
    per_seed: dict[str, list[list[float]]] = {}
    cost = {"generated_tokens": [], **{f"{name}_tokens": [] for name in scorers}}
    seconds = {"gen_s": 0.0, "score_s": 0.0, "other_s": 0.0}
    for seed in seeds:
        t0 = time.perf_counter()
        run = best_of_n(problems, make_sampler(seed), n_max, task=task)
        seconds["gen_s"] += run.account.gen_s
        cost["generated_tokens"].append(run.account.generated_tokens)
        correct = [[task.verify(p, s).correct for s in c] for p, c in zip(problems, run.candidates)]
        scored: dict[str, list[list[float]]] = {}
        t_score = 0.0
        for name, scorer in scorers.items():
            t = time.perf_counter()
            account = Account()
            values = scored_solutions(scorer, [p for p in problems for _ in range(n_max)],
                                      [s for c in run.candidates for s in c], aggregation, account)
            cost[f"{name}_tokens"].append(account.scorer_tokens)
            scored[name] = [values[i * n_max:(i + 1) * n_max] for i in range(len(problems))]
            t_score += time.perf_counter() - t
        seconds["score_s"] += t_score
        rules: dict[str, Callable[[int, int], bool]] = {
            "first": lambda i, n: correct[i][0],
            "majority": lambda i, n: correct[i][choose(run.answers[i][:n], None, "majority")],
            "oracle": lambda i, n: any(correct[i][:n]),
        }
        for name in scorers:
            for rule in ("max", "weighted"):
                rules[f"{name}_{rule}"] = (lambda i, n, name=name, rule=rule:
                                           correct[i][choose(run.answers[i][:n], scored[name][i][:n], rule)])
        for rule, fn in rules.items():
            per_seed.setdefault(rule, []).append(
                [sum(fn(i, n) for i in range(len(problems))) / len(problems) for n in budgets])
        seconds["other_s"] += time.perf_counter() - t0 - run.account.gen_s - t_score
        bar.advance(1)
    mean = {rule: [statistics.fmean(col) for col in zip(*rows)] for rule, rows in per_seed.items()}
    std = {rule: [statistics.pstdev(col) for col in zip(*rows)] for rule, rows in per_seed.items()}
    cost_at = {k: [statistics.fmean(v) * n / n_max for n in budgets] for k, v in cost.items()}
    return {"budgets": budgets, "seeds": list(seeds), "problems": len(problems), "aggregation": aggregation,
            "accuracy": mean, "accuracy_std": std, "accuracy_per_seed": per_seed, "cost_at_n": cost_at,
            "seconds": seconds}


def output_folder(out: str | None, default: str, result_file: str, force: bool) -> Path:
    """Where a search command writes: `out`, else `default` under ``runs/search``; a folder that holds
    an earlier result (`result_file`) is refused unless `force` (a result is never overwritten silently)."""
    from seqrl.config import ConfigError

    folder = Path(out) if out else Path("runs") / "search" / default
    if (folder / result_file).exists() and not force:
        raise ConfigError(f"{folder} already holds {result_file} from an earlier search; pass --force to replace "
                          f"it or another --out")
    return folder


def write_outputs(result: dict, out: Path, title: str) -> None:
    """bon.json, bon.md (a table: rules × N, mean ± std over seeds) and bon.png."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "bon.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    budgets = result["budgets"]
    lines = [f"# {title}", "", f"{result['problems']} problems, seeds {result['seeds']}, aggregation "
             f"{result['aggregation']}; accuracy mean ± std over seeds", "",
             "| rule | " + " | ".join(f"N={n}" for n in budgets) + " |", "|---|" + "---|" * len(budgets)]
    for rule, values in result["accuracy"].items():
        std = result["accuracy_std"][rule]
        lines.append(f"| {rule} | " + " | ".join(f"{v:.3f} ± {s:.3f}" for v, s in zip(values, std)) + " |")
    lines += ["", "| cost | " + " | ".join(f"N={n}" for n in budgets) + " |", "|---|" + "---|" * len(budgets)]
    for key, values in result["cost_at_n"].items():
        lines.append(f"| {key} | " + " | ".join(f"{v:,.0f}" for v in values) + " |")
    (out / "bon.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for rule, values in result["accuracy"].items():
        ax.plot(budgets, values, marker="o", label=rule, linestyle="--" if rule == "oracle" else "-")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (samples per problem)")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "bon.png", dpi=120)
    plt.close(fig)


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected comma-separated integers") from None
    if not values:
        raise ValueError(f"{flag}: give at least one value")
    return values


def cli_main(argv: list[str]) -> int:
    """``seqrl search bon`` (see the module docstring)."""
    p = argparse.ArgumentParser(prog="seqrl search bon", description="best-of-N accuracy vs N per selection rule")
    p.add_argument("--policy", required=True, help="a causal-LM folder, or simulated:P (arith: step error rate P)")
    p.add_argument("--scorer", default="none", help="comma list of prm:CKPT, orm:CKPT, oracle, none")
    p.add_argument("--task", default="arith")
    p.add_argument("--task-kwargs", default="{}", help='JSON, e.g. \'{"digits": 3}\'')
    p.add_argument("--split", default="test", choices=("train", "test"))
    p.add_argument("--problems", type=int, default=100)
    p.add_argument("--budget", default="1,2,4,8,16,32,64")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--aggregation", default="last", choices=("min", "last", "prod", "mean"))
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="output folder (bon.json, bon.png, bon.md; default runs/search/bon_TASK)")
    p.add_argument("--force", action="store_true", help="replace an earlier result in --out")
    args = p.parse_args(argv)
    out = output_folder(args.out, f"bon_{args.task.split(':')[0]}", "bon.json", args.force)
    import torch

    from seqrl.data import get_task
    from seqrl.models.lm import ModelConfig, load_policy
    from seqrl.prompts import saved_prompt
    from seqrl.models.prm import ProcessRewardModel
    from seqrl.rollout import SamplingParams
    from seqrl.search.best_of_n import PolicySampler, VerifierScorer
    from seqrl.search.simulated import NoisyArithmeticPolicy

    torch.set_num_threads(max(1, args.threads))
    kwargs = parse_json_object(args.task_kwargs, "--task-kwargs")
    task = get_task(args.task, **kwargs)
    budgets, seeds = _ints(args.budget, "--budget"), _ints(args.seeds, "--seeds")
    scorers: dict[str, Scorer] = {}
    for spec in (s.strip() for s in args.scorer.split(",") if s.strip()):
        kind, _, path = spec.partition(":")
        if kind == "none":
            continue
        if kind == "oracle":
            scorers["oracle_verifier"] = VerifierScorer(task)
        elif kind in ("prm", "orm") and path:
            scorers[kind] = ProcessRewardModel.load(path)
        else:
            raise ValueError(f"--scorer {spec!r}: expected prm:CKPT, orm:CKPT, oracle or none")
    if args.policy.startswith("simulated"):
        rate = float(args.policy.partition(":")[2] or 0.2)
        make = lambda seed: _Seeded(NoisyArithmeticPolicy(step_error=rate), seed)  # noqa: E731
    else:
        policy = load_policy(ModelConfig(path=args.policy))
        policy.prompt = saved_prompt(args.policy)  # asked as the run that wrote it was trained
        make = lambda seed: PolicySampler(policy, SamplingParams(  # noqa: E731
            temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=seed))
    problems = task.problems(args.split, args.problems, 0)
    result = bon_curves(problems, make, scorers, task, budgets, seeds, args.aggregation, progress=True)
    result.update(policy=args.policy, scorer=args.scorer, task=args.task)
    write_outputs(result, out, f"best-of-N on {args.task} ({args.policy})")
    print((out / "bon.md").read_text(encoding="utf-8"))
    print(f"wrote {out / 'bon.json'}, {out / 'bon.md'}, {out / 'bon.png'}")
    return 0


class _Seeded:
    """A simulated policy sampled with a fixed seed."""

    def __init__(self, policy, seed: int):
        self.policy, self.seed = policy, seed

    def sample(self, problems, n):
        return self.policy.sample(problems, n, seed=self.seed)
