"""Step search against best-of-N at equal compute (`seqrl search beam|dvts|mcts`).

    seqrl search beam --policy runs/sft/checkpoint-400 --scorer prm:runs/prm/checkpoint-300 \\
        --task arith --budget 4,8,16 --beam-width 4 --seeds 0,1,2 --out runs/search-beam

For each seed and budget N (beams for beam/DVTS, simulations for MCTS) the method runs on the held-out
problems, and best-of-N with the same scorer (weighted vote) and majority vote run at the same N.
Every row records accuracy and the generated and scorer tokens it cost, so the curves are drawn
against generated tokens (the one budget). ``--difficulty-bins K`` splits the problems into K bins by
the policy's own pass@1 (estimated from best-of-N's samples at the largest N, as Snell et al. 2024)
and reports accuracy per bin. Writes ``search.json``, ``search.png`` and ``search.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from seqrl.config import parse_json_object
from seqrl.search.best_of_n import Scorer, best_of_n
from seqrl.search.mcts import mcts
from seqrl.search.steps import PolicyStepper
from seqrl.search.tree import tree_search
from seqrl.types import Problem, Task

METHODS = ("beam", "dvts", "mcts")


def _bins(pass1: Sequence[float], k: int) -> list[int]:
    """Bin of each problem: quantiles of its pass@1, 0 = hardest.

    >>> _bins([0.9, 0.1, 0.5, 0.3], 2)
    [1, 0, 1, 0]
    """
    order = sorted(range(len(pass1)), key=lambda i: (pass1[i], i))
    out = [0] * len(pass1)
    for rank, i in enumerate(order):
        out[i] = min(k - 1, rank * k // max(len(pass1), 1))
    return out


def search_curves(problems: Sequence[Problem], policy, scorer: Scorer, task: Task, method: str,
                  budgets: Sequence[int], seeds: Sequence[int], beam_width: int = 4, max_steps: int = 8,
                  step_tokens: int = 32, solution_tokens: int = 128, temperature: float = 1.0,
                  aggregation: str = "last", difficulty_bins: int = 0, progress: bool = False,
                  merge_duplicates: bool = False) -> dict:
    """Rows of (method, seed, N, accuracy, generated tokens, scorer tokens, seconds); `progress`: a bar
    over seeds × budgets; `merge_duplicates`: beam search keeps one of identical partial solutions."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS} (got {method!r})")
    from seqrl.utils.progress import progress_bar

    problems = list(problems)
    rows: list[dict] = []
    pass1: list[float] = [0.0] * len(problems)
    with progress_bar(len(seeds) * len(set(budgets)), f"search {method}", disable=not progress) as bar:
        _search_rows(problems, policy, scorer, task, method, budgets, seeds, beam_width, max_steps, step_tokens,
                     solution_tokens, temperature, aggregation, rows, pass1, bar, merge_duplicates)
    return _summarise(rows, problems, budgets, seeds, method, beam_width, pass1, difficulty_bins)


def _search_rows(problems, policy, scorer, task, method, budgets, seeds, beam_width, max_steps, step_tokens,
                 solution_tokens, temperature, aggregation, rows, pass1, bar, merge_duplicates=False) -> None:
    from seqrl.rollout import SamplingParams

    for seed in seeds:
        for n in sorted(set(budgets)):
            bar.advance(1)
            stepper = PolicyStepper(policy, temperature=temperature, step_tokens=step_tokens,
                                    solution_tokens=solution_tokens, seed=seed * 7919 + n)
            if method == "mcts":
                res = mcts(problems, stepper, scorer, simulations=n, width=beam_width, max_depth=max_steps,
                           aggregation=aggregation, task=task)
            else:
                width = min(beam_width, n)
                res = tree_search(problems, stepper, scorer, n - n % width, width, method=method, max_steps=max_steps,
                                  aggregation=aggregation, task=task, merge_duplicates=merge_duplicates)
            params = SamplingParams(temperature=temperature, max_new_tokens=solution_tokens, seed=seed * 7919 + n)
            bon = best_of_n(problems, policy, n, scorer=scorer, select="weighted", aggregation=aggregation,
                            task=task, params=params)
            if n == max(budgets):
                for i, cands in enumerate(bon.candidates):
                    pass1[i] += statistics.fmean(task.verify(problems[i], c).correct for c in cands) / len(seeds)
            answers = bon.answers
            majority = [task.verify(p, c[_first_majority(a)]).correct
                        for p, c, a in zip(problems, bon.candidates, answers)]
            for name, correct, acc in ((method, res.correct, res.account), ("bon_weighted", bon.correct, bon.account),
                                       ("majority", majority, bon.account)):
                rows.append({"method": name, "seed": seed, "n": n, "correct": [bool(c) for c in correct],
                             "accuracy": sum(correct) / len(correct), "generated_tokens": acc.generated_tokens,
                             "scorer_tokens": acc.scorer_tokens if name != "majority" else 0,
                             "gen_s": acc.gen_s, "score_s": acc.score_s, "other_s": acc.other_s})


def _summarise(rows, problems, budgets, seeds, method, beam_width, pass1, difficulty_bins) -> dict:
    summary: dict[str, dict[int, dict[str, float]]] = {}
    for name in dict.fromkeys(r["method"] for r in rows):
        summary[name] = {}
        for n in sorted(set(budgets)):
            sel = [r for r in rows if r["method"] == name and r["n"] == n]
            summary[name][n] = {"accuracy": statistics.fmean(r["accuracy"] for r in sel),
                                "accuracy_std": statistics.pstdev(r["accuracy"] for r in sel),
                                "generated_tokens": statistics.fmean(r["generated_tokens"] for r in sel),
                                "scorer_tokens": statistics.fmean(r["scorer_tokens"] for r in sel)}
    out = {"method": method, "budgets": sorted(set(budgets)), "seeds": list(seeds), "problems": len(problems),
           "beam_width": beam_width, "summary": summary, "rows": rows}
    if difficulty_bins > 0:
        bins = _bins(pass1, difficulty_bins)
        out["difficulty"] = {"pass1": pass1, "bins": bins, "accuracy": {
            name: {n: [statistics.fmean(
                statistics.fmean(r["correct"][i] for i in range(len(problems)) if bins[i] == b) if b in bins else 0.0
                for r in rows if r["method"] == name and r["n"] == n) for b in range(difficulty_bins)]
                for n in sorted(set(budgets))} for name in summary}}
    return out


def _first_majority(answers) -> int:
    from seqrl.search.best_of_n import choose

    return choose(answers, None, "majority")


def write_outputs(result: dict, out: Path, title: str) -> None:
    """search.json, search.md (accuracy ± std and tokens per method and N) and search.png (accuracy vs tokens)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "search.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    lines = [f"# {title}", "", f"{result['problems']} problems, seeds {result['seeds']}, beam width "
             f"{result['beam_width']}; accuracy mean ± std over seeds, tokens per run", "",
             "| method | N | accuracy | generated tokens | scorer tokens |", "|---|---|---|---|---|"]
    for name, by_n in result["summary"].items():
        for n, s in by_n.items():
            lines.append(f"| {name} | {n} | {s['accuracy']:.3f} ± {s['accuracy_std']:.3f} | "
                         f"{s['generated_tokens']:,.0f} | {s['scorer_tokens']:,.0f} |")
    if "difficulty" in result:
        lines += ["", "Accuracy by difficulty bin (0 = hardest, by the policy's pass@1):", ""]
        for name, by_n in result["difficulty"]["accuracy"].items():
            for n, accs in by_n.items():
                lines.append(f"- {name} N={n}: " + ", ".join(f"bin {b}: {a:.3f}" for b, a in enumerate(accs)))
    (out / "search.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, by_n in result["summary"].items():
        xs = [s["generated_tokens"] for s in by_n.values()]
        ax.plot(xs, [s["accuracy"] for s in by_n.values()], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "search.png", dpi=120)
    plt.close(fig)


def cli_main(method: str, argv: list[str]) -> int:
    """``seqrl search beam|dvts|mcts`` (see the module docstring)."""
    p = argparse.ArgumentParser(prog=f"seqrl search {method}",
                                description=f"{method} vs best-of-N and majority at equal generated tokens")
    p.add_argument("--policy", required=True, help="a causal-LM folder (a checkpoint)")
    p.add_argument("--scorer", required=True, help="prm:CKPT or orm:CKPT (the gold answer is never used)")
    p.add_argument("--task", default="arith")
    p.add_argument("--task-kwargs", default="{}", help='JSON, e.g. \'{"digits": 3}\'')
    p.add_argument("--problems", type=int, default=50)
    p.add_argument("--budget", default="4,8,16", help="N: beams (beam, dvts) or simulations (mcts)")
    p.add_argument("--beam-width", type=int, default=4, help="M (beam, dvts); expansion width (mcts)")
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--step-tokens", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens of a whole solution")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--aggregation", default="last", choices=("min", "last", "prod", "mean"))
    p.add_argument("--difficulty-bins", type=int, default=0, help="split problems by the policy's pass@1 into K bins")
    p.add_argument("--merge-duplicates", action="store_true",
                   help="beam: keep one of identical partial solutions (default: they stay separate beams, as in "
                        "search-and-learn)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="output folder (search.json, search.png, search.md; default "
                                 "runs/search/METHOD_TASK)")
    p.add_argument("--force", action="store_true", help="replace an earlier result in --out")
    args = p.parse_args(argv)
    from seqrl.search.curves import output_folder

    out = output_folder(args.out, f"{method}_{args.task.split(':')[0]}", "search.json", args.force)
    budgets = [int(x) for x in args.budget.split(",") if x.strip()]
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    if not budgets or min(budgets) < 1 or not seeds:
        raise ValueError(f"--budget and --seeds: comma-separated positive integers (got {args.budget!r}, {args.seeds!r})")
    kind, _, path = args.scorer.partition(":")
    if kind not in ("prm", "orm") or not path:
        raise ValueError(f"--scorer {args.scorer!r}: expected prm:CKPT or orm:CKPT")
    import torch

    from seqrl.data import get_task
    from seqrl.models.lm import ModelConfig, load_policy
    from seqrl.prompts import saved_prompt
    from seqrl.models.prm import ProcessRewardModel

    torch.set_num_threads(max(1, args.threads))
    kwargs = parse_json_object(args.task_kwargs, "--task-kwargs")
    task = get_task(args.task, **kwargs)
    scorer = ProcessRewardModel.load(path)
    policy = load_policy(ModelConfig(path=args.policy))
    policy.prompt = saved_prompt(args.policy)  # asked as the run that wrote it was trained
    problems = task.problems("test", args.problems, 0)
    result = search_curves(problems, policy, scorer, task, method, budgets, seeds, args.beam_width, args.max_steps,
                           args.step_tokens, args.max_new_tokens, args.temperature, args.aggregation,
                           args.difficulty_bins, progress=True, merge_duplicates=args.merge_duplicates)
    result.update(policy=args.policy, scorer=args.scorer, task=args.task, merge_duplicates=args.merge_duplicates)
    write_outputs(result, out, f"{method} vs best-of-N on {args.task}")
    print((out / "search.md").read_text(encoding="utf-8"))
    print(f"wrote {out / 'search.json'}, {out / 'search.md'}, {out / 'search.png'}")
    return 0
