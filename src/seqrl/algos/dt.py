"""Decision Transformer, behaviour cloning and %BC on offline trajectory datasets.

    seqrl train dt --config configs/dt/pendulum_medium_replay.yaml [--steps=3000 ...] [--resume]
    seqrl train bc --config configs/dt/pendulum_medium_replay.yaml [--data.top_fraction=0.1]   # BC / %BC
    seqrl eval dt --checkpoint runs/<name>/checkpoint-3000 --target-returns=-150,-600

Decision Transformer (Chen et al. 2021, official code): batches of B windows of K consecutive steps,
episodes drawn with probability ∝ their length and the window start uniform within the episode
(windows running past the end are left-padded); the action loss (MSE, or cross-entropy for discrete
actions) on real steps only; AdamW with linear warm-up and gradient clipping at 0.25; evaluation in
the environment conditioned on target returns, R̂ decremented by the observed rewards. States are
normalised with the dataset's mean/std and R̂ divided by ``return_scale`` inside the model.

BC is an MLP from the current state to the action (the DT paper's BC baseline; the official
``MLPBCModel``) trained on single steps drawn uniformly; %BC is BC on the best episodes by return
holding ``data.top_fraction`` of the steps (`seqrl.core.sequences.top_return_episodes`). The same
selection applies to DT when set.

The data order is a pure function of (seed, step) and dropout draws from the global RNG that the
checkpoint restores, so a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from seqrl.algos.common import (
    OptimConfig,
    RunConfig,
    check_finite,
    load_resume_checkpoint,
    make_optimizer,
    prepare_run_dir,
    set_threads,
)
from seqrl.core.sequences import action_loss, returns_to_go, top_return_episodes
from seqrl.data.offline import DatasetError, OfflineDataset, normalized_score
from seqrl.envs.evaluate import evaluate_policy, target_label, warn_far_targets
from seqrl.models.dt import DecisionTransformer, MLPPolicy
from seqrl.models.odt import OnlineDecisionTransformer
from seqrl.utils.checkpoint import STATE_FILE, CheckpointError, load_checkpoint, save_checkpoint
from seqrl.utils.metrics import MetricsLogger, read_metrics
from seqrl.utils.plots import plot_bars, plot_metrics
from seqrl.utils.progress import progress_bar
from seqrl.utils.seeding import seed_everything

QUICK_PREFIX = "quick:"


@dataclass
class DataConfig:
    """Which offline dataset and which of its episodes."""

    dataset: str = "quick:medium-replay"
    """A Minari dataset id present locally (``seqrl/hopper/medium-v0``; build it with `seqrl data minari`),
    a Minari dataset folder, or ``quick:<level>``: the small Pendulum-v1 dataset built in memory
    (`seqrl.data.minari_data.quick_dataset`)."""
    quick_steps: int = 4000
    """Steps of the ``quick:`` dataset (Pendulum episodes are 200 steps)."""
    quick_seed: int = 0
    """Seed of the ``quick:`` dataset (independent of the run seed)."""
    top_fraction: float = 1.0
    """Train on the best episodes by return holding this fraction of the steps (%BC: 0.1 = 10%BC;
    the official code's ``pct_traj``). 1: all episodes."""
    windows: Literal["start", "cover"] = "start"
    """How training windows are drawn (episodes ∝ their weight). ``start``: a start step uniform in the
    episode, K steps from there, left-padded near its end (the official code's rule; an episode's first
    K − 1 steps are then in fewer windows than the rest, step 0 in one). ``cover``: a start uniform in
    [−(K − 1), T − 1], so every step of an episode is in exactly K windows (left-padded near its start,
    as at evaluation, and near its end)."""

    def __post_init__(self) -> None:
        if self.windows not in ("start", "cover"):
            raise ValueError(f"data.windows must be 'start' or 'cover' (got {self.windows!r})")
        if not self.dataset:
            raise ValueError("data.dataset must name a dataset (a Minari id, a folder or quick:<level>)")
        if not 0 < self.top_fraction <= 1:
            raise ValueError(f"data.top_fraction must be in (0, 1] (got {self.top_fraction})")
        if self.quick_steps < 1:
            raise ValueError(f"data.quick_steps must be >= 1 (got {self.quick_steps})")


@dataclass
class DTModelConfig:
    """The Decision Transformer (paper: d 128, 3 layers, 1 head, K 20, dropout 0.1)."""

    hidden_size: int = 128
    """d, the token width."""
    n_layer: int = 3
    """Transformer blocks."""
    n_head: int = 1
    """Attention heads (hidden_size must be divisible by it)."""
    context_len: int = 20
    """K, steps per context window (3K tokens)."""
    max_ep_len: int = 1000
    """Size of the timestep embedding; must cover the longest episode of the dataset."""
    dropout: float = 0.1
    """Dropout on embeddings, attention weights and residuals."""
    activation: Literal["relu", "gelu"] = "relu"
    """MLP non-linearity (the official gym code uses relu)."""
    embed_init: Literal["gpt2", "pytorch"] = "gpt2"
    """Init of the linear R̂/state/action embeddings: GPT-2's N(0, 0.02) like every other layer, or
    PyTorch's default as in the official code and d3rlpy. Measured (docs/algorithms/dt.md): "pytorch"
    +17 points on quick Pendulum, the same on Hopper-medium; the Walker2d-medium DT with an action
    history falls under either init. Default gpt2: every MuJoCo result was measured with it."""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "n_layer", "n_head", "context_len", "max_ep_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1 (got {getattr(self, name)})")
        if self.hidden_size % self.n_head:
            raise ValueError(f"model.hidden_size ({self.hidden_size}) must be divisible by model.n_head ({self.n_head})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"model.dropout must be in [0, 1) (got {self.dropout})")


@dataclass
class BCModelConfig:
    """The behaviour-cloning MLP (used by ``seqrl train bc``)."""

    hidden_size: int = 256
    """Width of each hidden layer."""
    n_layer: int = 2
    """Hidden layers."""
    dropout: float = 0.1
    """Dropout after each hidden layer."""

    def __post_init__(self) -> None:
        if self.hidden_size < 1 or self.n_layer < 1:
            raise ValueError(f"bc.hidden_size and bc.n_layer must be >= 1 (got {self.hidden_size}, {self.n_layer})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"bc.dropout must be in [0, 1) (got {self.dropout})")


@dataclass
class DTEvalConfig:
    """Evaluation rollouts in the dataset's environment."""

    every: int = 0
    """Steps between evaluations (0: only after the last step)."""
    episodes: int = 10
    """Episodes per target return (0: no evaluation)."""
    target_returns: list[float] = field(default_factory=lambda: [3600.0, 1800.0])
    """Raw target returns R̂_0 the DT is conditioned on (paper: hopper 3600/1800, halfcheetah
    12000/6000, walker 5000/2500); ignored by BC."""
    max_steps: int = 0
    """Stop episodes after this many steps (0: the environment's time limit)."""
    seed: int = 100
    """Seed of the evaluation episodes (the same start states for every run and target)."""

    def __post_init__(self) -> None:
        if self.every < 0 or self.episodes < 0 or self.max_steps < 0:
            raise ValueError("eval.every, eval.episodes and eval.max_steps must be >= 0")
        if not self.target_returns:
            raise ValueError("eval.target_returns must hold at least one target return")


def _optim_defaults() -> OptimConfig:
    # The official DT: AdamW lr 1e-4, weight decay 1e-4, warm-up 10k steps, then constant; clip 0.25.
    return OptimConfig(lr=1e-4, weight_decay=1e-4, betas=(0.9, 0.999), warmup_steps=10_000, schedule="constant",
                       grad_clip=0.25)


@dataclass
class DTConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(name="auto"))
    """``run.name: auto`` becomes ``<method>_<dataset>[_top<percent>]_s<seed>``."""
    data: DataConfig = field(default_factory=DataConfig)
    model: DTModelConfig = field(default_factory=DTModelConfig)
    bc: BCModelConfig = field(default_factory=BCModelConfig)
    optim: OptimConfig = field(default_factory=_optim_defaults)
    eval: DTEvalConfig = field(default_factory=DTEvalConfig)
    method: Literal["dt", "bc"] = "dt"
    """What to train: the Decision Transformer or the BC MLP (``seqrl train bc`` sets bc)."""
    return_scale: float = 1000.0
    """R̂ is divided by this before embedding (official: 1000 for MuJoCo)."""
    steps: int = 100_000
    """Gradient steps (paper: 100k — ≈ 9 h at the paper's size on one CPU thread; presets use fewer)."""
    batch_size: int = 64
    """Windows (DT) or single steps (BC) per gradient step."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps and batch_size must be >= 1 (got {self.steps}, {self.batch_size})")
        if not self.return_scale > 0:
            raise ValueError(f"return_scale must be > 0 (got {self.return_scale})")
        if self.run.name == "auto":
            slug = re.sub(r"[^A-Za-z0-9.]+", "-", self.data.dataset).strip("-")
            top = f"_top{self.data.top_fraction * 100:g}" if self.data.top_fraction < 1 else ""
            self.run.name = f"{self.method}_{slug}{top}_s{self.run.seed}"


@dataclass
class BCConfig(DTConfig):
    """`DTConfig` with BC as the method (what ``seqrl train bc`` builds)."""

    method: Literal["dt", "bc"] = "bc"


# ---------------------------------------------------------------------------------------------------
# Data


def load_dataset(cfg: DataConfig) -> OfflineDataset:
    """The dataset `cfg.dataset` names (see `DataConfig.dataset`)."""
    from seqrl.data.minari_data import load_offline, quick_dataset

    if cfg.dataset.startswith(QUICK_PREFIX):
        return quick_dataset(level=cfg.dataset[len(QUICK_PREFIX):], n_steps=cfg.quick_steps, seed=cfg.quick_seed)
    return load_offline(cfg.dataset)


class Trajectories:
    """The selected episodes as flat tensors, and the batch of each step.

    states (N, S) raw s_t, actions (N, A) / (N,), rtg (N,) raw R̂_t, timestep (N,) t within the
    episode, for all N steps of the episodes back to back; `starts`/`lengths` (E,) locate each episode.
    """

    def __init__(self, dataset: OfflineDataset, top_fraction: float, max_ep_len: int, field_prefix: str,
                 windows: str = "start") -> None:
        if windows not in ("start", "cover"):
            raise ValueError(f"windows must be 'start' or 'cover' (got {windows!r})")
        self.windows = windows
        for ep in dataset.episodes:  # the dataset may have been changed since it was built
            ep.validate()
        returns = torch.tensor(dataset.returns)  # (E_all,)
        lengths = torch.tensor([len(ep) for ep in dataset.episodes])  # (E_all,)
        keep = top_return_episodes(returns, lengths, top_fraction).tolist()
        self.episodes = [dataset.episodes[i] for i in sorted(keep)]
        for ep in self.episodes:
            where = f"dataset {dataset.name or '?'}: episode {ep.id}"
            if len(ep) > max_ep_len:
                raise DatasetError(f"{where} has {len(ep)} steps, more than {field_prefix}.max_ep_len = {max_ep_len}; "
                                   f"raise {field_prefix}.max_ep_len")
            if dataset.discrete:
                if ep.actions.ndim != 1 or ep.actions.min() < 0 or ep.actions.max() >= dataset.action_dim:
                    raise DatasetError(f"{where}: discrete actions must be integers in [0, {dataset.action_dim})")
            elif ep.actions.ndim != 2 or ep.actions.shape[1] != dataset.action_dim:
                raise DatasetError(f"{where}: actions must have shape (T, {dataset.action_dim}) "
                                   f"(got {tuple(ep.actions.shape)})")
        self.discrete = dataset.discrete
        self.returns = np.array([ep.ret for ep in self.episodes])  # (E,)
        self.lengths = torch.tensor([len(ep) for ep in self.episodes])  # (E,)
        self.starts = torch.cumsum(self.lengths, 0) - self.lengths  # (E,)
        self.states = torch.from_numpy(np.concatenate(
            [ep.observations[:-1].reshape(len(ep), -1) for ep in self.episodes]).astype(np.float32))  # (N, S)
        acts = np.concatenate([ep.actions for ep in self.episodes])
        self.actions = torch.from_numpy(acts.astype(np.int64 if self.discrete else np.float32))  # (N, A) / (N,)
        self.rtg = torch.cat([returns_to_go(torch.from_numpy(ep.rewards.astype(np.float64))).float()
                              for ep in self.episodes])  # (N,)
        self.timestep = torch.cat([torch.arange(len(ep)) for ep in self.episodes])  # (N,)

    @property
    def n_steps(self) -> int:
        return int(self.lengths.sum())

    def state_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of the training states (std ≥ 1e-6)."""
        s = self.states.double()
        return s.mean(0).numpy(), s.std(0, unbiased=False).clamp(min=1e-6).numpy()

    def batch(self, step: int, batch_size: int, K: int, seed: int) -> dict[str, torch.Tensor]:
        """Batch `step`: B windows of K steps, left-padded; a pure function of (seed, step)."""
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        ep, start = self.draw_starts(g, batch_size, K - 1 if self.windows == "cover" else 0)
        return self.windows_at(ep, start, K)

    def draw_starts(self, g: torch.Generator, batch_size: int, lead: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(episode, start) of B windows: a start uniform in [−lead, T − 1] of an episode drawn ∝ T + lead
        (lead 0: the ``start`` rule; K − 1: ``cover``)."""
        weights = (self.lengths + lead).double()  # (E,)
        ep = torch.multinomial(weights / weights.sum(), batch_size, replacement=True, generator=g)  # (B,)
        span = self.lengths[ep] + lead  # (B,)
        return ep, (torch.rand(batch_size, generator=g, dtype=torch.float64) * span).long() - lead  # (B,), (B,)

    def windows_at(self, ep: torch.Tensor, start: torch.Tensor, K: int) -> dict[str, torch.Tensor]:
        """The K-step windows of episodes `ep` (B,) from `start` (B,; may be < 0), cut to the episode and
        left-padded: states, actions, returns (R̂), timesteps and mask (1 on real steps)."""
        first = start.clamp(min=0)  # (B,) the window's first real step
        n_real = torch.minimum(self.lengths[ep], start + K) - first  # (B,) in [1, K]
        offset = torch.arange(K)[None, :] - (K - n_real)[:, None]  # (B, K); < 0 on the left padding
        mask = (offset >= 0).long()  # (B, K)
        flat = self.starts[ep][:, None] + first[:, None] + offset.clamp(min=0)  # (B, K)
        keep = mask.bool()
        states = self.states[flat] * keep[..., None]  # (B, K, S)
        actions = self.actions[flat] * (keep if self.discrete else keep[..., None])  # (B, K[, A])
        return {"states": states, "actions": actions, "returns": self.rtg[flat] * keep,  # (B, K)
                "timesteps": self.timestep[flat] * keep, "mask": mask}


# ---------------------------------------------------------------------------------------------------
# Policy, checkpoints, evaluation


def build_policy(cfg: DTConfig, dataset: OfflineDataset, data: Trajectories) -> torch.nn.Module:
    """A fresh DT or BC MLP with the dataset's state normaliser and action bounds."""
    mean, std = data.state_stats()
    common = dict(state_dim=data.states.shape[1], action_dim=int(dataset.action_dim),
                  action_head="categorical" if dataset.discrete else "tanh",
                  action_low=None if dataset.discrete else dataset.action_low,
                  action_high=None if dataset.discrete else dataset.action_high, state_mean=mean, state_std=std)
    if cfg.method == "bc":
        b = cfg.bc
        return MLPPolicy(hidden_size=b.hidden_size, n_layer=b.n_layer, dropout=b.dropout, **common)
    m = cfg.model
    return DecisionTransformer(hidden_size=m.hidden_size, n_layer=m.n_layer, n_head=m.n_head,
                               context_len=m.context_len, max_ep_len=m.max_ep_len, dropout=m.dropout,
                               activation=m.activation, embed_init=m.embed_init, return_scale=cfg.return_scale,
                               **common)


def policy_info(cfg: DTConfig, dataset: OfflineDataset, data: Trajectories, policy: torch.nn.Module) -> dict:
    """What a checkpoint needs besides its weights to rebuild and evaluate the policy (JSON)."""
    return {"method": cfg.method, "model": dict(policy.kwargs), "env_id": dataset.env_id, "dataset": dataset.name,
            "ref_min_score": dataset.ref_min_score, "ref_max_score": dataset.ref_max_score,
            "data_returns": {"min": float(data.returns.min()), "max": float(data.returns.max()),
                             "mean": float(data.returns.mean()), "episodes": len(data.returns)},
            "target_returns": list(cfg.eval.target_returns)}


def load_policy_checkpoint(path: str | Path) -> tuple[torch.nn.Module, dict]:
    """(policy, info) from a DT, BC or Online DT checkpoint folder (`seqrl train dt|bc|odt`); errors name the path."""
    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(f"{path}: not a checkpoint (no {STATE_FILE})")
    try:
        info = json.loads(state_file.read_text(encoding="utf-8"))["policy"]
        cls = {"dt": DecisionTransformer, "bc": MLPPolicy, "odt": OnlineDecisionTransformer}[info["method"]]
        policy = cls(**info["model"])
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{state_file}: not a Decision Transformer / BC / Online DT checkpoint ({e!r})") from e
    load_checkpoint(path, policy, restore_rng=False)
    return policy.eval(), info


def run_evaluation(policy: torch.nn.Module, info: dict, targets: list[float], episodes: int, seed: int,
                   max_steps: int = 0, env=None) -> tuple[dict[str, float], object]:
    """Metrics of `evaluate_policy` (BC: one unconditioned condition); normalised ×100 when the data has
    reference returns. `env` overrides the dataset's environment id (an id or a factory)."""
    env = env or info["env_id"]
    if not env:
        raise ValueError("the dataset names no environment (env_id); set eval.episodes=0 or give one")
    conditions = [None] if info["method"] == "bc" else [float(t) for t in targets]
    result = evaluate_policy(policy, env, conditions, episodes=episodes, seed=seed, max_steps=max_steps)
    lo, hi = info.get("ref_min_score"), info.get("ref_max_score")
    normalize = None if lo is None or hi is None else (lambda r: normalized_score(r, lo, hi))
    return result.metrics(normalize), result


# ---------------------------------------------------------------------------------------------------
# Training


def train(cfg: DTConfig, dataset: OfflineDataset | None = None, env=None) -> dict[str, float]:
    """Train a DT (or BC / %BC) on `dataset` (default: the one `cfg.data` names); returns the final metrics.

    `env` (a gymnasium id or an environment factory) overrides the dataset's environment for evaluation.
    """
    set_threads(cfg.run.threads)
    resume_from = prepare_run_dir(cfg.run, cfg)
    run_dir = cfg.run.dir
    prefix = cfg.method

    dataset = dataset if dataset is not None else load_dataset(cfg.data)
    max_ep_len = MLPPolicy.max_ep_len if cfg.method == "bc" else cfg.model.max_ep_len
    data = Trajectories(dataset, cfg.data.top_fraction, max_ep_len, f"{prefix}.model", cfg.data.windows)
    K = 1 if cfg.method == "bc" else cfg.model.context_len
    seed_everything(cfg.run.seed)  # after the dataset: building one may draw from the global RNGs
    policy = build_policy(cfg, dataset, data)
    info = policy_info(cfg, dataset, data, policy)
    if cfg.method == "dt" and cfg.eval.episodes:
        warn_far_targets(cfg.eval.target_returns, dataset.returns, f"{prefix}.eval.target_returns")
    optimizer, scheduler = make_optimizer(policy, cfg.optim, cfg.steps, fused=True)

    start = 0
    if resume_from is not None:
        resume_from, state = load_resume_checkpoint(run_dir, lambda p: load_checkpoint(p, policy, optimizer, scheduler))
        start = state["step"]
        print(f"resumed from {resume_from} at step {start}")
    logger = MetricsLogger(run_dir / "metrics.jsonl", resume_step=start if resume_from else None)
    if start == 0:
        first = {"model/parameters": sum(p.numel() for p in policy.parameters()),
                 "data/episodes": len(data.returns), "data/steps": data.n_steps,
                 "data/return_mean": float(data.returns.mean()), "data/return_max": float(data.returns.max())}
        if dataset.ref_min_score is not None and dataset.ref_max_score is not None:
            first["data/normalized_mean"] = float(np.mean(dataset.normalized(data.returns)))
        logger.log(0, first)

    def run_eval() -> dict[str, float]:
        metrics, _ = run_evaluation(policy, info, cfg.eval.target_returns, cfg.eval.episodes, cfg.eval.seed,
                                    cfg.eval.max_steps, env=env)
        return metrics

    final: dict[str, float] = {}
    clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
    window_s, window_steps = 0.0, 0
    policy.train()
    with progress_bar(cfg.steps, f"{prefix} {cfg.run.name}", disable=not cfg.run.progress) as bar:
        bar.advance(start)
        try:
            for step in range(start, cfg.steps):
                t0 = time.perf_counter()
                b = data.batch(step, cfg.batch_size, K, cfg.run.seed)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.run.bf16):
                    if cfg.method == "bc":
                        pred = policy(b["states"])  # (B, 1, A) or (B, 1, n)
                    else:
                        pred = policy(b["returns"], b["states"], b["actions"], b["timesteps"], b["mask"])  # (B, K, A)
                loss = action_loss(pred.float(), b["actions"], b["mask"], discrete=data.discrete)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), clip)
                check_finite(step + 1, cfg.run.on_nonfinite, loss=loss.item(), grad_norm=grad_norm)
                lr = scheduler.get_last_lr()[0]
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                done = step + 1
                window_s += time.perf_counter() - t0
                window_steps += 1
                metrics: dict[str, float] = {}
                if done % cfg.run.log_every == 0 or done == cfg.steps:
                    metrics = {"loss/action": loss.item(), "stats/grad_norm": float(grad_norm), "stats/lr": lr,
                               "perf/steps_per_s": window_steps / window_s}
                    window_s, window_steps = 0.0, 0
                if cfg.eval.episodes and ((cfg.eval.every and done % cfg.eval.every == 0) or done == cfg.steps):
                    metrics.update(run_eval())
                if metrics:
                    logger.log(done, metrics)
                    final.update(metrics)
                if (cfg.run.save_every and done % cfg.run.save_every == 0) or done == cfg.steps:
                    save_checkpoint(run_dir, done, policy, optimizer=optimizer, scheduler=scheduler,
                                    state={"policy": info}, keep_last=cfg.run.keep_last)
                shown = {k: v for k, v in final.items() if k.startswith("eval/return") and "std" not in k}
                bar.advance(1, loss=loss.item(), **{k.split("/", 1)[1]: v for k, v in list(shown.items())[:2]})
        except KeyboardInterrupt:
            print(f"\ninterrupted; checkpoints in {run_dir} are intact (resume with --resume)")
            raise
        finally:
            logger.close()
    _plot(cfg, run_dir, final)
    return final


def _plot(cfg: DTConfig, run_dir: Path, final: dict[str, float]) -> None:
    """plots/<method>.png (loss, return vs step, lr) and, for DT, plots/targets.png (achieved vs target)."""
    records = read_metrics(run_dir / "metrics.jsonl")
    keys = ["loss/action"]
    if cfg.method == "bc":
        keys += ["eval/return", "eval/normalized"]
    else:
        for t in cfg.eval.target_returns:
            keys += [f"eval/return/{target_label(t)}", f"eval/normalized/{target_label(t)}"]
    plot_metrics(records, keys + ["stats/lr", "perf/steps_per_s"], run_dir / "plots" / f"{cfg.method}.png",
                 title=f"{cfg.method.upper()} {cfg.run.name}")
    achieved = [final.get(f"eval/return/{target_label(t)}") for t in cfg.eval.target_returns]
    if cfg.method == "dt" and all(a is not None for a in achieved):
        labels = [target_label(t) for t in cfg.eval.target_returns]
        plot_bars(labels, {"target": list(cfg.eval.target_returns), "achieved": achieved},
                  run_dir / "plots" / "targets.png", title=f"achieved vs target return ({cfg.run.name})",
                  ylabel="return")
