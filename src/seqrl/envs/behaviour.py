"""Behaviour policies for the D4RL-style datasets: trained with stable-baselines3 PPO, kept as small files.

Train (seeded, progress bar, ``metrics.jsonl`` + ``plots/``, resumable; writes ``runs/behaviour/<env>/``)::

    python -m seqrl.envs.behaviour train Hopper-v5 [--steps N] [--minutes M] [--seed S] [--resume]
    python -m seqrl.envs.behaviour export Hopper-v5      # pick the levels, measure them, copy into the package

Training snapshots the actor (policy MLP, action head, log-std and VecNormalize's observation
statistics — nothing else) every ``eval_every`` environment steps and scores each snapshot over
``eval_episodes`` episodes with the stochastic sampler the datasets use. `export` picks

* ``expert``: the snapshot with the best score;
* ``medium``: the snapshot before it whose score is closest to ``R_random + (R_expert − R_random) / 3``
  (D4RL: "about one third of the expert"; for MuJoCo's positive returns that is ≈ R_expert / 3);
* ``replay-*``: up to `max_replay` snapshots from step 0 up to ``medium``, evenly spaced, for
  ``medium-replay``;

re-measures random, medium and expert returns over `ref_episodes` episodes and writes them with the
snapshots to ``src/seqrl/envs/policies/<env>/`` (``meta.json`` + ``*.safetensors``), where
`load_behaviour` finds them in an installed seqrl too.

A snapshot acts as SB3's PPO does for Box actions — ``clip(μ(s̃) + σ·ε, low, high)`` with
``s̃ = clip((s − mean)/√(var + 1e-8), ±clip_obs)`` — but ε comes from each episode's own generator, so a
dataset is a pure function of its seed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import safetensors.torch
import torch

from seqrl.envs.make import make_env
from seqrl.envs.rollout import collect_episodes, uniform_policy
from seqrl.utils.extras import require

__all__ = [
    "BEHAVIOUR_ENVS",
    "BehaviourConfig",
    "BehaviourPolicy",
    "export_levels",
    "kept_meta",
    "load_behaviour",
    "policies_dir",
    "train_behaviour",
]

POLICIES_DIR = Path(__file__).resolve().parent / "policies"
ACTIVATIONS = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}


@dataclass
class BehaviourConfig:
    """PPO settings of one behaviour-policy training run."""

    env_id: str = "Pendulum-v1"
    """gymnasium id."""
    total_steps: int = 300_000
    """Environment steps of training (the learning-rate schedule spans them)."""
    max_minutes: float = 25.0
    """Wall-clock cap: training stops at the first snapshot after this many minutes."""
    seed: int = 0
    """Seed of PPO (weights, sampling) and of the training environments."""
    n_envs: int = 8
    """Vectorised training environments (DummyVecEnv)."""
    n_steps: int = 512
    """Rollout length per environment per PPO update."""
    batch_size: int = 128
    """PPO minibatch."""
    n_epochs: int = 10
    """PPO epochs per update."""
    lr: float = 3e-4
    """Adam learning rate at the start; decays linearly to `lr_final_ratio`·lr."""
    lr_final_ratio: float = 0.1
    """Final learning rate as a fraction of lr."""
    gamma: float = 0.99
    """Discount γ."""
    gae_lambda: float = 0.95
    """GAE λ."""
    clip_range: float = 0.2
    """PPO clip ε."""
    ent_coef: float = 0.0
    """Entropy bonus."""
    max_grad_norm: float = 0.5
    """Gradient clipping."""
    net_arch: list[int] = field(default_factory=lambda: [128, 128])
    """Hidden sizes of the actor and of the critic (separate networks)."""
    activation: str = "tanh"
    """tanh or relu."""
    log_std_init: float = 0.0
    """Initial log σ of the Gaussian policy."""
    eval_every: int = 20_000
    """Environment steps between snapshots (each is scored and kept in the run folder)."""
    eval_episodes: int = 10
    """Episodes per snapshot score."""
    out_dir: str = "runs/behaviour"
    """Run folders go to `<out_dir>/<env_id>/`."""

    def __post_init__(self) -> None:
        for name in ("total_steps", "n_envs", "n_steps", "batch_size", "n_epochs", "eval_every", "eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"behaviour.{name} must be >= 1 (got {getattr(self, name)})")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"behaviour.activation must be one of {sorted(ACTIVATIONS)} (got {self.activation!r})")
        if self.lr <= 0 or not 0 < self.lr_final_ratio <= 1:
            raise ValueError("behaviour.lr must be > 0 and behaviour.lr_final_ratio in (0, 1]")

    @property
    def dir(self) -> Path:
        return Path(self.out_dir) / self.env_id


# Settings used for the kept policies (the commands in docs/datasets.md).
BEHAVIOUR_ENVS: dict[str, dict] = {
    "Pendulum-v1": dict(total_steps=400_000, n_envs=4, n_steps=1024, batch_size=256, lr=1e-3, gamma=0.9,
                        net_arch=[64, 64], eval_every=2_500),
    "Hopper-v5": dict(total_steps=2_000_000, eval_every=40_000),
    # HalfCheetah: a low initial σ, ReLU and γ 0.98 / λ 0.92 as in rl-baselines3-zoo's tuned PPO
    "HalfCheetah-v5": dict(total_steps=2_000_000, eval_every=40_000, log_std_init=-1.0, activation="relu",
                           gamma=0.98, gae_lambda=0.92),
    "Walker2d-v5": dict(total_steps=2_000_000, eval_every=40_000, log_std_init=-1.0, activation="relu"),
}


# ---------------------------------------------------------------------------------------------------
# A snapshot of the actor and how it acts


class BehaviourPolicy:
    """An SB3 `ActorCriticPolicy` actor rebuilt from a snapshot, acting on batches with per-row noise."""

    def __init__(self, env_id: str, state: dict[str, torch.Tensor], info: dict) -> None:
        ActorCriticPolicy = require("stable_baselines3.common.policies", "a behaviour policy").ActorCriticPolicy

        env = make_env(env_id)
        self.env_id = env_id
        self.info = info
        self.observation_space, self.action_space = env.observation_space, env.action_space
        env.close()
        if not isinstance(self.action_space, gym.spaces.Box):
            raise TypeError(f"{env_id}: behaviour policies support Box action spaces only")
        self.policy = ActorCriticPolicy(
            self.observation_space, self.action_space, lr_schedule=lambda _: 0.0,
            net_arch=dict(pi=list(info["net_arch"]), vf=list(info["net_arch"])),
            activation_fn=ACTIVATIONS[info["activation"]], log_std_init=0.0,
        )
        actor = {k: v for k, v in state.items() if not k.startswith("obs_rms.")}
        missing, unexpected = self.policy.load_state_dict(actor, strict=False)
        wrong = [k for k in missing if not k.startswith(("value_net.", "mlp_extractor.value_net."))] + list(unexpected)
        if wrong:
            raise ValueError(f"{env_id} snapshot: keys do not fit the actor: {wrong}")
        self.policy.eval()
        self.obs_mean = state["obs_rms.mean"].numpy().astype(np.float64)  # (obs_dim,)
        self.obs_var = state["obs_rms.var"].numpy().astype(np.float64)  # (obs_dim,)
        self.clip_obs = float(info["clip_obs"])
        self.low = self.action_space.low.astype(np.float64)
        self.high = self.action_space.high.astype(np.float64)

    @classmethod
    def load(cls, path: str | os.PathLike) -> BehaviourPolicy:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"behaviour policy {path}: no such file")
        with safetensors.safe_open(str(path), framework="pt") as f:
            info = json.loads(f.metadata()["seqrl"])
            state = {k: f.get_tensor(k) for k in f.keys()}
        return cls(info["env_id"], state, info)

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        return np.clip((obs - self.obs_mean) / np.sqrt(self.obs_var + 1e-8), -self.clip_obs, self.clip_obs)

    @torch.no_grad()
    def distribution(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of the Gaussian over actions for a batch of raw observations, (B, act_dim) each."""
        x = torch.as_tensor(self.normalize(np.asarray(obs, dtype=np.float64)), dtype=torch.float32)  # (B, obs_dim)
        dist = self.policy.get_distribution(x).distribution
        return dist.mean.double().numpy(), dist.stddev.double().numpy()

    def __call__(self, obs: np.ndarray, rngs: list) -> np.ndarray:
        mean, std = self.distribution(obs)  # (B, act_dim)
        eps = np.stack([rng.standard_normal(mean.shape[1]) for rng in rngs])  # (B, act_dim)
        return np.clip(mean + std * eps, self.low, self.high).astype(np.float32)

    def deterministic(self, obs: np.ndarray, rngs: list) -> np.ndarray:
        """The mean action, clipped (for reports; datasets use the stochastic sampler)."""
        return np.clip(self.distribution(obs)[0], self.low, self.high).astype(np.float32)


def _snapshot_state(model, vec_normalize) -> dict[str, torch.Tensor]:
    state = {k: v.detach().cpu().clone() for k, v in model.policy.state_dict().items()
             if k.startswith(("mlp_extractor.policy_net.", "action_net.", "log_std"))}
    state["obs_rms.mean"] = torch.as_tensor(vec_normalize.obs_rms.mean, dtype=torch.float64)
    state["obs_rms.var"] = torch.as_tensor(vec_normalize.obs_rms.var, dtype=torch.float64)
    return state


def _atomic_save(state: dict[str, torch.Tensor], info: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        safetensors.torch.save_file(state, tmp, metadata={"seqrl": json.dumps(info)})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def score_policy(env_id: str, policy, episodes: int, seed: int) -> tuple[float, float, float]:
    """Mean and std of episode returns and the mean episode length over `episodes` episodes."""
    eps = collect_episodes(env_id, policy, n_episodes=episodes, seed=seed, n_parallel=min(episodes, 16))
    returns = np.array([e.ret for e in eps])
    return float(returns.mean()), float(returns.std()), float(np.mean([len(e) for e in eps]))


# ---------------------------------------------------------------------------------------------------
# Training


EVAL_SEED = 10_000  # episodes scored during training use seeds (10_000, i): disjoint from dataset seeds


def train_behaviour(cfg: BehaviourConfig, resume: bool = False) -> Path:
    """Train PPO on `cfg.env_id`, snapshotting and scoring the actor every `cfg.eval_every` steps.

    Writes ``<run>/snapshots/step-<n>.safetensors``, ``<run>/metrics.jsonl`` (``eval/return_mean``,
    ``eval/return_std``, ``eval/ep_len``, ``train/ep_return_mean``, ``perf/steps_per_s``), ``<run>/plots/``
    and ``<run>/model.zip`` + ``<run>/vecnormalize.pkl`` (the full state to resume from). Returns the run dir.
    """
    PPO = require("stable_baselines3", "training a behaviour policy").PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from seqrl.config import dump_yaml
    from seqrl.utils.metrics import MetricsLogger, read_metrics
    from seqrl.utils.plots import plot_metrics
    from seqrl.utils.progress import progress_bar

    torch.set_num_threads(1)
    make_env(cfg.env_id).close()  # a clear error before SB3's
    run = cfg.dir
    snaps = run / "snapshots"
    if not resume and snaps.exists() and any(snaps.iterdir()):
        raise ValueError(f"{run} already holds snapshots; pass --resume or another --out-dir")
    run.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, run / "config.yaml")
    info = {"env_id": cfg.env_id, "net_arch": cfg.net_arch, "activation": cfg.activation, "clip_obs": 10.0,
            "algo": "stable-baselines3 PPO", "seed": cfg.seed}

    venv = make_vec_env(cfg.env_id, n_envs=cfg.n_envs, seed=cfg.seed)
    if resume:
        if not (run / "model.zip").is_file():
            raise ValueError(f"--resume: no model.zip in {run} to resume from")
        venv = VecNormalize.load(str(run / "vecnormalize.pkl"), venv)
        model = PPO.load(str(run / "model.zip"), env=venv, device="cpu")
        start = model.num_timesteps
    else:
        venv = VecNormalize(venv, gamma=cfg.gamma, clip_obs=10.0)
        lr, final = cfg.lr, cfg.lr_final_ratio
        model = PPO(
            "MlpPolicy", venv, learning_rate=lambda remaining: lr * (final + (1 - final) * remaining),
            n_steps=cfg.n_steps, batch_size=cfg.batch_size, n_epochs=cfg.n_epochs, gamma=cfg.gamma,
            gae_lambda=cfg.gae_lambda, clip_range=cfg.clip_range, ent_coef=cfg.ent_coef,
            max_grad_norm=cfg.max_grad_norm, seed=cfg.seed, device="cpu", verbose=0,
            policy_kwargs=dict(net_arch=dict(pi=cfg.net_arch, vf=cfg.net_arch),
                               activation_fn=ACTIVATIONS[cfg.activation], log_std_init=cfg.log_std_init),
        )
        start = 0
    records = read_metrics(run / "metrics.jsonl") if resume and (run / "metrics.jsonl").exists() else []
    logger = MetricsLogger(run / "metrics.jsonl", resume_step=start if resume else None)
    t0 = time.time()

    def snapshot(step: int) -> dict:
        state = _snapshot_state(model, venv)
        path = snaps / f"step-{step:08d}.safetensors"
        _atomic_save(state, {**info, "step": step}, path)
        mean, std, ep_len = score_policy(cfg.env_id, BehaviourPolicy.load(path), cfg.eval_episodes, EVAL_SEED)
        ep_infos = list(model.ep_info_buffer or [])
        metrics = {"eval/return_mean": mean, "eval/return_std": std, "eval/ep_len": ep_len,
                   "train/ep_return_mean": float(np.mean([e["r"] for e in ep_infos])) if ep_infos else None,
                   "perf/steps_per_s": (step - start) / max(time.time() - t0, 1e-9),
                   "perf/elapsed_min": (time.time() - t0) / 60}
        logger.log(step, metrics)
        records.append({"step": step, **metrics})
        return metrics

    class Snapshots(BaseCallback):
        def __init__(self, bar) -> None:
            super().__init__()
            self.bar, self.next = bar, (start // cfg.eval_every + 1) * cfg.eval_every

        def _on_step(self) -> bool:
            self.bar.advance(self.training_env.num_envs)
            if self.num_timesteps < self.next:
                return True
            self.next += cfg.eval_every
            m = snapshot(self.num_timesteps)
            self.bar.advance(0, eval_return=m["eval/return_mean"])
            fd, tmp = tempfile.mkstemp(dir=run, suffix=".zip")
            os.close(fd)
            model.save(tmp)
            os.replace(tmp, run / "model.zip")
            venv.save(str(run / "vecnormalize.pkl"))
            return (time.time() - t0) / 60 < cfg.max_minutes

    if start == 0:
        snapshot(0)
    with progress_bar(cfg.total_steps, f"PPO {cfg.env_id}") as bar:
        bar.advance(start)
        if start < cfg.total_steps:
            model.learn(cfg.total_steps - start, callback=Snapshots(bar), reset_num_timesteps=False)
    logger.close()
    venv.close()
    plot_metrics(records, ["eval/return_mean", "train/ep_return_mean", "perf/steps_per_s"],
                 run / "plots" / "behaviour.png", title=f"PPO {cfg.env_id}")
    return run


# ---------------------------------------------------------------------------------------------------
# Levels: pick snapshots, measure them, keep them in the package


def policies_dir(env_id: str) -> Path:
    return POLICIES_DIR / env_id


def kept_meta(env_id: str) -> dict:
    """``meta.json`` of the kept policies of `env_id` (levels, reference returns, how they were made)."""
    path = policies_dir(env_id) / "meta.json"
    if not path.is_file():
        kept = sorted(p.name for p in POLICIES_DIR.iterdir() if (p / "meta.json").is_file()) if POLICIES_DIR.is_dir() else []
        raise ValueError(f"no kept behaviour policies for {env_id!r}; kept: {', '.join(kept) or 'none'} "
                         f"(train: python -m seqrl.envs.behaviour train {env_id})")
    return json.loads(path.read_text())


def load_behaviour(env_id: str, name: str) -> BehaviourPolicy:
    """A kept snapshot of `env_id`: ``medium``, ``expert`` or a ``replay-*`` name from ``meta.json``."""
    meta = kept_meta(env_id)
    files = {**{lvl: rec["file"] for lvl, rec in meta["levels"].items()}, **{r["name"]: r["file"] for r in meta["replay"]}}
    if name not in files:
        raise ValueError(f"{env_id}: no kept policy {name!r}; kept: {', '.join(files)}")
    return BehaviourPolicy.load(policies_dir(env_id) / files[name])


def export_levels(env_id: str, run_dir: str | os.PathLike | None = None, ref_episodes: int = 50,
                  max_replay: int = 10, dest: Path | None = None) -> dict:
    """Pick expert, medium and the replay snapshots from a training run and keep them (see module doc)."""
    from seqrl.utils.metrics import read_metrics

    run = Path(run_dir) if run_dir else BehaviourConfig(env_id=env_id).dir
    records = [r for r in read_metrics(run / "metrics.jsonl") if r.get("eval/return_mean") is not None]
    if len(records) < 2:
        raise ValueError(f"{run}: needs at least two scored snapshots (has {len(records)})")
    env = make_env(env_id)
    r_min, r_min_std, _ = score_policy(env_id, uniform_policy(env.action_space), max(ref_episodes, 100), EVAL_SEED + 1)
    env.close()
    best = max(records, key=lambda r: r["eval/return_mean"])
    expert_policy = BehaviourPolicy.load(run / "snapshots" / f"step-{best['step']:08d}.safetensors")
    r_max, r_max_std, expert_len = score_policy(env_id, expert_policy, ref_episodes, EVAL_SEED + 2)
    target = r_min + (r_max - r_min) / 3
    before = [r for r in records if r["step"] < best["step"]]
    medium = min(before, key=lambda r: abs(r["eval/return_mean"] - target))
    medium_policy = BehaviourPolicy.load(run / "snapshots" / f"step-{medium['step']:08d}.safetensors")
    m_ret, m_std, m_len = score_policy(env_id, medium_policy, ref_episodes, EVAL_SEED + 2)
    upto = [r for r in records if r["step"] <= medium["step"]]
    picks = sorted({upto[round(i)]["step"] for i in np.linspace(0, len(upto) - 1, min(max_replay, len(upto)))})

    dest = dest or policies_dir(env_id)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)

    def keep(step: int, name: str) -> str:
        shutil.copyfile(run / "snapshots" / f"step-{step:08d}.safetensors", dest / f"{name}.safetensors")
        return f"{name}.safetensors"

    det_ret = score_policy(env_id, expert_policy.deterministic, min(ref_episodes, 10), EVAL_SEED + 3)[0]
    cfg = json.loads(json.dumps(_read_config(run)))
    meta = {
        "env_id": env_id,
        "algo": "stable-baselines3 PPO (VecNormalize observations)",
        "train_config": cfg,
        "train_steps": int(records[-1]["step"]),
        "train_minutes": float(records[-1].get("perf/elapsed_min") or 0.0),
        "ref_min_score": r_min,
        "ref_max_score": r_max,
        "ref_episodes": ref_episodes,
        "levels": {
            "random": {"file": None, "return_mean": r_min, "return_std": r_min_std},
            "medium": {"file": keep(medium["step"], "medium"), "step": medium["step"], "return_mean": m_ret,
                       "return_std": m_std, "ep_len": m_len, "target": target},
            "expert": {"file": keep(best["step"], "expert"), "step": best["step"], "return_mean": r_max,
                       "return_std": r_max_std, "ep_len": expert_len, "deterministic_return_mean": det_ret},
        },
        "replay": [{"name": f"replay-{i:02d}", "file": keep(step, f"replay-{i:02d}"), "step": step,
                    "score": next(r["eval/return_mean"] for r in records if r["step"] == step)}
                   for i, step in enumerate(picks)],
    }
    (dest / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def _read_config(run: Path) -> dict:
    import yaml

    path = run / "config.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seqrl.envs.behaviour", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train PPO and snapshot/score the actor along the way")
    tr.add_argument("env_id")
    tr.add_argument("--steps", type=int, help="total environment steps (default: BEHAVIOUR_ENVS)")
    tr.add_argument("--minutes", type=float, help="wall-clock cap (default 25)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--out-dir", default="runs/behaviour")
    tr.add_argument("--resume", action="store_true")
    ex = sub.add_parser("export", help="pick the levels of a run and keep them in src/seqrl/envs/policies/")
    ex.add_argument("env_id")
    ex.add_argument("--run", help="run folder (default runs/behaviour/<env>)")
    ex.add_argument("--ref-episodes", type=int, default=50)
    args = parser.parse_args(argv)
    if args.command == "train":
        kw = dict(BEHAVIOUR_ENVS.get(args.env_id, {}))
        if args.steps:
            kw["total_steps"] = args.steps
        if args.minutes:
            kw["max_minutes"] = args.minutes
        cfg = BehaviourConfig(env_id=args.env_id, seed=args.seed, out_dir=args.out_dir, **kw)
        print(f"run folder: {train_behaviour(cfg, resume=args.resume)}")
    else:
        meta = export_levels(args.env_id, args.run, ref_episodes=args.ref_episodes)
        print(json.dumps({k: meta[k] for k in ("env_id", "ref_min_score", "ref_max_score", "levels")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
