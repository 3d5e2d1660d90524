"""`seqrl demo`: the reasoning pipeline end to end on arithmetic, from scratch, on a CPU.

1. build the character tokenizer and the tiny preset (fresh weights, seed 0) and evaluate it;
2. a deliberately short SFT on worked column-wise solutions, then evaluate;
3. GRPO from that SFT model with the task's verifier as reward, then evaluate;
4. a process reward model — the SFT model with a fresh head — trained on the SFT model's own solutions,
   each step labelled exactly (good iff it and every step before it are right), then test-time search
   with the GRPO model at one budget N: majority vote, PRM-weighted best-of-N and PRM-guided beam search;
5. write `<out>/report.md` with the tables and plots.

Held-out metrics at each stage: greedy accuracy, mean sampled accuracy (pass@1 at T = 1),
pass@4 and maj@4 on problems disjoint from training. Search never sees the gold answer.
Override any setting with `--sft.<key>=…`, `--grpo.<key>=…` or `--prm.<key>=…`.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

from seqrl.algos import grpo, prm, sft
from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.config import ConfigError, from_dict, merge, parse_overrides, to_dict
from seqrl.evaluation import EvalConfig, evaluate
from seqrl.models.lm import ModelConfig, load_policy, load_pretrained, num_parameters
from seqrl.utils.checkpoint import latest_checkpoint
from seqrl.utils.plots import plot_bars
from seqrl.utils.seeding import seed_everything

EVAL_K = 4
SEARCH_N, SEARCH_WIDTH = 8, 4
SEARCH_T = 0.8  # sampling temperature of every search method (search-and-learn's)
MARKER = ".seqrl-demo"  # written into every folder the demo creates; only such folders are ever replaced
TASK = TaskConfig(name="arith", kwargs={"digits": 2}, n_train=4000, n_test=200)
MAX_NEW = 48
# 4000 PRM steps, not 600: held-out step AUC 0.72 -> 0.84, PRM-weighted best-of-8 0.90 -> 0.92 (majority 0.90),
# beam 0.60 -> 0.78, for ≈ 3 more minutes (docs/algorithms/prm.md, (g))
PRM_PROBLEMS, PRM_STEPS, PRM_LR = 4000, 4000, 1e-3
DEMO_BF16 = False  # the tiny model gains nothing from bf16 (its steps ran within ±5 % of fp32), and fp32 gives
#                    the report the same arithmetic on every CPU
QUICK_NOTE = ("\n\n`--quick` checks the pipeline only: its stages are too short to learn the task; "
              "run `seqrl demo` to see SFT and GRPO at work.")


def prm_config(out: Path, quick: bool, sft_checkpoint: Path | None = None) -> prm.PRMConfig:
    """The PRM: the SFT model with a fresh head, trained on that model's own solutions to the train
    problems, labelled exactly (a step is good iff it and every step before it are right)."""
    sft_checkpoint = sft_checkpoint or out / "sft" / "checkpoint-200"
    return prm.PRMConfig(
        run=RunConfig(name="prm", out_dir=str(out), seed=0, save_every=0, log_every=20, bf16=DEMO_BF16),
        model=ModelConfig(path=str(sft_checkpoint)),
        task=replace(TASK, n_train=PRM_PROBLEMS),
        data=prm.PRMDataConfig(policy=str(sft_checkpoint), samples=4, temperature=1.0, max_new_tokens=MAX_NEW),
        optim=OptimConfig(lr=PRM_LR, warmup_steps=30),
        steps=30 if quick else PRM_STEPS,
        batch_size=32,
    )


def demo_configs(out: Path, quick: bool) -> tuple[sft.SFTConfig, grpo.GRPOConfig]:
    sft_cfg = sft.SFTConfig(
        run=RunConfig(name="sft", out_dir=str(out), seed=0, save_every=100, log_every=10, bf16=DEMO_BF16),
        model=ModelConfig(preset="tiny", max_seq_len=128),
        task=replace(TASK),
        optim=OptimConfig(lr=3e-3),
        eval=EvalConfig(every=100, max_new_tokens=MAX_NEW),
        steps=100 if quick else 200,
        batch_size=32,
    )
    grpo_cfg = grpo.GRPOConfig(
        run=RunConfig(name="grpo", out_dir=str(out), seed=0, save_every=0, log_every=1, bf16=DEMO_BF16),
        model=ModelConfig(path=str(out / "sft" / f"checkpoint-{sft_cfg.steps}")),
        task=replace(TASK),
        optim=OptimConfig(lr=5e-5, warmup_steps=4, schedule="constant"),
        eval=EvalConfig(every=10, max_new_tokens=MAX_NEW, samples=4),
        sampling=grpo.SamplingConfig(temperature=1.0, max_new_tokens=MAX_NEW),
        steps=4 if quick else 30,
        batch_size=512,
        group_size=8,
        micro_batch_size=128,
    )
    return sft_cfg, grpo_cfg


def _apply(cfg, section: dict, name: str):
    return from_dict(type(cfg), merge(to_dict(cfg), section), path=f"demo.{name}") if section else cfg


def _evaluate(policy, task_cfg: TaskConfig, seed: int) -> dict[str, float]:
    task = task_cfg.build()
    problems = task.problems("test", task_cfg.n_test, task_cfg.seed)
    return evaluate(policy, task, problems, pass_k=[1, EVAL_K], maj_k=[EVAL_K], n_samples=EVAL_K,
                    max_new_tokens=MAX_NEW, seed=seed).metrics


def prepare_demo_dir(out: Path) -> None:
    """Make `out` an empty folder for the demo: create it, or replace an earlier demo there.

    A folder is replaced only when it holds the demo's marker file (an earlier `seqrl demo` made it);
    any other non-empty folder is refused, so a user's files are never deleted. An empty folder is used as it is.
    """
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ConfigError(f"demo --out {out}: exists and is not a folder; give a new or empty folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise ConfigError(f"demo --out {out}: the folder is not empty and was not made by seqrl demo; "
                              f"give a new or empty folder (nothing was deleted)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by `seqrl demo`; the next demo run into this folder replaces it\n")


def run_demo(out: Path, quick: bool = False, overrides: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Run the demo into `out` — a new or empty folder, or an earlier demo's (replaced); returns the
    metrics per stage. A non-empty folder the demo did not make is refused (`prepare_demo_dir`)."""
    sft_cfg, grpo_cfg = demo_configs(out, quick)
    given = parse_overrides(overrides or [])
    unknown = set(given) - {"sft", "grpo", "prm"}
    if unknown:
        raise ConfigError(f"demo: overrides must start with sft., grpo. or prm. (got {sorted(unknown)})")
    sft_cfg, grpo_cfg = _apply(sft_cfg, given.get("sft", {}), "sft"), _apply(grpo_cfg, given.get("grpo", {}), "grpo")
    sft_checkpoint = sft_cfg.run.dir / f"checkpoint-{sft_cfg.steps}"  # SFT saves at its last step
    prm_cfg = _apply(prm_config(out, quick, sft_checkpoint), given.get("prm", {}), "prm")
    prepare_demo_dir(out)
    t0 = time.perf_counter()

    seed_everything(sft_cfg.run.seed)  # the same initialisation SFT starts from
    untrained = load_policy(sft_cfg.model)
    params = num_parameters(untrained.model)
    print(f"[1/5] untrained {sft_cfg.model.preset} model ({params:,} parameters): evaluating")
    stages = {"untrained": _evaluate(untrained, sft_cfg.task, sft_cfg.run.seed)}

    print(f"[2/5] SFT on {sft_cfg.task.name} {sft_cfg.task.kwargs}: {sft_cfg.steps} steps of {sft_cfg.batch_size}")
    sft.train(sft_cfg)
    stages["after SFT"] = _evaluate(load_pretrained(latest_checkpoint(sft_cfg.run.dir)), sft_cfg.task, sft_cfg.run.seed)

    print(f"[3/5] GRPO: {grpo_cfg.steps} steps of {grpo_cfg.batch_size} completions (G = {grpo_cfg.group_size})")
    grpo_cfg.model.path = str(latest_checkpoint(sft_cfg.run.dir))
    grpo.train(grpo_cfg)
    print("      evaluating the GRPO model")
    final_policy = load_pretrained(latest_checkpoint(grpo_cfg.run.dir))
    stages["after GRPO"] = _evaluate(final_policy, sft_cfg.task, sft_cfg.run.seed)
    print(f"[4/5] PRM: {prm_cfg.steps} steps on the SFT model's own labelled solutions; search at N = {SEARCH_N}")
    t_prm = time.perf_counter()
    prm.train(prm_cfg)
    t_search = time.perf_counter()
    search = _search_stage(final_policy, prm_cfg, sft_cfg.task, 20 if quick else 100, sft_cfg.run.seed)
    print(f"      PRM {t_search - t_prm:.0f} s, search {time.perf_counter() - t_search:.0f} s")
    elapsed = time.perf_counter() - t0
    print("[5/5] report")

    keys = ["eval/accuracy", "eval/pass@1", f"eval/pass@{EVAL_K}", f"eval/maj@{EVAL_K}", "eval/mean_length", "eval/truncated"]
    plot_bars([k.split("/")[1] for k in keys[:4]], {stage: [m[k] for k in keys[:4]] for stage, m in stages.items()},
              out / "stages.png", title="held-out metrics per stage", ylabel="fraction of problems")
    header = " | ".join(stages)
    rows = "\n".join(f"| {k} | " + " | ".join(f"{m[k]:.3f}" for m in stages.values()) + " |" for k in keys)
    report = f"""# seqrl demo

Task: `{sft_cfg.task.name}` {sft_cfg.task.kwargs}, {sft_cfg.task.n_test} held-out test problems (disjoint from training).
Model: `{sft_cfg.model.preset}` preset, {params:,} parameters, trained from scratch on this CPU.
Pipeline: SFT {sft_cfg.steps} steps × {sft_cfg.batch_size} → GRPO {grpo_cfg.steps} steps × {grpo_cfg.batch_size}
completions (G = {grpo_cfg.group_size}, lr {grpo_cfg.optim.lr:g}, reward = the task's verifier).
Run time: {elapsed:.0f} s. Reproduce: `seqrl demo{' --quick' if quick else ''}`.{QUICK_NOTE if quick else ''}

| metric | {header} |
|---|{'---|' * len(stages)}
{rows}

greedy accuracy = one temperature-0 completion verified; pass@1 = mean accuracy of {EVAL_K} samples at
temperature 1 (what GRPO optimises); pass@{EVAL_K} = unbiased estimator from {EVAL_K} samples;
maj@{EVAL_K} = majority answer of {EVAL_K} samples.

![stages](stages.png)

Test-time search with the GRPO model on the first {search['problems']} held-out problems, N = {SEARCH_N}
samples or beams (beam width {SEARCH_WIDTH}) at temperature {SEARCH_T}, scored by a process reward model: the SFT
model with a fresh head, trained for {prm_cfg.steps} steps on {prm_cfg.data.samples} of its own solutions per train problem, each
step labelled exactly (good iff it and every earlier step are right; held-out step AUC {search['prm_auc']:.3f} on its
solutions to the test problems). The gold answer is used only to label the PRM's data and to grade the final pick:

| method | accuracy | generated tokens | PRM tokens |
|---|---|---|---|
{search['table']}
{search['note']}
![SFT curves](sft/plots/sft.png)

![GRPO curves](grpo/plots/grpo.png)

Run folders: `{sft_cfg.run.dir}`, `{grpo_cfg.run.dir}`, `{prm_cfg.run.dir}` (config.yaml, metrics.jsonl, checkpoints).
"""
    (out / "report.md").write_text(report)
    print(report)
    stages["search"] = search["accuracy"]
    return stages


def search_note(accuracy: dict[str, float], majority: float, prm_auc: float) -> str:
    """The report's sentence when a PRM-guided method scores below majority vote (a demo never shows a
    method making the model worse without saying why); "" otherwise.

    >>> search_note({"greedy": 0.92, "PRM beam search": 0.85, "PRM-weighted best-of-8": 0.95}, 0.92, 0.79)[:48]
    '\\nPRM beam search is below majority@8 here: the P'
    >>> search_note({"PRM beam search": 0.95}, 0.9, 0.99)
    ''
    """
    worse = [name for name, acc in accuracy.items() if name.startswith("PRM") and acc < majority]
    if not worse:
        return ""
    greedy = f", greedy {accuracy['greedy']:.2f}" if "greedy" in accuracy else ""
    return (f"\n{' and '.join(worse)} {'is' if len(worse) == 1 else 'are'} below majority@{SEARCH_N} here: the PRM, "
            f"trained on the SFT model's solutions, judges steps imperfectly (held-out step AUC {prm_auc:.2f}), and "
            f"the GRPO model it reranks rarely disagrees with itself (majority@{SEARCH_N} {majority:.2f}{greedy}), so "
            "a method that follows the scores (a pick, a beam) inherits the scorer's mistakes where a vote needs no "
            "scorer; on the SFT model over N = 4 … 64, beam search is at or above the vote "
            "(docs/algorithms/search.md).\n")


def _search_stage(policy, prm_cfg: prm.PRMConfig, task_cfg: TaskConfig, n_problems: int, seed: int) -> dict:
    """Greedy, majority@N, PRM-weighted best-of-N@N and PRM beam search (N beams, width M) on held-out problems."""
    from seqrl.models.prm import ProcessRewardModel
    from seqrl.rollout import SamplingParams
    from seqrl.search import PolicyStepper, beam_search, best_of_n
    from seqrl.utils.metrics import read_metrics

    task = task_cfg.build()
    problems = task.problems("test", task_cfg.n_test, task_cfg.seed)[:n_problems]
    scorer = ProcessRewardModel.load(latest_checkpoint(prm_cfg.run.dir))
    greedy = best_of_n(problems, policy, 1, task=task, params=SamplingParams(temperature=0.0, max_new_tokens=MAX_NEW))
    params = SamplingParams(temperature=SEARCH_T, max_new_tokens=MAX_NEW, seed=seed)
    majority = best_of_n(problems, policy, SEARCH_N, select="majority", task=task, params=params)
    weighted = best_of_n(problems, policy, SEARCH_N, scorer=scorer, select="weighted", task=task, params=params)
    stepper = PolicyStepper(policy, temperature=SEARCH_T, step_tokens=24, solution_tokens=MAX_NEW, seed=seed)
    beam = beam_search(problems, stepper, scorer, n=SEARCH_N, beam_width=SEARCH_WIDTH, max_steps=8, task=task)
    rows = {"greedy": greedy, f"majority@{SEARCH_N}": majority, f"PRM-weighted best-of-{SEARCH_N}": weighted,
            f"PRM beam search (N={SEARCH_N}, M={SEARCH_WIDTH})": beam}
    table = "\n".join(f"| {name} | {r.accuracy:.3f} | {r.account.generated_tokens:,} | {r.account.scorer_tokens:,} |"
                      for name, r in rows.items())
    auc = [m["eval/auc"] for m in read_metrics(prm_cfg.run.dir / "metrics.jsonl") if m.get("eval/auc") is not None]
    prm_auc = auc[-1] if auc else float("nan")  # none: held-out labels of one class (an untrained policy)
    note = search_note({name: r.accuracy for name, r in rows.items()}, majority.accuracy, prm_auc)
    return {"problems": len(problems), "table": table, "prm_auc": prm_auc, "note": note,
            "accuracy": {name: r.accuracy for name, r in rows.items()}}
