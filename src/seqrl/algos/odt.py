"""Online Decision Transformer (Zheng et al. 2022): offline pre-training, then online fine-tuning.

    seqrl train odt --config pendulum_medium [--online.iterations=40 ...] [--resume]
    seqrl train odt --config hopper_medium       # after: seqrl data minari hopper medium

1. Offline pre-training: `pretrain_steps` updates on the whole offline dataset, with windows drawn as
   the Decision Transformer's (`seqrl.data.offline.Trajectories`: episodes ∝ length, start uniform,
   left-padded K-step windows).
2. Online fine-tuning: a replay buffer of whole trajectories (`ReplayBuffer`, capacity in
   trajectories) starts with the best offline trajectories by return; each online iteration rolls out
   `online.rollouts` episodes in the environment with *sampled* actions, conditioned on the exploration
   target `online.target_return` (paper: ≈ 2× the evaluation target), adds them to the buffer (FIFO:
   the oldest leave first; the offline ones count as oldest, lowest return first), and takes
   `online.updates` updates on windows from the buffer. Returns-to-go are recomputed from the stored
   rewards whenever the buffer is sampled (hindsight relabelling: a trajectory is trained on what it
   achieved, never on the target it was rolled out with).
3. Evaluation uses the mean action c + h·tanh(μ) at `eval.target_returns`, after pre-training and
   every `eval.every` online iterations.

Every update minimises −(log π(a) + α·H) on real steps plus the temperature loss α·(H − β)
(`seqrl.core.odt`), α = exp(log_temperature) learned with its own Adam (official: lr 1e-4, init 0.1),
β = −|A| in tanh units. The policy's optimiser is LAMB with the official code's update rule
(``optimizer: lamb``, `seqrl.utils.optim.Lamb`: weight decay and the trust ratio on every parameter)
or AdamW (``optimizer: adamw``).

Checkpoints (`seqrl.utils.checkpoint`, atomic) hold the policy weights (loadable with
`seqrl.models.loading.load_policy_checkpoint` and evaluable like a DT: `seqrl eval dt --checkpoint …`),
both optimisers, the RNGs, α, the phase and the replay buffer (``replay_buffer.safetensors``,
written inside the same atomic directory). Data order is a pure function of (seed, step), rollout
start states of (online.seed, episode index), and sampling noise and dropout come from the global
RNGs the checkpoint restores: a resumed run repeats an uninterrupted one exactly. Online
checkpoints are taken between iterations.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.odt_config import ODTConfig, ODTEvalConfig, ODTModelConfig, OnlineConfig
from seqrl.core.odt import (
    odt_policy_loss,
    squashed_gaussian_entropy,
    squashed_gaussian_log_likelihood,
    temperature_loss,
)
from seqrl.data.minari_data import DataConfig, load_dataset
from seqrl.data.offline import DatasetError, Episode, OfflineDataset, Trajectories
from seqrl.envs.evaluate import (
    DTEvalConfig,
    conditioned_rollouts,
    env_factory,
    evaluate_on_main,
    target_label,
    time_limit,
    warn_far_targets,
)
from seqrl.envs.rollout import episode_rngs
from seqrl.models.dt import DTModelConfig
from seqrl.models.odt import OnlineDecisionTransformer
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.run import make_optimizer, releases_run_folder
from seqrl.training.update import OptimGroup
from seqrl.utils import dist
from seqrl.utils.checkpoint import CheckpointError
from seqrl.utils.dist import bf16_autocast
from seqrl.utils.metrics import read_metrics
from seqrl.utils.optim import Lamb
from seqrl.utils.plots import plot_bars, plot_metrics

__all__ = ["ODTConfig", "ReplayBuffer", "collect_rollouts", "train"]

REPLAY_FILE = "replay_buffer.safetensors"


# ---------------------------------------------------------------------------------------------------
# Replay buffer


class ReplayBuffer:
    """At most `capacity` whole trajectories, evicted first in, first out.

    Built from offline episodes it keeps the best `capacity` of them by return, ordered lowest return
    first — the order in which they leave once online trajectories arrive (the official buffer
    overwrites its sorted offline trajectories from the lowest up). `add` appends online trajectories;
    beyond capacity the oldest leave. `episodes` is the content, oldest first; `online` flags the ones
    that came from `add`.
    """

    def __init__(self, capacity: int, offline: Sequence[Episode] = ()) -> None:
        if capacity < 1:
            raise ValueError(f"ReplayBuffer: capacity must be >= 1 (got {capacity})")
        self.capacity = int(capacity)
        # lowest return first (ties: the lower dataset position first), keep the best `capacity`
        order = sorted(range(len(offline)), key=lambda i: (offline[i].ret, i))[-self.capacity:] if offline else []
        self.episodes: list[Episode] = [offline[i] for i in order]
        self.online: list[bool] = [False] * len(self.episodes)

    def __len__(self) -> int:
        return len(self.episodes)

    def add(self, episodes: Sequence[Episode]) -> None:
        """Append trajectories (each checked with `Episode.validate`); drop the oldest beyond capacity."""
        for ep in episodes:
            ep.validate()
        self.episodes = (self.episodes + list(episodes))[-self.capacity:]
        self.online = (self.online + [True] * len(episodes))[-self.capacity:]

    @property
    def returns(self) -> np.ndarray:
        return np.array([ep.ret for ep in self.episodes], dtype=np.float64)

    def stats(self) -> dict[str, float]:
        r = self.returns
        return {"buffer/size": len(self), "buffer/online": int(sum(self.online)), "buffer/return_mean": float(r.mean()),
                "buffer/return_max": float(r.max())}

    def trajectories(self, like: OfflineDataset, max_ep_len: int, windows: str = "start") -> Trajectories:
        """The content as DT training windows (drawn as `windows` says, `data.windows`); returns-to-go
        recomputed from the stored rewards (hindsight relabelling). `like` gives the action space."""
        dataset = OfflineDataset(list(self.episodes), env_id=like.env_id, discrete=False, action_dim=like.action_dim,
                                 action_low=like.action_low, action_high=like.action_high, name="replay buffer")
        return Trajectories(dataset, 1.0, max_ep_len, "odt.model", windows)

    # checkpoint hook: `save_checkpoint(..., tokenizer=buffer)` calls this inside its atomic directory
    def save_pretrained(self, directory: str | Path) -> None:
        """Write the buffer to ``directory/replay_buffer.safetensors`` (float32/bool arrays, exact)."""
        eps = self.episodes
        tensors = {
            "observations": torch.from_numpy(np.concatenate([e.observations.reshape(len(e) + 1, -1) for e in eps])),
            "actions": torch.from_numpy(np.concatenate([e.actions.reshape(len(e), -1) for e in eps])),
            "rewards": torch.from_numpy(np.concatenate([e.rewards for e in eps])),
            "terminations": torch.from_numpy(np.concatenate([e.terminations for e in eps])),
            "truncations": torch.from_numpy(np.concatenate([e.truncations for e in eps])),
            "lengths": torch.tensor([len(e) for e in eps], dtype=torch.int64),
            "ids": torch.tensor([e.id for e in eps], dtype=torch.int64),
            "online": torch.tensor(self.online, dtype=torch.bool),
        }
        safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(Path(directory) / REPLAY_FILE),
                                    metadata={"capacity": str(self.capacity)})

    @classmethod
    def load(cls, directory: str | Path) -> ReplayBuffer:
        """The buffer `save_pretrained` wrote; `CheckpointError` naming the file when it is missing or broken."""
        file = Path(directory) / REPLAY_FILE
        if not file.is_file():
            raise CheckpointError(f"{file}: replay buffer not found (not an online DT checkpoint?)")
        try:
            with safetensors.safe_open(str(file), "pt") as f:
                capacity = int(f.metadata()["capacity"])
                t = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
            lengths = t["lengths"].tolist()
            buffer = cls(capacity)
            o = a = 0
            for T, ep_id in zip(lengths, t["ids"].tolist()):
                buffer.episodes.append(Episode(
                    observations=t["observations"][o + a : o + a + T + 1].numpy().copy(),
                    actions=t["actions"][a : a + T].numpy().copy(), rewards=t["rewards"][a : a + T].numpy().copy(),
                    terminations=t["terminations"][a : a + T].numpy().copy(),
                    truncations=t["truncations"][a : a + T].numpy().copy(), id=int(ep_id)))
                a += T
                o += 1
            buffer.online = t["online"].tolist()
            if len(buffer.online) != len(buffer.episodes) or a != t["rewards"].shape[0]:
                raise ValueError("lengths do not match the arrays")
        except Exception as e:  # noqa: BLE001 — a corrupt file, named
            raise CheckpointError(f"{file}: cannot read the replay buffer: {e}") from e
        return buffer


# ---------------------------------------------------------------------------------------------------
# Online rollouts (sampled actions, recorded as Episodes)


def collect_rollouts(policy: OnlineDecisionTransformer, env: str | Callable, target_return: float, n: int,
                     seed: int, first_index: int, max_steps: int = 0) -> list[Episode]:
    """`n` episodes with actions sampled from the policy, conditioned on `target_return` (R̂ decremented
    by the observed rewards, as in evaluation: `seqrl.envs.evaluate.conditioned_rollouts`); episode i
    resets with `episode_rngs(seed, first_index + i)`.

    Episodes end at termination, the environment's time limit, `max_steps` or the policy's
    ``max_ep_len`` (a cut marks truncation). Returned as `Episode`s with ids first_index … first_index + n − 1.
    """
    make = env_factory(env)
    envs = [make() for _ in range(n)]
    try:
        limit = min(x for x in (time_limit(envs), max_steps, policy.max_ep_len) if x > 0)
        seeds = [episode_rngs(seed, first_index + i)[0] for i in range(n)]
        with policy.exploring():
            histories = conditioned_rollouts(policy, envs, [float(target_return)] * n, seeds, limit)
    finally:
        for e in envs:
            e.close()
    return histories.episodes(first_id=first_index)


# ---------------------------------------------------------------------------------------------------
# Policy, optimisers, checkpoints


def build_policy(cfg: ODTConfig, dataset: OfflineDataset, data: Trajectories) -> OnlineDecisionTransformer:
    """A fresh Online DT with the offline data's state normaliser and the action bounds."""
    if dataset.discrete:
        raise DatasetError(f"dataset {dataset.name or '?'}: the Online DT needs continuous actions "
                           f"(a squashed Gaussian policy); this dataset's actions are discrete")
    m = cfg.model
    mean, std = data.state_stats()
    return OnlineDecisionTransformer(
        data.states.shape[1], int(dataset.action_dim), hidden_size=m.hidden_size, n_layer=m.n_layer, n_head=m.n_head,
        context_len=m.context_len, max_ep_len=m.max_ep_len, dropout=m.dropout, activation=m.activation,
        embed_init=m.embed_init,
        action_low=dataset.action_low, action_high=dataset.action_high, state_mean=mean, state_std=std,
        return_scale=cfg.return_scale, log_std_min=m.log_std_min, log_std_max=m.log_std_max,
        timestep_embedding=m.timestep_embedding, rollout_context=m.rollout_context or None)


class _Optimizers:
    """The policy's optimiser and α's Adam saved as one optimizer state by `save_checkpoint` /
    `load_checkpoint` (the update steps them as two groups, `RunLoop.update`)."""

    def __init__(self, policy: torch.optim.Optimizer, temperature: torch.optim.Optimizer) -> None:
        self.policy, self.temperature = policy, temperature

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "temperature": self.temperature.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.temperature.load_state_dict(state["temperature"])


def make_policy_optimizer(policy: torch.nn.Module, cfg: ODTConfig):
    """(optimizer, scheduler): AdamW from `make_optimizer`, or LAMB as the official ODT builds it — one
    group, weight decay (and so the trust ratio) on every parameter, eps 1e-8 — with the same warm-up
    schedule."""
    optimizer, scheduler = make_optimizer(policy, cfg.optim, cfg.steps)
    if cfg.optimizer == "adamw":
        return optimizer, scheduler
    lamb = Lamb(policy.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas, eps=1e-8,
                weight_decay=cfg.optim.weight_decay)
    return lamb, torch.optim.lr_scheduler.LambdaLR(lamb, scheduler.lr_lambdas[0])


def policy_info(cfg: ODTConfig, dataset: OfflineDataset, policy: OnlineDecisionTransformer) -> dict:
    """What a checkpoint needs besides its weights to rebuild and evaluate the policy (JSON)."""
    r = dataset.returns
    return {"method": "odt", "model": dict(policy.kwargs), "env_id": dataset.env_id, "dataset": dataset.name,
            "ref_min_score": dataset.ref_min_score, "ref_max_score": dataset.ref_max_score,
            "data_returns": {"min": float(r.min()), "max": float(r.max()), "mean": float(r.mean()),
                             "episodes": len(r)},
            "target_returns": list(cfg.eval.target_returns)}


# ---------------------------------------------------------------------------------------------------
# Training


def _update(policy: OnlineDecisionTransformer, log_temperature: torch.nn.Parameter, b: dict, cfg: ODTConfig,
            target_entropy: float, share: float = 1.0) -> dict[str, torch.Tensor]:
    """Forward and backward of one batch: ODT policy loss + temperature loss (gradients only).

    share: this process's weight in the global batch under torchrun (its real steps / all real steps);
    the backward pass scales both losses by it, so the gradients summed over processes are the global ones.
    """
    with bf16_autocast(b["states"].device, cfg.run.use_bf16):
        mu, log_std = policy.distribution(b["returns"], b["states"], b["actions"], b["timesteps"], b["mask"])
    mu, log_std = mu.float(), log_std.float()  # (B, K, A) each
    low, high = policy.action_low, policy.action_high
    log_lik = squashed_gaussian_log_likelihood(b["actions"], mu, log_std, low, high)  # (B, K)
    noise = torch.randn(cfg.entropy_samples, *mu.shape).to(mu.device)  # (N, B, K, A); drawn on the CPU RNG on any device
    entropy = squashed_gaussian_entropy(mu, log_std, noise, low, high)  # (B, K)
    alpha = log_temperature.exp()
    loss, ll, h = odt_policy_loss(log_lik, entropy, b["mask"], alpha)
    t_loss = temperature_loss(log_temperature, h, target_entropy)
    ((loss + t_loss) * share).backward()  # disjoint: α is detached in `loss`, H in `t_loss`
    return {"loss": loss, "ll": ll, "entropy": h, "t_loss": t_loss, "alpha": alpha}


class OnlineDT:
    """Online DT as a run-loop method. Units 0 … P−1 are offline steps on the dataset; unit P + k is online
    iteration k: rollouts with the policy join the replay buffer, then ``online.updates`` steps on it.
    Each update steps the policy's optimizer and α's Adam (two groups: both, or neither). The evaluation
    right after pre-training is kept as ``offline/eval/…``."""

    def __init__(self, cfg: ODTConfig, loop: RunLoop, policy: OnlineDecisionTransformer, info: dict,
                 data: Trajectories, dataset: OfflineDataset, env, buffer: ReplayBuffer,
                 log_temperature: torch.nn.Parameter, groups: list, target_entropy: float, iteration: int,
                 offline_eval: dict) -> None:
        self.cfg, self.loop, self.policy, self.info, self.data, self.dataset = cfg, loop, policy, info, data, dataset
        self.env, self.buffer, self.log_temperature, self.groups = env, buffer, log_temperature, groups
        self.target_entropy, self.iteration, self.offline_eval = target_entropy, iteration, offline_eval
        self.rows = dist.shard(cfg.batch_size)
        self.window = {"s": 0.0, "n": 0}
        self.live: dict[str, Any] = {}  # the bar's phase and loss or return

    def _update(self, step: int, source: Trajectories) -> dict[str, float]:
        """One update at global step `step`; returns the metrics to log (maybe none)."""
        cfg, world, P = self.cfg, dist.world_size(), self.cfg.pretrain_steps
        t0 = time.perf_counter()
        b = source.batch(step, cfg.batch_size, cfg.model.context_len, cfg.run.seed)
        share = 1.0
        if world > 1:  # torchrun: every process draws the global batch and keeps its rows
            real = float(b["mask"].sum())
            b = {k: v[self.rows] for k, v in b.items()}
            share = float(b["mask"].sum()) / max(real, 1.0)  # weight of this share in the global means
        b = {k: v.to(self.loop.device) for k, v in b.items()}
        out = _update(self.policy, self.log_temperature, b, cfg, self.target_entropy, share)
        if world > 1:
            out = {k: dist.all_reduce_sum(v.detach().reshape(1) * share)[0] for k, v in out.items()}
        stepped = self.loop.update(step, out["loss"].item(), self.groups)  # both step, or neither
        self.window["s"] += time.perf_counter() - t0
        self.window["n"] += 1
        done = step + 1
        self.live["loss"] = -out["ll"].item()
        if done % cfg.run.log_every and done != P and done != cfg.steps:
            return {}
        metrics = {"loss/action": -out["ll"].item(), "loss/policy": out["loss"].item(),
                   "loss/temperature": out["t_loss"].item(), "stats/entropy": out["entropy"].item(),
                   "stats/temperature": float(self.log_temperature.detach().exp()),
                   "stats/grad_norm": stepped.norms["policy"], "stats/lr": stepped.lrs["policy"],
                   "perf/steps_per_s": self.window["n"] / self.window["s"]}
        self.window.update(s=0.0, n=0)
        return metrics

    def step(self, u: int, log: bool) -> dict[str, float]:
        """Unit `u`: offline step u (u < P), else online iteration u − P (rollouts, then `updates` steps)."""
        cfg, loop, P, updates = self.cfg, self.loop, self.cfg.pretrain_steps, self.cfg.online.updates
        if u < P:
            self.live["phase"] = "offline"
            return self._update(u, self.data)
        t0 = time.perf_counter()
        new = collect_rollouts(self.policy, self.env, cfg.online.target_return, cfg.online.rollouts, cfg.online.seed,
                               self.iteration * cfg.online.rollouts, cfg.online.max_steps)
        self.buffer.add(new)
        loop.files = [self.buffer]  # the online phase's checkpoints hold the buffer
        rollout_s = time.perf_counter() - t0
        source = self.buffer.trajectories(self.dataset, cfg.model.max_ep_len, cfg.data.windows)
        step, metrics = P + self.iteration * updates, {}
        for k in range(updates):
            got = self._update(step, source)
            step += 1
            if got and k < updates - 1:  # the iteration's last update joins its record
                loop.log(step, {"stats/skipped_updates": loop.guard.skipped, **got})
            metrics = got or metrics
        self.iteration += 1
        returns = [ep.ret for ep in new]
        metrics.update({"online/return": float(np.mean(returns)), "online/return_max": float(np.max(returns)),
                        "online/length": float(np.mean([len(ep) for ep in new])), "online/iteration": self.iteration,
                        "perf/rollout_s": rollout_s, **self.buffer.stats()})
        if self.dataset.ref_min_score is not None and self.dataset.ref_max_score is not None:
            metrics["online/normalized"] = float(np.mean(self.dataset.normalized(np.array(returns))))
        self.live.update(phase=f"online {self.iteration}", ret=metrics["online/return"])
        self.live.pop("loss", None)
        return metrics

    def evaluate(self) -> dict[str, float]:
        metrics = evaluate_on_main(self.policy, self.info, self.cfg.eval, self.env)
        if self.iteration == 0:  # right after pre-training
            self.offline_eval = {f"offline/{k}": v for k, v in metrics.items()}
            return self.offline_eval
        return metrics

    def eval_due(self, done: int) -> bool:
        cfg, P = self.cfg, self.cfg.pretrain_steps
        if not cfg.eval.episodes or done < P:
            return False
        k = done - P  # online iterations done
        return k == 0 or (bool(cfg.eval.every) and k % cfg.eval.every == 0) or k == cfg.online.iterations

    def state(self) -> dict[str, Any]:
        return {"policy": self.info, "phase": "online" if self.iteration else "pretrain",
                "online_iteration": self.iteration, "offline_eval": self.offline_eval,
                "log_temperature": float(self.log_temperature.detach())}

    def show(self, m: dict[str, float]) -> dict[str, Any]:
        return dict(self.live)


@releases_run_folder
def train(cfg: ODTConfig, dataset: OfflineDataset | None = None, env=None) -> dict[str, float]:
    """Pre-train an Online DT on `dataset` (default: the one `cfg.data` names), fine-tune it online;
    returns the final metrics plus ``offline/eval/…``: the evaluation right after pre-training.

    `env` (a gymnasium id or an environment factory) overrides the dataset's environment for rollouts
    and evaluation.
    """
    world = dist.world_size()
    dist.shard(cfg.batch_size)  # raises when the batch does not split over the processes
    if world > 1 and cfg.online.iterations:
        raise ValueError(f"online.iterations ({cfg.online.iterations}): torchrun data parallelism covers the "
                         f"offline phase only; run the online phase in one process (online.iterations=0 here)")
    loop = RunLoop(cfg, "odt")
    device, main, run_dir = loop.device, loop.main, loop.dir

    dataset = dataset if dataset is not None else load_dataset(cfg.data)
    data = Trajectories(dataset, cfg.data.top_fraction, cfg.model.max_ep_len, "odt.model", cfg.data.windows)
    env = env or dataset.env_id
    if not env and (cfg.online.iterations or cfg.eval.episodes):
        raise ValueError("the dataset names no environment (env_id): online fine-tuning and evaluation need one; "
                         "pass env= or set online.iterations=0 and eval.episodes=0")
    policy = build_policy(cfg, dataset, data).to(device)
    info = policy_info(cfg, dataset, policy)
    if cfg.eval.episodes:
        warn_far_targets(cfg.eval.target_returns, dataset.returns, "odt.eval.target_returns")
    half = (policy.action_high - policy.action_low).double() / 2
    beta = -float(policy.action_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
    target_entropy = beta + float(torch.log(half).sum())  # β in action units
    log_temperature = torch.nn.Parameter(torch.tensor(math.log(cfg.init_temperature), device=device))
    policy_opt, scheduler = make_policy_optimizer(policy, cfg)
    optimizers = _Optimizers(policy_opt, torch.optim.Adam([log_temperature], lr=cfg.temperature_lr, betas=(0.9, 0.999)))
    buffer = ReplayBuffer(cfg.online.buffer_size, [ep for ep in dataset.episodes if len(ep) <= cfg.model.max_ep_len])

    state = loop.resume(policy, optimizers, scheduler)
    groups = [OptimGroup("policy", policy, policy_opt, scheduler, cfg.optim.grad_clip),
              OptimGroup("temperature", None, optimizers.temperature, extra=[log_temperature])]  # α: no clip
    iteration, offline_eval, first_unit = 0, {}, loop.start
    if loop.resume_from is not None:
        iteration, offline_eval = state["online_iteration"], state["offline_eval"]
        with torch.no_grad():
            log_temperature.copy_(torch.tensor(state["log_temperature"], dtype=torch.float32))
        if state["phase"] == "online":
            buffer = ReplayBuffer.load(loop.resume_from)
            first_unit = cfg.pretrain_steps + iteration
        if main and iteration:
            print(f"resume: online iteration {iteration} of {cfg.online.iterations} done")
    loop.log_start({"model/parameters": sum(p.numel() for p in policy.parameters()),
                    "data/episodes": len(data.returns), "data/steps": data.n_steps,
                    "data/return_mean": float(data.returns.mean()), "data/return_max": float(data.returns.max()),
                    "stats/target_entropy": target_entropy, **buffer.stats()})
    method = OnlineDT(cfg, loop, policy, info, data, dataset, env, buffer, log_temperature, groups, target_entropy,
                      iteration, offline_eval)
    policy.train()
    P, updates = cfg.pretrain_steps, cfg.online.updates
    final = loop.run(P + cfg.online.iterations, method, Cadence(
        start=first_unit, at=lambda u: u if u <= P else P + (u - P) * updates,
        log_due=lambda done: done > P or done % cfg.run.log_every == 0 or done == P,
        eval_due=method.eval_due, save_due=lambda done: done == P))
    final.update(method.offline_eval)
    if main:
        _plot(cfg, run_dir, final)
    return final


def _plot(cfg: ODTConfig, run_dir: Path, final: dict[str, float]) -> None:
    """plots/odt.png (losses, entropy, α, online and evaluation returns vs step) and plots/offline_online.png
    (evaluation return after pre-training and at the end, per target)."""
    records = read_metrics(run_dir / "metrics.jsonl")
    keys = ["loss/action", "stats/entropy", "stats/temperature", "online/return", "buffer/return_mean"]
    for t in cfg.eval.target_returns:
        keys += [f"eval/return/{target_label(t)}", f"eval/normalized/{target_label(t)}"]
    plot_metrics(records, keys + ["stats/lr"], run_dir / "plots" / "odt.png", title=f"Online DT {cfg.run.name}")
    labels = [target_label(t) for t in cfg.eval.target_returns]
    before = [final.get(f"offline/eval/return/{label}") for label in labels]
    after = [final.get(f"eval/return/{label}") for label in labels]
    if cfg.online.iterations and all(v is not None for v in before + after):
        plot_bars(labels, {"offline": before, "online": after}, run_dir / "plots" / "offline_online.png",
                  title=f"evaluation return by target ({cfg.run.name})", ylabel="return")
