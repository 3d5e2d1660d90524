#!/usr/bin/env python
"""VLA throughput on BabyAI: training samples/s and evaluation env steps/s (fp32 vs bf16 autocast), bot
demonstrations/s (1 and 2 worker processes), and the held-out GoToLocal success of a quick run.

    python benchmarks/vla_throughput.py --quick     # ≈ 1.5 min on a quiet 2-core machine, 11 min at load 10
    python benchmarks/vla_throughput.py             # more demonstrations, repeats and a longer training run
    python benchmarks/vla_throughput.py --quick --compile-only   # the training step eager vs `run.compile`

* demos/s: `seqrl data babyai GoToLocal --episodes N --workers W` run as a command; its demos/s counts
  the collection (worker start-up included: a spawned worker imports minigrid first), not the write.
* training samples/s: the trainer's own step (`seqrl.algos.vla.bc_loss`, backward, clipping, AdamW) on
  the gotolocal preset's model (d 64, 2 layers, K 4, FiLM + GRU) and batch (64 windows); fp32 and bf16
  autocast in alternating blocks, median of the blocks. Samples = windows of K steps.
* padding skip: fp32 training samples/s with the images of left-padded steps encoded (`skip_padding`
  False) or skipped (the default), alternating, at K 4 (the preset) and K 16; the windows' padded fraction.
* compiled training step (``--compile`` adds it, ``--compile-only`` runs it alone): fp32 samples/s of the
  step above with the policy's forward under `torch.compile` as ``run.compile: true`` compiles it
  (`seqrl.utils.compiling.compile_model`: inductor, automatic dynamic shapes), against an eager copy of the same
  weights on the same batches, blocks alternating; the compilation seconds of the warm-up steps reported
  apart, and the loss difference of both on one batch in eval mode (no dropout: inductor draws its own masks).
* eval env steps/s: `seqrl.algos.vla.evaluate` (all episodes in lockstep, one batched forward per env
  step) on held-out GoToLocal layouts, env steps taken / wall seconds; fp32 and bf16 autocast alternating.
* gotolocal_success: `seqrl train vla` with the gotolocal preset cut to a few hundred in-memory
  demonstrations and steps (the `quick_run` settings below), held-out success over its eval episodes.
  A pipeline figure, far below what the full preset reaches.

One torch thread (`--threads`). The last printed line is one JSON object with every figure, the CPU
model, torch's CPU capabilities (avx512_bf16, amx_bf16) and the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # runnable from a checkout without installing the package

import torch  # noqa: E402

from seqrl.training.run import make_optimizer  # noqa: E402

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.vla import (  # noqa: E402
    VLAConfig,
    VLADataConfig,
    VLAEvalConfig,
    bc_loss,
    build_policy,
    evaluate,
    train,
)
from seqrl.cli import resolve_config  # noqa: E402
from seqrl.config import load_config  # noqa: E402
from seqrl.data.babyai import quick_babyai  # noqa: E402
from seqrl.data.offline import Trajectories  # noqa: E402
from _machine import machine_info  # noqa: E402 — benchmarks/, the script's own folder

LEVEL = "BabyAI-GoToLocal-v0"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def demos_per_s(episodes: int, workers: int) -> dict:
    """`seqrl data babyai GoToLocal --workers W` in a subprocess (as a user runs it): its own demos/s figure
    (bot time, worker start-up included) and the command's wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "seqrl", "data", "babyai", LEVEL, "--episodes", str(episodes), "--seed", "0",
               "--workers", str(workers), "--out", tmp]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"episodes": summary["episodes"], "steps": summary["steps"], "demos_per_s": summary["demos_per_s"],
            "command_wall_s": round(wall, 2), "bot_failures": summary["bot_failures"]}


def preset() -> VLAConfig:
    return load_config(VLAConfig, resolve_config("gotolocal", "vla"))


def train_step(policy, optimizer, batch: dict, mission_ids, bf16: bool) -> None:
    """The trainer's step: BC loss, backward, clipping at 1.0, the optimizer's update."""
    loss, *_ = bc_loss(policy, batch, mission_ids, bf16)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def step_rates(dataset, steps_per_block: int, blocks: int, batch_size: int, arms: dict[str, tuple[bool, bool]],
               context_len: int | None = None) -> tuple[dict[str, list[float]], float]:
    """Samples/s of the training step per block for each arm {name: (bf16 autocast, skip_padding)}, arms
    alternating block by block on one policy (the preset's, K = `context_len` if given); and the fraction of
    padded steps in the batches."""
    cfg = preset()
    if context_len is not None:
        cfg.model.context_len = context_len
    torch.manual_seed(0)
    policy = build_policy(cfg, dataset)
    optimizer, _ = make_optimizer(policy, cfg.optim, 10_000, fused=True)
    data = Trajectories(dataset, 1.0, 100_000, "vla.model", windows="cover")
    mission_ids = policy.encode_missions(list(dataset.metadata["missions"]))
    K = cfg.model.context_len
    rates: dict[str, list[float]] = {name: [] for name in arms}
    padding: list[float] = []
    step = 0

    def one(bf16: bool) -> None:
        nonlocal step
        batch = data.batch(step, batch_size, K, 0)
        padding.append(1.0 - float(batch["mask"].float().mean()))
        train_step(policy, optimizer, batch, mission_ids, bf16)
        step += 1

    policy.train()
    for bf16, skip in arms.values():  # warm-up: first calls allocate and pick kernels
        policy.skip_padding = skip
        for _ in range(2):
            one(bf16)
    for _ in range(blocks):
        for name, (bf16, skip) in arms.items():
            policy.skip_padding = skip
            t0 = time.perf_counter()
            for _ in range(steps_per_block):
                one(bf16)
            rates[name].append(steps_per_block * batch_size / (time.perf_counter() - t0))
    return rates, statistics.mean(padding)


def train_rate(dataset, steps_per_block: int, blocks: int, batch_size: int) -> dict:
    """Median samples/s of the training step, fp32 and bf16 blocks alternating on one policy."""
    rates, _ = step_rates(dataset, steps_per_block, blocks, batch_size, {"fp32": (False, True), "bf16": (True, True)})
    out = {f"train_samples_per_s_{k}": round(statistics.median(v), 1) for k, v in rates.items()}
    out["train_bf16_speedup"] = round(out["train_samples_per_s_bf16"] / out["train_samples_per_s_fp32"], 3)
    out["train_blocks"] = {k: [round(x, 1) for x in v] for k, v in rates.items()}
    return out


def padding_skip_rate(dataset, steps_per_block: int, blocks: int, batch_size: int, contexts=(4, 16)) -> dict:
    """fp32 training samples/s with the images of padded steps encoded or skipped (`VLAModel.skip_padding`),
    alternating, at each context K: the skip's speed-up grows with the share of padding in the windows."""
    out: dict = {}
    for K in contexts:
        rates, padding = step_rates(dataset, steps_per_block, blocks, batch_size,
                                    {"all": (False, False), "skip": (False, True)}, context_len=K)
        med = {k: statistics.median(v) for k, v in rates.items()}
        out[f"padding_skip_K{K}"] = {"padded_fraction": round(padding, 3), "samples_per_s_all": round(med["all"], 1),
                                     "samples_per_s_skip": round(med["skip"], 1),
                                     "speedup": round(med["skip"] / med["all"], 3)}
    return out


def compile_rate(dataset, steps_per_block: int, blocks: int, batch_size: int, warmup: int = 6) -> dict:
    """fp32 samples/s of the training step, eager vs the forward compiled as ``run.compile`` does, alternating
    blocks over the same batch sequence; compile seconds of the warm-up steps apart."""
    import copy

    from seqrl.utils.compiling import compile_failure, compile_model, compile_seconds

    cfg = preset()
    torch.manual_seed(0)
    eager = build_policy(cfg, dataset)
    compiled = compile_model(copy.deepcopy(eager))
    data = Trajectories(dataset, 1.0, 100_000, "vla.model", windows="cover")
    mission_ids = eager.encode_missions(list(dataset.metadata["missions"]))
    K = cfg.model.context_len
    arms = {}
    for name, policy in (("eager", eager), ("compiled", compiled)):
        optimizer, _ = make_optimizer(policy, cfg.optim, 10_000, fused=True)
        policy.train()
        arms[name] = [policy, optimizer, 0]

    def one(name: str) -> None:
        policy, optimizer, step = arms[name]
        train_step(policy, optimizer, data.batch(step, batch_size, K, 0), mission_ids, False)
        arms[name][2] += 1

    t0, c0 = time.perf_counter(), compile_seconds() or 0.0
    losses = []  # parity: both in eval mode (inductor draws dropout masks with its own generator) on one batch
    with torch.no_grad():
        for name in ("compiled", "eager"):
            policy = arms[name][0].eval()
            losses.append(float(bc_loss(policy, data.batch(10_000, batch_size, K, 0), mission_ids, False)[0]))
            policy.train()
    for _ in range(warmup):
        one("compiled")
        one("eager")
    warm_s, compile_s = time.perf_counter() - t0, (compile_seconds() or 0.0) - c0
    failed = compile_failure(compiled)
    rates: dict[str, list[float]] = {"eager": [], "compiled": []}
    for b in range(blocks):
        for name in (("eager", "compiled") if b % 2 == 0 else ("compiled", "eager")):
            t0 = time.perf_counter()
            for _ in range(steps_per_block):
                one(name)
            rates[name].append(steps_per_block * batch_size / (time.perf_counter() - t0))
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {"compile": {"compile_s": round(compile_s, 1), "warmup_steps_s": round(warm_s, 1),
                        "samples_per_s_eager": round(med["eager"], 1), "samples_per_s_compiled": round(med["compiled"], 1),
                        "speedup": round(med["compiled"] / med["eager"], 3), "fell_back_to_eager": failed,
                        "first_loss_abs_diff": float(f"{abs(losses[0] - losses[1]):.2e}"),
                        "blocks": {k: [round(x, 1) for x in v] for k, v in rates.items()}}}


def eval_rate(dataset, episodes: int, blocks: int) -> dict:
    """Median env steps/s of batched held-out evaluation, fp32 and bf16 autocast alternating."""
    cfg = preset()
    torch.manual_seed(0)
    policy = build_policy(cfg, dataset)
    rates: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for _ in range(blocks):
        for name, bf16 in (("fp32", False), ("bf16", True)):
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                m, _, _ = evaluate(policy, LEVEL, episodes, seed=0)
            env_steps = m["eval/episode_length"] * m["eval/episodes"]
            rates[name].append(env_steps / (time.perf_counter() - t0))
    out = {f"eval_env_steps_per_s_{k}": round(statistics.median(v), 1) for k, v in rates.items()}
    out["eval_bf16_speedup"] = round(out["eval_env_steps_per_s_bf16"] / out["eval_env_steps_per_s_fp32"], 3)
    return out


def quick_run(episodes: int, steps: int, eval_episodes: int, out_dir: str) -> dict:
    """The gotolocal preset on `episodes` in-memory demonstrations for `steps` steps; held-out success."""
    cfg = preset()
    cfg.data = VLADataConfig(dataset="quick:GoToLocal", quick_episodes=episodes, quick_seed=0)
    cfg.run = RunConfig(name="vla_bench_gotolocal", out_dir=out_dir, seed=0, log_every=50, progress=False, bf16=False)
    cfg.eval = VLAEvalConfig(every=0, episodes=eval_episodes, seed=0, strip=False)
    cfg.optim = OptimConfig(**{**cfg.optim.__dict__, "warmup_steps": min(cfg.optim.warmup_steps, steps // 10)})
    cfg.steps = steps
    t0 = time.perf_counter()
    final = train(cfg)
    return {"gotolocal_success": final["eval/success_rate"], "gotolocal_episode_length": final["eval/episode_length"],
            "gotolocal_setting": f"{episodes} demos, {steps} steps x {cfg.batch_size}, {eval_episodes} held-out episodes",
            "gotolocal_run_s": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (≈ 3 min of CPU time)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="also the compiled training step (run.compile)")
    p.add_argument("--compile-only", action="store_true", help="only the compiled training step")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    q = args.quick
    result: dict = {"benchmark": "vla_throughput", "quick": q, "threads": args.threads, **machine_info(),
                    "load_avg_start": load()}
    if args.compile_only:
        result.update(compile_rate(quick_babyai(LEVEL, episodes=200, seed=0), steps_per_block=10 if q else 40,
                                   blocks=4 if q else 6, batch_size=preset().batch_size))
        result["load_avg_end"] = load()
        print(json.dumps(result))
        return 0
    n_demo = 1000 if q else 5000  # enough that a worker's ≈ 2 s start-up is not the whole figure
    result["demos_1_worker"] = demos_per_s(n_demo, 1)
    result["demos_2_workers"] = demos_per_s(n_demo, 2)
    result["demos_per_s_1_worker"] = result["demos_1_worker"]["demos_per_s"]
    result["demos_per_s_2_workers"] = result["demos_2_workers"]["demos_per_s"]
    print(f"demos/s: 1 worker {result['demos_per_s_1_worker']}, 2 workers {result['demos_per_s_2_workers']}", flush=True)
    dataset = quick_babyai(LEVEL, episodes=200, seed=0)
    result.update(train_rate(dataset, steps_per_block=10 if q else 40, blocks=2 if q else 4,
                             batch_size=preset().batch_size))
    print(f"train samples/s: fp32 {result['train_samples_per_s_fp32']}, bf16 {result['train_samples_per_s_bf16']}",
          flush=True)
    result.update(padding_skip_rate(dataset, steps_per_block=10 if q else 40, blocks=2 if q else 4,
                                    batch_size=preset().batch_size))
    print("padding skip: " + ", ".join(f"{k}: {v['speedup']}x at {v['padded_fraction']} padded"
                                       for k, v in result.items() if k.startswith("padding_skip_K")), flush=True)
    if args.compile:
        result.update(compile_rate(dataset, steps_per_block=10 if q else 40, blocks=4 if q else 6,
                                   batch_size=preset().batch_size))
        print(f"compiled training step: {result['compile']['speedup']}x eager", flush=True)
    result.update(eval_rate(dataset, episodes=50 if q else 200, blocks=2 if q else 3))
    print(f"eval env steps/s: fp32 {result['eval_env_steps_per_s_fp32']}, bf16 {result['eval_env_steps_per_s_bf16']}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        result.update(quick_run(300 if q else 1000, 300 if q else 1500, 100 if q else 200, tmp))
    print(f"gotolocal_success: {result['gotolocal_success']} ({result['gotolocal_setting']})", flush=True)
    result["load_avg_end"] = load()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
