#!/usr/bin/env python
"""PPO on a learned Bradley–Terry reward model, with label noise as the knob for reward hacking.

    python benchmarks/ppo_rm_hacking.py --quick    # noise 0 and 0.4, PPO seeds 0-2, 30 steps each
    python benchmarks/ppo_rm_hacking.py --noise 0,0.2,0.4 --seeds 0,1,2 --steps 60

From the weak 2-digit SFT model of the end-to-end tests (tiny preset, 240 steps; cached in
`runs/bench-cache/ppo_sft2/`, or `--sft CKPT`), per noise level p: `seqrl.algos.rm.build_preferences`
pairs a verified with an unverified sample of each training prompt and swaps each pair with
probability p (what `seqrl data preferences --label-noise p` writes); a reward model is trained at
the `rm/arith_tiny_rm` preset's settings; then PPO at the `ppo/arith_tiny_ppo` preset's settings
(scaled to 64 completions per step) optimises that RM's score. Logged per step: the RM score of the
training samples (`reward/rm/mean`) beside their true accuracy (`reward/verifier/mean`); every 15
steps held-out pass@1 and RM score. The RM's pairwise accuracy is reported on the held-out pairs
with clean labels (the p = 0 file's). The last stdout line is one JSON object; `--plot` writes a PNG.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _warm_start import cached_sft  # noqa: E402
from ppo_vs_grpo import SFT_CACHE, SFT_STEPS, TASK, ppo_config, sft_config  # noqa: E402

from seqrl.algos.ppo import train as train_ppo  # noqa: E402
from seqrl.algos.rm import (RMConfig, build_preferences, encode_pairs, evaluate_pairs, split_by_prompt,  # noqa: E402
                            write_jsonl)
from seqrl.algos.rm import train as train_rm  # noqa: E402
from seqrl.algos.config import RunConfig  # noqa: E402
from seqrl.cli import preset_file  # noqa: E402
from seqrl.config import load_config  # noqa: E402
from seqrl.data.preferences import load_preferences  # noqa: E402
from seqrl.models import ModelConfig  # noqa: E402
from seqrl.models.heads import load_scalar_model  # noqa: E402
from seqrl.prompts import PromptConfig  # noqa: E402
from seqrl.utils.metrics import read_metrics  # noqa: E402

def reward_model(sft: str, noise: float, args, out: Path) -> tuple[str, dict]:
    """The preference file and RM for one noise level (reused when present); (checkpoint, stats)."""
    prefs = out / f"prefs_noise{noise:g}.jsonl"
    if not prefs.exists():
        rows, stats = build_preferences(sft, TASK.build(), args.prompts, 4, noise, seed=0, max_new_tokens=32)
        write_jsonl(rows, prefs)
        (out / f"{prefs.stem}.stats.json").write_text(json.dumps(stats))
    name = f"rm_noise{noise:g}"
    ckpt = out / name / f"checkpoint-{args.rm_steps}"
    if not (ckpt / "trainer_state.json").exists():
        train_rm(load_config(RMConfig, preset_file("rm/arith_tiny_rm"), [
            f"--run.name={name}", f"--run.out_dir={out}", "--run.progress=false", "--run.save_every=0",
            f"--model.path={sft}", f"--data.path={prefs}", f"--steps={args.rm_steps}",
            "--optim.lr=1e-4"]))  # the preset's rate when docs/algorithms/ppo.md's table was measured
    stats = json.loads((out / f"{prefs.stem}.stats.json").read_text())
    rm_rows = [r for r in read_metrics(out / name / "metrics.jsonl") if "eval/pairwise_accuracy" in r]
    stats["rm_heldout_acc_noisy_labels"] = rm_rows[-1]["eval/pairwise_accuracy"]
    clean = out / "prefs_noise0.jsonl"
    if clean.exists():  # the same samples and pairs, unswapped: accuracy against the truth
        model, tok = load_scalar_model(ModelConfig(path=str(ckpt)))
        frac = load_config(RMConfig, preset_file("rm/arith_tiny_rm")).data.heldout_frac
        _, held = split_by_prompt(load_preferences(str(clean)), frac, tok, PromptConfig())
        enc = encode_pairs(held, tok, PromptConfig(), int(model.config.max_position_embeddings), False)
        stats["rm_heldout_acc_clean_labels"] = evaluate_pairs(model, enc, tok.pad_token_id, 64)["eval/pairwise_accuracy"]
    return str(ckpt), stats


def ppo_run(sft: str, rm: str | None, seed: int, args, out: Path, name: str) -> list[dict]:
    """PPO at the preset's settings (`ppo_vs_grpo.ppo_config`) on the verifier (rm None) or an RM."""
    if not (out / name / f"checkpoint-{args.steps}").is_dir():  # else: reuse the finished run
        run = RunConfig(name=name, out_dir=str(out), seed=seed, log_every=1, bf16=False)
        extra = (f"--rewards=[{{name: rm, path: {rm}}}]",) if rm is not None else ()
        train_ppo(ppo_config(run, sft, args.steps, eval_every=15, extra=extra))
    return read_metrics(out / name / "metrics.jsonl")


def curve(rows: list[dict], key: str) -> dict[int, float]:
    return {r["step"]: r[key] for r in rows if key in r}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--quick", action="store_true", help="noise 0 and 0.4, seeds 0-2, 30 PPO steps")
    parser.add_argument("--noise", default="0,0.4", help="label-noise levels ('' with --verifier: that arm alone)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--prompts", type=int, default=1500, help="training prompts sampled for the pairs")
    parser.add_argument("--rm-steps", type=int, default=300)
    parser.add_argument("--verifier", action="store_true", help="also PPO with the verifier as the reward")
    parser.add_argument("--sft", help="the SFT checkpoint (default: the cached e2e SFT model)")
    parser.add_argument("--out", default="runs/bench-cache/ppo_rm_hacking")
    parser.add_argument("--plot", help="PNG: RM score and true accuracy vs step, one panel per noise level")
    args = parser.parse_args()
    if args.quick:
        args.steps = 30
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sft = args.sft or cached_sft(SFT_CACHE, SFT_STEPS, lambda: sft_config(SFT_CACHE))["checkpoint"]
    noises = [float(x) for x in args.noise.split(",") if x]  # --noise '': no reward model
    seeds = [int(x) for x in args.seeds.split(",")]
    result: dict = {"steps": args.steps, "seeds": seeds, "arms": {}}
    arms: list[tuple[str, str | None, dict]] = [("verifier", None, {})] if args.verifier else []
    for noise in sorted(noises):  # p = 0 first: its file is the clean reference
        rm, stats = reward_model(sft, noise, args, out)
        arms.append((f"rm_noise{noise:g}", rm, stats))
    curves = {}
    for arm, rm, stats in arms:
        runs = [ppo_run(sft, rm, seed, args, out, f"ppo_{arm}_s{seed}") for seed in seeds]
        acc_key = "reward/accuracy/mean" if rm is None else "reward/verifier/mean"
        row = {**stats, "per_seed": []}
        for seed, rows in zip(seeds, runs):
            p1, rm_train, acc_train = curve(rows, "eval/pass@1"), curve(rows, "reward/rm/mean"), curve(rows, acc_key)
            first, last = min(p1), max(p1)
            w = max(1, args.steps // 6)  # mean of the first and last sixth of the steps
            early = lambda c: statistics.mean(v for s, v in c.items() if 1 <= s <= w)  # noqa: E731
            late = lambda c: statistics.mean(v for s, v in c.items() if s > args.steps - w)  # noqa: E731
            row["per_seed"].append({
                "seed": seed, "pass1": [round(p1[s], 4) for s in sorted(p1)],
                "greedy": [round(v, 3) for _, v in sorted(curve(rows, "eval/accuracy").items())],
                "pass1_gain": round(p1[last] - p1[first], 4),
                "train_acc_early_late": [round(early(acc_train), 3), round(late(acc_train), 3)],
                **({"train_rm_early_late": [round(early(rm_train), 3), round(late(rm_train), 3)],
                    "heldout_rm": [round(v, 3) for _, v in sorted(curve(rows, "eval/reward/rm").items())]}
                   if rm is not None else {})})
            print(arm, row["per_seed"][-1], file=sys.stderr, flush=True)
        row["pass1_gain_mean"] = round(statistics.mean(r["pass1_gain"] for r in row["per_seed"]), 4)
        result["arms"][arm] = row
        curves[arm] = ([curve(r, acc_key) for r in runs], [curve(r, "reward/rm/mean") for r in runs],
                       [curve(r, "eval/pass@1") for r in runs])
    if args.plot and noises:
        plot(curves, args.plot)
    print(json.dumps(result))


def plot(curves: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in curves if a.startswith("rm_")]
    fig, axes = plt.subplots(1, len(arms), figsize=(4.2 * len(arms), 3.2), squeeze=False, sharey=True)
    for ax, arm in zip(axes[0], arms):
        acc, rm, p1 = curves[arm]
        steps = sorted(set.intersection(*(set(c) for c in acc)))
        mean = lambda cs, s: statistics.mean(c[s] for c in cs)  # noqa: E731
        ax.plot(steps, [mean(acc, s) for s in steps], label="true accuracy (train samples)", color="C0")
        ev = sorted(set.intersection(*(set(c) for c in p1)))
        ax.plot(ev, [mean(p1, s) for s in ev], "o--", label="held-out pass@1", color="C2")
        ax.set_xlabel("PPO step")
        ax.set_title(f"label noise {arm.removeprefix('rm_noise')}")
        ax2 = ax.twinx()
        ax2.plot(steps, [mean(rm, s) for s in steps], label="RM score (train samples)", color="C3")
        ax2.set_ylabel("RM score", color="C3")
        if ax is axes[0][0]:
            ax.set_ylabel("accuracy")
            lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
            ax.legend(lines, [h.get_label() for h in lines], fontsize=7, loc="lower right")
    fig.suptitle(f"PPO on a learned reward, mean of {len(curves[arms[0]][0])} seeds", fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)


if __name__ == "__main__":
    main()
