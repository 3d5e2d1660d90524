#!/usr/bin/env python
"""Decision Transformer: seqrl's (`seqrl.algos.dt`) against d3rlpy 2.8.0's `DecisionTransformer` on equal work.

    python benchmarks/dt_vs_d3rlpy.py --quick                 # ≈ 3 min: Pendulum preset size, 3 seeds × 1000 steps
                                                              # (≈ 4.5 min with the bf16 side; --bf16 off drops it)
    python benchmarks/dt_vs_d3rlpy.py --quick --only seqrl    # seqrl fp32 vs bf16 only, return within noise?
    python benchmarks/dt_vs_d3rlpy.py                         # ≈ 6 min: 5 seeds × 1500 steps each side
    python benchmarks/dt_vs_d3rlpy.py --preset paper --speed-only --steps 40 --round-steps 8   # paper size, speed
    python benchmarks/dt_vs_d3rlpy.py --quick --only seqrl --d3rlpy-choices all   # return ablation, one side

Data: the quick Pendulum-v1 medium-expert dataset (`seqrl.data.minari_data.quick_dataset`, 50k steps =
250 episodes of 200 steps), given to seqrl as it is and to d3rlpy as an `MDPDataset` of the same
episodes (observations s_0 … s_{T−1}, actions, rewards, terminals = terminations, timeouts =
truncations, with the last step of an episode that has neither flag marked as a timeout).

Matched (both sides built from the same settings):
  * context K, width d, layers, heads, batch B, gradient steps, dropout 0.1 on embeddings, attention
    weights and residuals, ReLU MLP of width 4d, pre-LayerNorm GPT-2 blocks + final LayerNorm, a
    LayerNorm over the embedded tokens, one linear embedding per modality (d3rlpy:
    ``VectorEncoderFactory([d], exclude_last_activation=True)`` = one ``Linear(S, d)`` for the state),
    a learned per-timestep embedding added to all three tokens of a step
    (``PositionEncodingType.SIMPLE``), (R̂, s, a) token order, the action read at the state token, a
    tanh head mapped to the action bounds (d3rlpy: tanh in [−1, 1] + ``MinMaxActionScaler`` with the
    environment's bounds, [−2, 2]), the MSE action loss on real steps;
  * input scaling: states standardised with the same mean/std (d3rlpy: ``StandardObservationScaler``
    given seqrl's mean and clamped std, ``eps=0``), R̂ divided by 1000 (d3rlpy:
    ``MultiplyRewardScaler(1e-3)``, applied to the returns-to-go);
  * optimiser: AdamW, betas (0.9, 0.999), eps 1e-8, the same lr and weight decay (d3rlpy's
    ``GPTAdamWFactory``: no decay on biases, LayerNorms and embeddings, as ours), linear warm-up then a
    constant lr (d3rlpy: ``WarmupSchedulerFactory``, the same lambda ``min((t+1)/warmup, 1)``; ours
    ``optim.schedule=constant``; or ``--schedule cosine``, below), gradient clipping at 0.25;
  * fp32, CPU, one torch thread, eager mode (d3rlpy ``compile_graph=False``; ours eager too, or
    ``--compile``: seqrl's forward and backward under ``torch.compile``, for the record — slower here);
  * evaluation: the same target return, the same number of Pendulum-v1 episodes, episode i reset with
    the same seed (`seqrl.envs.rollout.episode_rngs(eval_seed, i)`), R̂ decremented by the observed
    rewards, the deterministic action (d3rlpy: ``IdentityTransformerActionSampler``), the last K steps.

Not matched (no option for it in d3rlpy 2.8.0, or inherent to the implementation):
  * **initialisation**: d3rlpy applies GPT-2's N(0, 0.02) to the blocks, LayerNorms and timestep
    embedding but builds its state encoder, R̂ and action embeddings and output layer *after* that, so
    they keep PyTorch's default (Kaiming-uniform) init, and it does not scale the residual projections
    by 1/√(2·layers). seqrl's side runs with ``model.embed_init=pytorch`` (``--embed-init``, default
    here), the same init for the three linear embeddings; its head stays N(0, 0.02) and its residual
    projections scaled (the first runs on 2026-12-03 used ``gpt2``: N(0, 0.02) everywhere);
  * **LayerNorm eps**: d3rlpy's block and final LayerNorms use eps 3e-3, ours 1e-5;
  * **weight decay of the linear embeddings**: ours exempts every ``embed_*`` parameter (also the
    linear R̂/state/action embeddings), d3rlpy's ``GPTAdamWFactory`` decays those (it exempts only
    ``nn.Embedding``), same for both sides otherwise;
  * **loss scale**: d3rlpy's MSE is in the scaled action space ([−1, 1], i.e. 1/4 of ours for Pendulum's
    [−2, 2]) and averaged over all B·K positions including padding (ours: over real steps), so the
    gradients differ by a per-batch factor, which interacts with the 0.25 clipping;
  * **window sampling**: d3rlpy draws a transition uniformly (episode ∝ length) and takes the K steps
    *ending* there (left-padded near an episode's start); ours draws the episode ∝ length and a start
    uniform in the episode, taking K steps from there (left-padded near its end). d3rlpy counts
    T − 1 transitions in an episode cut by a time limit, so no window of it ends on its last step.
    Timesteps start at 1 in d3rlpy, 0 in ours (a relabelling of the learned embedding; d3rlpy's has
    max_timestep + 2 rows, two never used, hence its 2·d more parameters);
  * **attention**: d3rlpy separate q/k/v linears and a hand-written masked softmax (-1e4 fill), ours a
    fused QKV and ``scaled_dot_product_attention``; d3rlpy's batches are sliced per window in Python
    and converted from numpy each step, ours are gathered as tensors. These are what the speed
    comparison measures.
  * **lr schedule**: the seqrl Pendulum preset uses warm-up + cosine decay to 0.1·lr; d3rlpy ships
    warm-up *or* cosine, not both chained. Default here: warm-up + constant on both (d3rlpy's own
    factory). ``--schedule cosine`` gives d3rlpy seqrl's lambda through a 10-line
    ``LRSchedulerFactory`` subclass defined in this script (d3rlpy code otherwise unchanged).
  * **evaluation batching**: ours steps all episodes in lockstep as one batch, d3rlpy's stateful
    wrapper one environment at a time (evaluation is not timed).

Speed: one process; per seed both sides are trained in alternating rounds of ``--round-steps`` steps
(seqrl first in odd rounds, d3rlpy first in even ones), so the machine's load swings hit both alike.
A step is what each library's own loop does per gradient step: seqrl the body of `algos.dt.train`
(``Trajectories.batch``, forward, loss, backward, clip, AdamW, scheduler, zero_grad, ``loss.item()``),
d3rlpy ``ReplayBuffer.sample_trajectory_batch(B, length=K)`` + ``algo.update(batch)`` (what
``fit`` calls, without its logger). steps/s of a round = its steps / its wall time; the figures are
medians over all rounds (also split into sampling and update). Evaluation and dataset building are
not timed.

bf16: where the CPU has AVX-512 BF16 or AMX-BF16 (``--bf16 auto``, the default; ``on`` / ``off``
force it), a third side ``seqrl_bf16`` joins the interleaving: seqrl with ``run.bf16`` on (its
forward under bf16 autocast, fp32 master weights and optimiser, as `algos.dt.train` runs it), built
from the same seed (the same initial weights as the fp32 side) and evaluated the same way (fp32).
Reported: ``steps_per_s_ratio_bf16`` (vs d3rlpy), ``bf16_vs_fp32_paired_median`` and
``normalized_delta_bf16[_vs_fp32]`` ± SE over seeds. The sides take turns going first in each round.

Return ablations: ``--only seqrl|d3rlpy`` trains and evaluates one side alone (no speed ratio; the
sides then do not share the global RNG stream, so per-seed numbers differ from the interleaved run's),
(``--only seqrl`` keeps the bf16 side when it is on), and ``--d3rlpy-choices a,b,…|all`` switches d3rlpy's unmatched choices above on in seqrl's side
(``head_init``, ``unscaled_residuals``, ``ln_eps``, ``decay_embeddings``, ``window_end``, ``loss``).

The last printed line (stdout) is one JSON object; it is also written to ``runs/bench_dt/<tag>.json``.
Progress goes to stderr. ``return_ratio`` is seqrl / d3rlpy of the mean returns: Pendulum returns are
negative, so there < 1 means seqrl is better; ``normalized_delta`` (seqrl − d3rlpy, ×100 scores) reads
the usual way.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _machine import machine_info  # noqa: E402 — benchmarks/, the script's own folder

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "runs" / "bench_dt"

PRESETS = {
    # the seqrl Pendulum preset's model (preset dt/pendulum_medium_expert)
    "pendulum": dict(hidden=64, layers=2, heads=1, context=5, batch=32, lr=1e-3, warmup=50),
    # the paper's model (Chen et al. 2021): d 128, 3 layers, 1 head, K 20, batch 64, lr 1e-4
    "paper": dict(hidden=128, layers=3, heads=1, context=20, batch=64, lr=1e-4, warmup=50),
}


# d3rlpy 2.8.0's choices that seqrl does not share (module docstring, "Not matched"); `--d3rlpy-choices`
# switches them on in seqrl's side to measure what they do to the return.
D3RLPY_CHOICES = ("head_init", "unscaled_residuals", "ln_eps", "decay_embeddings", "window_end", "loss")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="3 seeds × 1000 steps each side (≈ 3 min)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="pendulum", help="model/optimiser sizes")
    p.add_argument("--steps", type=int, default=None, help="gradient steps per side and seed (1500; quick 1000)")
    p.add_argument("--seeds", type=str, default=None, help="comma-separated training seeds (0,1,2,3,4; quick 0,1,2)")
    p.add_argument("--round-steps", type=int, default=100, help="steps per interleaved round")
    p.add_argument("--hidden", type=int, help="d (preset)")
    p.add_argument("--layers", type=int, help="transformer blocks (preset)")
    p.add_argument("--heads", type=int, help="attention heads (preset)")
    p.add_argument("--context", type=int, help="K (preset)")
    p.add_argument("--batch", type=int, help="B (preset)")
    p.add_argument("--lr", type=float, help="learning rate (preset)")
    p.add_argument("--warmup", type=int, help="linear warm-up steps (preset)")
    p.add_argument("--schedule", choices=("constant", "cosine"), default="constant",
                   help="after the warm-up: constant lr (d3rlpy's own WarmupSchedulerFactory), or cosine decay\n"
                        "to 0.1·lr at the last step (seqrl's Pendulum preset; d3rlpy gets the same lambda\n"
                        "through a small LRSchedulerFactory defined here, as it ships none)")
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--embed-init", choices=("pytorch", "gpt2"), default="pytorch",
                   help="seqrl's model.embed_init; pytorch = d3rlpy's init of the linear embeddings")
    p.add_argument("--grad-clip", type=float, default=0.25)
    p.add_argument("--return-scale", type=float, default=1000.0)
    p.add_argument("--data-steps", type=int, default=50_000, help="size of the quick medium-expert dataset")
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--target", type=float, default=-150.0, help="target return R̂_0 for evaluation")
    p.add_argument("--episodes", type=int, default=20, help="evaluation episodes per side and seed")
    p.add_argument("--eval-seed", type=int, default=100, help="seed of the evaluation start states")
    p.add_argument("--speed-only", action="store_true", help="no evaluation")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tag", type=str, default=None, help="name of the JSON file under runs/bench_dt/")
    p.add_argument("--windows", choices=("start", "cover"), default="start",
                   help="seqrl's window sampler (`data.windows`; start = the official code's rule)")
    p.add_argument("--compile", action="store_true",
                   help="seqrl's forward/backward under torch.compile (inductor; needs a C++ compiler)")
    p.add_argument("--bf16", choices=("auto", "on", "off"), default="auto",
                   help="also train seqrl with bf16 autocast (run.bf16 on) as a third side, interleaved with\n"
                        "the other two and evaluated the same way; auto: where the CPU has AVX-512 BF16 or AMX-BF16")
    p.add_argument("--only", choices=("seqrl", "d3rlpy"), default=None,
                   help="train and evaluate one side alone (no speed comparison; for return ablations)")
    p.add_argument("--d3rlpy-choices", type=str, default="",
                   help="comma-separated d3rlpy choices to switch on in seqrl's side: " + ", ".join(D3RLPY_CHOICES)
                   + "; or 'all'")
    a = p.parse_args(argv)
    for k, v in PRESETS[a.preset].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.steps is None:
        a.steps = 1000 if a.quick else 1500
    if a.seeds is None:
        a.seeds = "0,1,2" if a.quick else "0,1,2,3,4"
    a.seed_list = [int(s) for s in a.seeds.split(",") if s.strip()]
    if a.steps < 1 or a.round_steps < 1 or not a.seed_list:
        p.error("--steps and --round-steps must be >= 1 and --seeds non-empty")
    a.choices = set(D3RLPY_CHOICES) if a.d3rlpy_choices == "all" else {
        c.strip() for c in a.d3rlpy_choices.split(",") if c.strip()}
    unknown = a.choices - set(D3RLPY_CHOICES)
    if unknown:
        p.error(f"--d3rlpy-choices: unknown {sorted(unknown)} (choose from {', '.join(D3RLPY_CHOICES)} or 'all')")
    if a.only == "d3rlpy" and a.choices:
        p.error("--d3rlpy-choices changes seqrl's side; it does nothing with --only d3rlpy")
    if a.tag is None:
        a.tag = f"{a.preset}{'_quick' if a.quick else ''}_{a.schedule}{'_speed' if a.speed_only else ''}"
        a.tag += f"_only_{a.only}" if a.only else ""
        a.tag += "_compile" if a.compile else ""
        a.tag += "_bf16" if a.bf16 == "on" else ""
        a.tag += "_cover" if a.windows == "cover" else ""
        a.tag += "_d3choices_" + "+".join(sorted(a.choices)) if a.choices else ""
    return a


# ---------------------------------------------------------------------------------------------------
# seqrl side: the pieces `seqrl.algos.dt.train` builds, and its loop body


class SeqrlSide:
    def __init__(self, args, dataset, seed: int, bf16: bool = False) -> None:
        from seqrl.training.run import make_optimizer
        from seqrl.algos.config import OptimConfig, RunConfig
        from seqrl.algos.dt import DTConfig, build_policy
        from seqrl.data.minari_data import DataConfig
        from seqrl.data.offline import Trajectories
        from seqrl.envs.evaluate import DTEvalConfig
        from seqrl.models.dt import DTModelConfig
        from seqrl.algos.dt import policy_info
        from seqrl.utils.seeding import seed_everything

        max_ep_len = max(len(ep) for ep in dataset.episodes)
        self.cfg = DTConfig(
            run=RunConfig(name="bench_dt", out_dir=str(OUT_DIR), seed=seed, threads=args.threads, progress=False,
                          bf16=bf16),
            data=DataConfig(dataset="quick:medium-expert", quick_steps=args.data_steps, quick_seed=args.data_seed,
                            windows=args.windows),
            model=DTModelConfig(hidden_size=args.hidden, n_layer=args.layers, n_head=args.heads,
                                context_len=args.context, max_ep_len=max_ep_len, dropout=args.dropout,
                                embed_init=args.embed_init),
            optim=OptimConfig(lr=args.lr, weight_decay=args.weight_decay, betas=(0.9, 0.999),
                              warmup_steps=args.warmup, schedule=args.schedule, grad_clip=args.grad_clip),
            eval=DTEvalConfig(episodes=args.episodes, target_returns=[args.target], seed=args.eval_seed),
            return_scale=args.return_scale, steps=args.steps, batch_size=args.batch)
        self.data = Trajectories(dataset, 1.0, max_ep_len, "dt.model", args.windows)
        seed_everything(seed)
        self.policy = build_policy(self.cfg, dataset, self.data)
        self.info = policy_info(self.cfg, dataset, self.data, self.policy)
        self.optimizer, self.scheduler = make_optimizer(self.policy, self.cfg.optim, self.cfg.steps, fused=True)
        self.clip = args.grad_clip if args.grad_clip > 0 else float("inf")
        self.bf16 = bf16  # the forward under bf16 autocast, as `train` runs it with run.bf16 on
        self.seed, self.K, self.B = seed, args.context, args.batch
        self.step_no = 0
        self.choices = args.choices
        self._apply_d3rlpy_choices(args)
        self.forward = torch.compile(self.policy) if args.compile else self.policy
        self.params = sum(p.numel() for p in self.policy.parameters())

    def _apply_d3rlpy_choices(self, args) -> None:
        """Switch on d3rlpy's unmatched choices named in `args.choices` (an ablation; none by default)."""
        pol, c = self.policy, self.choices
        if "head_init" in c:  # d3rlpy builds its output layer after the GPT-2 init: PyTorch's default
            pol.head.linear.reset_parameters()
        if "unscaled_residuals" in c:  # N(0, 0.02) without the 1/sqrt(2·layers) factor
            for block in pol.blocks:
                for proj in (block.attn_proj, block.mlp_proj):
                    torch.nn.init.normal_(proj.weight, std=0.02)
        if "ln_eps" in c:  # block and final LayerNorms (not the embedding LayerNorm)
            for block in pol.blocks:
                block.ln_1.eps = block.ln_2.eps = 3e-3
            pol.ln_f.eps = 3e-3
        if "decay_embeddings" in c:  # decay the linear R̂/state/action embeddings too, not nn.Embedding
            lam = self.scheduler.lr_lambdas[0]
            decay, rest = [], []
            for n, p in pol.named_parameters():
                (decay if p.ndim >= 2 and not n.startswith("embed_timestep") else rest).append(p)
            self.optimizer = torch.optim.AdamW(
                [{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lam)
        if "window_end" in c:  # K steps ending at a uniform step of an episode drawn ∝ length
            self.data.batch = _windows_ending_at_a_uniform_step.__get__(self.data)

    def _loss(self, pred: torch.Tensor, b: dict) -> torch.Tensor:
        from seqrl.core.losses import action_loss

        if "loss" not in self.choices:
            return action_loss(pred.float(), b["actions"], b["mask"], discrete=self.data.discrete)
        # d3rlpy: squared error in [−1, 1] action units, summed over action dimensions, averaged over all B·K
        half_range = (self.policy.action_high - self.policy.action_low) / 2  # (A,)
        per_step = (((pred.float() - b["actions"]) / half_range) ** 2).sum(-1)  # (B, K)
        return (per_step * b["mask"]).mean()

    def step(self) -> tuple[float, float, float]:
        """One gradient step as in `train`: (sample s, update s, loss)."""
        self.policy.train()
        t0 = time.perf_counter()
        b = self.data.batch(self.step_no, self.B, self.K, self.seed)
        t1 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            pred = self.forward(b["returns"], b["states"], b["actions"], b["timesteps"], b["mask"])  # (B, K, A)
        loss = self._loss(pred, b)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.clip)
        self.scheduler.get_last_lr()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        value = loss.item()
        t2 = time.perf_counter()
        self.step_no += 1
        return t1 - t0, t2 - t1, value

    def evaluate(self, args) -> np.ndarray:
        from seqrl.envs.evaluate import run_evaluation

        _, result = run_evaluation(self.policy, self.info, [args.target], args.episodes, args.eval_seed)
        return np.asarray(result.returns[0], dtype=np.float64)  # (episodes,)


def _windows_ending_at_a_uniform_step(self, step: int, batch_size: int, K: int, seed: int) -> dict:
    """`Trajectories.batch` with d3rlpy's window rule: the K steps *ending* at a uniform step (left-padded
    near the episode's start), the episode drawn ∝ its length."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    ep, end = self.draw_starts(g, batch_size, 0)  # (B,) each: end uniform in [0, T − 1]
    return self.windows_at(ep, end - (K - 1), K)


# ---------------------------------------------------------------------------------------------------
# d3rlpy side


def to_mdp_dataset(dataset):
    """The same episodes as a d3rlpy `MDPDataset` (observations s_0 … s_{T−1} of each episode)."""
    import d3rlpy

    obs, acts, rews, terms, touts = [], [], [], [], []
    for ep in dataset.episodes:
        T = len(ep)
        term = np.asarray(ep.terminations, dtype=np.float32).reshape(T)
        tout = np.asarray(ep.truncations, dtype=np.float32).reshape(T)
        if not term[-1] and not tout[-1]:
            tout = tout.copy()
            tout[-1] = 1.0
        obs.append(ep.observations[:-1].reshape(T, -1).astype(np.float32))
        acts.append(np.asarray(ep.actions, dtype=np.float32).reshape(T, -1))
        rews.append(np.asarray(ep.rewards, dtype=np.float32).reshape(T, 1))
        terms.append(term)
        touts.append(tout)
    return d3rlpy.dataset.MDPDataset(
        observations=np.concatenate(obs), actions=np.concatenate(acts), rewards=np.concatenate(rews),
        terminals=np.concatenate(terms), timeouts=np.concatenate(touts),
        action_space=d3rlpy.ActionSpace.CONTINUOUS)


MIN_LR_RATIO = 0.1  # seqrl's OptimConfig.min_lr_ratio default


def warmup_cosine_factory(warmup: int, total: int, min_ratio: float):
    """A d3rlpy `LRSchedulerFactory` with seqrl's warm-up + cosine lambda (`training.run.make_optimizer`)."""
    import dataclasses
    import math

    from d3rlpy.optimizers.lr_schedulers import LRSchedulerFactory
    from torch.optim.lr_scheduler import LambdaLR

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    @dataclasses.dataclass()
    class WarmupCosineSchedulerFactory(LRSchedulerFactory):
        def create(self, optim):
            return LambdaLR(optim, factor)

        @staticmethod
        def get_type() -> str:
            return "bench_warmup_cosine"

    return WarmupCosineSchedulerFactory()


class D3rlpySide:
    def __init__(self, args, dataset, mdp, state_mean, state_std, seed: int) -> None:
        import d3rlpy
        from d3rlpy.optimizers import GPTAdamWFactory, WarmupSchedulerFactory
        from d3rlpy.preprocessing import MinMaxActionScaler, MultiplyRewardScaler, StandardObservationScaler

        max_ep_len = max(len(ep) for ep in dataset.episodes)
        self.env_id = dataset.env_id
        d3rlpy.seed(seed)
        sched = WarmupSchedulerFactory(warmup_steps=args.warmup) if args.warmup > 0 else None
        if args.schedule == "cosine":
            sched = warmup_cosine_factory(args.warmup, args.steps, MIN_LR_RATIO)
        self.config = d3rlpy.algos.DecisionTransformerConfig(
            context_size=args.context,
            max_timestep=max_ep_len,  # timesteps 1 … T; the embedding has max_timestep + 1 rows
            batch_size=args.batch,
            learning_rate=args.lr,
            encoder_factory=d3rlpy.models.VectorEncoderFactory(hidden_units=[args.hidden],
                                                                exclude_last_activation=True),
            optim_factory=GPTAdamWFactory(betas=(0.9, 0.999), eps=1e-8, weight_decay=args.weight_decay,
                                          clip_grad_norm=args.grad_clip or None, lr_scheduler_factory=sched),
            num_heads=args.heads,
            num_layers=args.layers,
            attn_dropout=args.dropout,
            resid_dropout=args.dropout,
            embed_dropout=args.dropout,
            activation_type="relu",
            position_encoding_type=d3rlpy.PositionEncodingType.SIMPLE,
            compile_graph=False,
            observation_scaler=StandardObservationScaler(mean=np.asarray(state_mean, dtype=np.float32),
                                                         std=np.asarray(state_std, dtype=np.float32), eps=0.0),
            action_scaler=MinMaxActionScaler(minimum=np.asarray(dataset.action_low, dtype=np.float32).reshape(-1),
                                             maximum=np.asarray(dataset.action_high, dtype=np.float32).reshape(-1)),
            reward_scaler=MultiplyRewardScaler(multiplier=1.0 / args.return_scale),
        )
        self.algo = self.config.create(device=False)
        self.algo.build_with_dataset(mdp)
        self.mdp = mdp
        self.K, self.B = args.context, args.batch
        self.params = sum(p.numel() for p in self.algo.impl.modules.transformer.parameters())

    def step(self) -> tuple[float, float, float]:
        """One gradient step as in d3rlpy's `fit` loop: (sample s, update s, loss)."""
        t0 = time.perf_counter()
        batch = self.mdp.sample_trajectory_batch(self.B, length=self.K)
        t1 = time.perf_counter()
        loss = self.algo.update(batch)["loss"]
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, float(loss)

    def evaluate(self, args) -> np.ndarray:
        import gymnasium as gym
        from d3rlpy.algos import IdentityTransformerActionSampler

        from seqrl.envs.rollout import episode_rngs

        wrapper = self.algo.as_stateful_wrapper(target_return=args.target,
                                                action_sampler=IdentityTransformerActionSampler())
        returns = []
        env = gym.make(self.env_id)
        try:
            for i in range(args.episodes):
                wrapper.reset()
                obs, _ = env.reset(seed=episode_rngs(args.eval_seed, i)[0])
                reward, total = 0.0, 0.0
                while True:
                    action = wrapper.predict(obs, reward)
                    action = np.asarray(action, dtype=np.float32).reshape(env.action_space.shape)
                    obs, r, term, trunc, _ = env.step(action)
                    reward = float(r)
                    total += reward
                    if term or trunc:
                        break
                returns.append(total)
        finally:
            env.close()
        return np.asarray(returns, dtype=np.float64)


# ---------------------------------------------------------------------------------------------------


def run_round(side, n: int) -> dict:
    t0 = time.perf_counter()
    sample = update = 0.0
    losses = []
    for _ in range(n):
        s, u, loss = side.step()
        sample += s
        update += u
        losses.append(loss)
    wall = time.perf_counter() - t0
    return {"steps": n, "wall_s": wall, "sample_s": sample, "update_s": update, "loss": float(np.mean(losses))}


def med(xs) -> float:
    return float(statistics.median(xs))


def paired_ratio(slow_rounds: list[dict], fast_rounds: list[dict]) -> float:
    """Median over rounds of slow wall / fast wall (the two sides' rounds of the same interleaving turn)."""
    return med([a["wall_s"] / b["wall_s"] for a, b in zip(slow_rounds, fast_rounds)])


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    import d3rlpy

    from seqrl.data.minari_data import quick_dataset

    log(f"d3rlpy {d3rlpy.__version__}, torch {torch.__version__}, threads {torch.get_num_threads()}; "
        f"building quick:medium-expert ({args.data_steps} steps) …")
    t0 = time.perf_counter()
    dataset = quick_dataset(level="medium-expert", n_steps=args.data_steps, seed=args.data_seed)
    mdp = to_mdp_dataset(dataset)
    log(f"dataset: {len(dataset.episodes)} episodes, {dataset.env_id}, built in {time.perf_counter() - t0:.1f} s "
        f"(d3rlpy: {mdp.transition_count} transitions, {len(mdp.episodes)} episodes)")

    from seqrl.utils.dist import bf16_fast

    bf16_row = args.only != "d3rlpy" and (args.bf16 == "on" or (args.bf16 == "auto" and bf16_fast(torch.device("cpu"))))
    names = [args.only] if args.only else ["seqrl", "d3rlpy"]
    if bf16_row:
        names.insert(1, "seqrl_bf16")
    load_start = [round(x, 2) for x in os.getloadavg()]
    rounds = {n: [] for n in names}
    per_seed = []
    params = {}
    for seed in args.seed_list:
        ours = SeqrlSide(args, dataset, seed)  # built on either path: its state statistics feed d3rlpy's scaler
        mean, std = ours.data.state_stats()
        sides = {"seqrl": ours}
        if "seqrl_bf16" in names:
            sides["seqrl_bf16"] = SeqrlSide(args, dataset, seed, bf16=True)  # the same initial weights
        if "d3rlpy" in names:
            sides["d3rlpy"] = D3rlpySide(args, dataset, mdp, mean, std, seed)
        sides = {n: sides[n] for n in names}
        params = {n: side.params for n, side in sides.items()}
        log(f"seed {seed}: parameters {params}; {args.steps} steps each in rounds of {args.round_steps}"
            + (f"; seqrl with d3rlpy's {sorted(args.choices)}" if args.choices else ""))
        done, r = 0, 0
        last = {}
        while done < args.steps:
            n = min(args.round_steps, args.steps - done)
            order = list(sides.items())
            order = order[r % len(order):] + order[: r % len(order)]  # each side first in turn
            for name, side in order:
                res = run_round(side, n)
                res.update(seed=seed, round=r)
                rounds[name].append(res)
                last[name] = res
            done += n
            r += 1
            log(f"  seed {seed} step {done}/{args.steps}: " + ", ".join(
                f"{name} {n / last[name]['wall_s']:.1f} steps/s (loss {last[name]['loss']:.4f}"
                + (", scaled-action units)" if name == "d3rlpy" else ")") for name in sides))
        entry = {"seed": seed, **{f"final_loss_{name}": last[name]["loss"] for name in sides}}
        if not args.speed_only and args.episodes > 0:
            for name, side in sides.items():
                t0 = time.perf_counter()
                ret = side.evaluate(args)
                entry.update({f"return_{name}": float(ret.mean()), f"return_std_{name}": float(ret.std()),
                              f"normalized_{name}": float(np.mean(dataset.normalized(ret)))})
                log(f"  seed {seed} eval R̂_0={args.target:g}, {args.episodes} episodes: {name} {ret.mean():.1f} "
                    f"(norm {entry[f'normalized_{name}']:.1f}, {time.perf_counter() - t0:.1f} s)")
        per_seed.append(entry)

    out = {}
    for name in names:
        out[f"steps_per_s_{name}"] = round(med([x["steps"] / x["wall_s"] for x in rounds[name]]), 3)
    both = "seqrl" in names and "d3rlpy" in names
    if both:
        upd = {n: med([x["steps"] / x["update_s"] for x in rounds[n]]) for n in names}
        sample_ms = {n: 1000 * med([x["sample_s"] / x["steps"] for x in rounds[n]]) for n in names}
        paired = paired_ratio(rounds["d3rlpy"], rounds["seqrl"])
        out.update(
            steps_per_s_ratio=round(out["steps_per_s_seqrl"] / out["steps_per_s_d3rlpy"], 3),
            steps_per_s_ratio_paired_median=round(paired, 3),
            update_steps_per_s_seqrl=round(upd["seqrl"], 3),
            update_steps_per_s_d3rlpy=round(upd["d3rlpy"], 3),
            update_ratio=round(upd["seqrl"] / upd["d3rlpy"], 3),
            sample_ms_seqrl=round(sample_ms["seqrl"], 3),
            sample_ms_d3rlpy=round(sample_ms["d3rlpy"], 3),
        )
    if bf16_row:
        upd16 = {n: med([x["steps"] / x["update_s"] for x in rounds[n]]) for n in ("seqrl", "seqrl_bf16")}
        out.update(
            bf16_vs_fp32_paired_median=round(paired_ratio(rounds["seqrl"], rounds["seqrl_bf16"]), 3),
            update_steps_per_s_seqrl_bf16=round(upd16["seqrl_bf16"], 3),
            update_ratio_bf16_vs_fp32=round(upd16["seqrl_bf16"] / upd16["seqrl"], 3),
        )
        if "d3rlpy" in names:
            out.update(
                steps_per_s_ratio_bf16=round(out["steps_per_s_seqrl_bf16"] / out["steps_per_s_d3rlpy"], 3),
                steps_per_s_ratio_bf16_paired_median=round(paired_ratio(rounds["d3rlpy"], rounds["seqrl_bf16"]), 3),
            )
    out["rounds_per_side"] = len(rounds[names[0]])
    if not args.speed_only and args.episodes > 0:
        ret = {n: [e[f"return_{n}"] for e in per_seed] for n in names}
        norm = {n: [e[f"normalized_{n}"] for e in per_seed] for n in names}
        for n in names:
            out.update({f"return_{n}": round(float(np.mean(ret[n])), 2),
                        f"normalized_{n}": round(float(np.mean(norm[n])), 2),
                        f"normalized_std_{n}": round(float(np.std(norm[n])), 2)})
        if bf16_row:
            for key, other in (("normalized_delta_bf16", "d3rlpy"), ("normalized_delta_bf16_vs_fp32", "seqrl")):
                if other not in names:
                    continue
                d = np.array(norm["seqrl_bf16"]) - np.array(norm[other])  # paired by seed
                out[key] = round(float(d.mean()), 2)
                out[key + "_se"] = round(float(d.std(ddof=1) / np.sqrt(len(d))), 2) if len(d) > 1 else None
        if both:
            diff = np.array(norm["seqrl"]) - np.array(norm["d3rlpy"])  # paired by seed
            out.update(
                return_ratio=round(float(np.mean(ret["seqrl"]) / np.mean(ret["d3rlpy"])), 3),
                return_ratio_note="seqrl/d3rlpy mean return; Pendulum returns are negative, so < 1 = seqrl better",
                normalized_delta=round(float(diff.mean()), 2),
                normalized_delta_se=round(float(diff.std(ddof=1) / np.sqrt(len(diff))), 2) if len(diff) > 1 else None,
            )
        out["data_normalized_mean"] = round(float(np.mean(dataset.normalized(dataset.returns))), 2)
    out.update(
        per_seed=per_seed,
        settings=dict(preset=args.preset, hidden=args.hidden, layers=args.layers, heads=args.heads,
                      context=args.context, batch=args.batch, steps=args.steps, round_steps=args.round_steps,
                      seeds=args.seed_list, lr=args.lr, warmup=args.warmup, schedule=f"warmup+{args.schedule}",
                      weight_decay=args.weight_decay, dropout=args.dropout, grad_clip=args.grad_clip,
                      return_scale=args.return_scale, target=args.target, episodes=args.episodes,
                      eval_seed=args.eval_seed, dataset=f"quick:medium-expert/{args.data_steps}/seed{args.data_seed}",
                      threads=args.threads, dtype="float32 (seqrl_bf16: bf16 autocast, fp32 master weights)",
                      parameters=params, sides=names,
                      seqrl_d3rlpy_choices=sorted(args.choices), seqrl_compile=args.compile,
                      seqrl_windows=args.windows,
                      d3rlpy=d3rlpy.__version__,
                      torch=torch.__version__),
        machine=machine_info(),
        load_avg_start_1_5_15=load_start,
        wall_s=round(time.perf_counter() - t_start, 1),
    )
    path = OUT_DIR / f"{args.tag}.json"
    path.write_text(json.dumps({**out, "rounds": rounds}, indent=1), encoding="utf-8")
    log(f"wrote {path.relative_to(ROOT)}")
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main()
