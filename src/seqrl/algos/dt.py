"""Decision Transformer, behaviour cloning and %BC on offline trajectory datasets.

    seqrl train dt --config pendulum_medium_replay [--steps=3000 ...] [--resume]
    seqrl train bc --config pendulum_medium_replay [--data.top_fraction=0.1]   # BC / %BC
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

import copy
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.dt_config import BCConfig, BCModelConfig, DTConfig, auto_run_name
from seqrl.core.losses import action_loss
from seqrl.data.minari_data import DataConfig, load_dataset
from seqrl.data.offline import OfflineDataset, Trajectories
from seqrl.envs.evaluate import DTEvalConfig, evaluate_on_main, target_label, warn_far_targets
from seqrl.models.dt import DecisionTransformer, DTModelConfig, MLPPolicy
from seqrl.training.api import RunTrainer
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.run import make_optimizer, releases_run_folder
from seqrl.utils import dist
from seqrl.utils.dist import bf16_autocast
from seqrl.utils.metrics import read_metrics
from seqrl.utils.plots import plot_bars, plot_metrics
from seqrl.utils.seeding import seed_everything


# ---------------------------------------------------------------------------------------------------
# Data


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


class OfflineRL:
    """DT / BC / %BC as a run-loop method: one step is a batch of context windows (the global batch drawn on
    every process, each keeping its rows), the action loss, one update; the evaluation rolls out
    return-conditioned episodes (none without ``eval.episodes``)."""

    def __init__(self, cfg: DTConfig, loop: RunLoop, policy: torch.nn.Module, data: Trajectories, info: dict,
                 context: int, env=None) -> None:
        self.cfg, self.loop, self.policy, self.data, self.info, self.K, self.env = cfg, loop, policy, data, info, context, env
        self.rows = dist.shard(cfg.batch_size)
        self.window = [0.0, 0]  # seconds and steps since the last record: perf/steps_per_s
        self.live: dict[str, float] = {}  # the bar's loss, every step
        if not cfg.eval.episodes:
            self.evaluate = None  # no held-out evaluation

    def step(self, i: int, log: bool) -> dict[str, float]:
        cfg, data, device, world = self.cfg, self.data, self.loop.device, dist.world_size()
        t0 = time.perf_counter()
        b = data.batch(i, cfg.batch_size, self.K, cfg.run.seed)
        if world > 1:  # torchrun: every process draws the global batch and keeps its rows
            real = float(b["mask"].sum())
            b = {k: v[self.rows] for k, v in b.items()}
            share = float(b["mask"].sum()) / max(real, 1.0)  # weight of this share in the global mean
        b = {k: v.to(device) for k, v in b.items()}
        with bf16_autocast(device, cfg.run.use_bf16):
            if cfg.method == "bc":
                pred = self.policy(b["states"])  # (B, 1, A) or (B, 1, n)
            else:
                pred = self.policy(b["returns"], b["states"], b["actions"], b["timesteps"], b["mask"])  # (B, K, A)
        loss = action_loss(pred.float(), b["actions"], b["mask"], discrete=data.discrete)
        if world > 1:
            loss = loss * share
            loss.backward()
            loss = dist.all_reduce_sum(loss.detach().reshape(1))[0]
        else:
            loss.backward()
        stepped = self.loop.update(i, loss.item())  # gradients Σ over processes: Σ_r share_r · loss_r = the batch's loss
        self.window[0] += time.perf_counter() - t0
        self.window[1] += 1
        self.live["loss"] = loss.item()
        if not log:
            return {}
        out = {"loss/action": loss.item(), "stats/grad_norm": stepped.norm, "stats/lr": stepped.lr,
               "perf/steps_per_s": self.window[1] / self.window[0]}
        self.window[:] = [0.0, 0]
        return out

    def evaluate(self) -> dict[str, float]:
        metrics = evaluate_on_main(self.policy, self.info, self.cfg.eval, self.env)
        return metrics

    def state(self) -> dict:
        return {"policy": self.info}

    def show(self, m: dict[str, float]) -> dict[str, float]:
        shown = {k: v for k, v in m.items() if k.startswith("eval/return") and "std" not in k}
        return {**self.live, **{k.split("/", 1)[1]: v for k, v in list(shown.items())[:2]}}


# ---------------------------------------------------------------------------------------------------
# Training


@releases_run_folder
def train(cfg: DTConfig, dataset: OfflineDataset | None = None, env=None) -> dict[str, float]:
    """Train a DT (or BC / %BC) on `dataset` (default: the one `cfg.data` names); returns the final metrics.

    `env` (a gymnasium id or an environment factory) overrides the dataset's environment for evaluation.
    """
    dist.shard(cfg.batch_size)  # raises when the batch does not split over the processes
    loop = RunLoop(cfg, cfg.method, seed=False)
    device, main, prefix = loop.device, loop.main, cfg.method

    dataset = dataset if dataset is not None else load_dataset(cfg.data)
    max_ep_len = MLPPolicy.max_ep_len if cfg.method == "bc" else cfg.model.max_ep_len
    data = Trajectories(dataset, cfg.data.top_fraction, max_ep_len, f"{prefix}.model", cfg.data.windows)
    K = 1 if cfg.method == "bc" else cfg.model.context_len
    seed_everything(cfg.run.seed)  # after the dataset: building one may draw from the global RNGs
    policy = build_policy(cfg, dataset, data).to(device)
    info = policy_info(cfg, dataset, data, policy)
    if cfg.method == "dt" and cfg.eval.episodes:
        warn_far_targets(cfg.eval.target_returns, dataset.returns, f"{prefix}.eval.target_returns")
    optimizer, scheduler = make_optimizer(policy, cfg.optim, cfg.steps, fused=True)
    loop.resume(policy, optimizer, scheduler)
    first = {"model/parameters": sum(p.numel() for p in policy.parameters()),
             "data/episodes": len(data.returns), "data/steps": data.n_steps,
             "data/return_mean": float(data.returns.mean()), "data/return_max": float(data.returns.max())}
    if dataset.ref_min_score is not None and dataset.ref_max_score is not None:
        first["data/normalized_mean"] = float(np.mean(dataset.normalized(data.returns)))
    loop.log_start(first)

    policy.train()
    final = loop.run(cfg.steps, OfflineRL(cfg, loop, policy, data, info, K, env), Cadence(eval_every=cfg.eval.every))
    if main:
        _plot(cfg, loop.dir, final)
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


class DTTrainer(RunTrainer):
    """The Decision Transformer (or BC, with a `BCConfig`) called the way TRL's trainers are, on the same
    run loop as ``seqrl train dt``:

        trainer = DTTrainer(args=DTConfig(output_dir="runs/dt-hopper", max_steps=20_000),
                            train_dataset="seqrl/hopper/medium-v0")
        trainer.train()
        policy = trainer.model  # a `DecisionTransformer`; trainer.save_model() writes it

    args: a `DTConfig` or `BCConfig` (TRL's names accepted: output_dir, learning_rate, max_steps, …).
    train_dataset: a Minari dataset id present locally, a Minari dataset folder, ``quick:<level>``, or a
        loaded `minari.MinariDataset` (its folder is named in config.yaml, so ``--resume`` finds it).
        Default: ``args.data.dataset``. An ``auto`` run name follows the dataset given here.
    env: a gymnasium id or an environment factory to evaluate in, instead of the dataset's own.
    """

    def __init__(self, args: DTConfig | None = None, train_dataset: Any = None, env: Any = None) -> None:
        cfg = copy.deepcopy(args) if args is not None else DTConfig()
        if train_dataset is not None:
            if isinstance(train_dataset, (str, os.PathLike)):
                spec = os.fspath(train_dataset)
            elif hasattr(getattr(train_dataset, "storage", None), "data_path"):  # minari.MinariDataset
                spec = str(Path(train_dataset.storage.data_path).parent)
            else:
                raise TypeError(f"DTTrainer(train_dataset=...): expected a Minari dataset id, folder, 'quick:<level>' "
                                f"or a minari.MinariDataset (got {type(train_dataset).__name__}); write episodes "
                                f"with seqrl.data.minari_data.write_minari first")
            auto = cfg.run.name == auto_run_name(cfg.method, cfg.data, cfg.run.seed)
            cfg.data = replace(cfg.data, dataset=spec)
            if auto:
                cfg.run.name = auto_run_name(cfg.method, cfg.data, cfg.run.seed)
        self.args, self._env, self.metrics = cfg, env, {}

    def _run(self) -> dict[str, float]:
        return train(self.args, env=self._env)

    def _load(self, checkpoint: Path) -> Any:
        from seqrl.models.loading import load_policy_checkpoint

        policy, _ = load_policy_checkpoint(checkpoint, (self.args.method,))
        return policy, Path(checkpoint)

    def _model_of(self, trained: Any) -> Any:
        return trained[0]

    def _save(self, trained: Any, out: Path) -> None:
        """A copy of the last checkpoint's files (weights, policy description and their digests), loadable
        with ``seqrl eval dt --checkpoint``."""
        import shutil

        out.mkdir(parents=True, exist_ok=True)
        for file in trained[1].iterdir():
            if file.is_file():
                shutil.copyfile(file, out / file.name)
