"""A vision-language-action model trained by behaviour cloning on BabyAI bot demonstrations.

    seqrl data babyai GoToRedBallGrey --episodes 1000 --seed 0
    seqrl train vla --config gotoredballgrey [--model.fusion=cross_attention --model.language=minilm]
    seqrl eval vla --checkpoint runs/<name>/checkpoint-2000 [--episodes 200 --seed 1]

Behaviour cloning: batches of B windows of K consecutive steps of the demonstrations (episodes drawn
∝ their length, every step in K windows — the DT floor's `Trajectories` with ``cover`` windows),
cross-entropy of the bot's action at every real step (`seqrl.core.losses.action_loss`), AdamW with
warm-up and cosine decay, gradient clipping. Evaluation: greedy (or, with ``eval.temperature``, sampled)
actions on held-out layouts (`seqrl.envs.babyai.eval_reset_seed`, never a demonstration's), all episodes
in lockstep with one batched forward per step; success rate and mean episode length, next to a uniform
random policy's.

DAgger (``dagger.every``): every that many steps the policy plays fresh training layouts, a bot that
follows each episode labels every state reached, and the labelled states join the demonstrations
(`collect_round`); each round is stored in ``<run>/dagger/`` so a resumed run trains on the same data.

The data order is a pure function of (seed, step) and dropout draws from the global RNG that the
checkpoint restores, so a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.vla_config import VLAConfig, VLADaggerConfig, VLADataConfig, VLAEvalConfig  # noqa: F401 (re-exported)
from seqrl.core.losses import action_loss
from seqrl.data.babyai import load_babyai, load_episodes, pack_episodes, quick_babyai, save_episodes, unpack_obs
from seqrl.data.offline import DatasetError, OfflineDataset, Trajectories
from seqrl.envs.babyai import dagger_reset_seed, evaluate_babyai, labelled_rollouts, random_act, resolve_level
from seqrl.models.loading import load_policy_checkpoint
from seqrl.models.vla import VLAModel, VLAModelConfig
from seqrl.training.loop import Cadence, RunLoop
from seqrl.training.run import make_optimizer, releases_run_folder
from seqrl.utils.dist import bf16_autocast
from seqrl.utils.plots import _save
from seqrl.utils.seeding import seed_everything

QUICK_PREFIX = "quick:"
MAX_EP_LEN = 100_000  # BabyAI levels stop far earlier; Trajectories only checks against it


# ---------------------------------------------------------------------------------------------------
# Data, policy, evaluation


def load_demos(cfg: VLADataConfig) -> OfflineDataset:
    """The demonstrations `cfg.dataset` names, cut to `cfg.max_episodes`."""
    if cfg.dataset.startswith(QUICK_PREFIX):
        ds = quick_babyai(cfg.dataset[len(QUICK_PREFIX):], episodes=cfg.quick_episodes, seed=cfg.quick_seed)
    else:
        ds = load_babyai(cfg.dataset)
    if cfg.max_episodes:
        if cfg.max_episodes > len(ds.episodes):
            raise DatasetError(f"data.max_episodes = {cfg.max_episodes}: the dataset holds {len(ds.episodes)} episodes")
        ds = OfflineDataset(ds.episodes[: cfg.max_episodes], env_id=ds.env_id, discrete=True,
                            action_dim=ds.action_dim, name=ds.name, metadata=ds.metadata)
    return ds


def build_policy(cfg: VLAConfig, dataset: OfflineDataset) -> VLAModel:
    m = cfg.model
    return VLAModel(image_size=7, action_dim=int(dataset.action_dim), hidden_size=m.hidden_size, n_layer=m.n_layer,
                    n_head=m.n_head, context_len=m.context_len, language=m.language, fusion=m.fusion,
                    n_fusion=m.n_fusion, dropout=m.dropout, max_mission_len=m.max_mission_len)


def policy_act(policy: VLAModel, temperature: float = 0.0, seed: int = 0):
    """`evaluate_babyai`'s policy: numpy windows → actions of `policy` on its device (greedy at temperature 0,
    else sampled with a generator seeded by `seed`)."""
    dev = next(policy.parameters()).device
    generator = torch.Generator().manual_seed(seed) if temperature > 0 else None

    def act(images, directions, missions, previous_actions):
        text = policy.encode_missions(missions).to(dev)  # (n, L)
        return policy.get_action(torch.from_numpy(images).to(dev), text, torch.from_numpy(previous_actions).to(dev),
                                 torch.from_numpy(directions).to(dev), temperature=temperature,
                                 generator=generator).cpu().numpy()  # (n,)

    return act


def evaluate(policy: VLAModel, env_id: str, episodes: int, seed: int, max_steps: int = 0,
             record: int | None = None, temperature: float = 0.0) -> tuple[dict[str, float], list, str]:
    """Success rate, mean episode length and return of `policy` (greedy, or sampled at `temperature`) on
    `episodes` held-out layouts; the frames of episode `record` (if given) and a caption of it (mission,
    outcome, length)."""
    was_training = policy.training
    policy.eval()
    try:
        result, frames = evaluate_babyai(policy_act(policy, temperature, seed), env_id, episodes, seed,
                                         policy.context_len, max_steps, record=record)
    finally:
        policy.train(was_training)
    caption = ""
    if record is not None:
        outcome = "success" if result.success[record] else "failure"
        caption = f"'{result.missions[record]}': {outcome} in {int(result.lengths[record])} steps"
    return result.metrics(), frames, caption


def random_baseline(env_id: str, episodes: int, seed: int, max_steps: int = 0) -> dict[str, float]:
    """``eval/random_success_rate`` and ``eval/random_episode_length`` of a uniform random policy."""
    result, _ = evaluate_babyai(random_act(seed), env_id, episodes, seed, 1, max_steps)
    m = result.metrics()
    return {"eval/random_success_rate": m["eval/success_rate"], "eval/random_episode_length": m["eval/episode_length"]}


def dagger_round_path(run_dir: Path, step: int) -> Path:
    """Where the round collected after `step` optimizer steps is stored."""
    return Path(run_dir) / "dagger" / f"round-{step:07d}.npz"


def collect_round(policy: VLAModel, env_id: str, cfg: VLADaggerConfig, run_seed: int, step: int, index: int,
                  max_steps: int = 0):
    """DAgger round `index` (collected after `step` steps): the policy plays ``cfg.episodes`` layouts
    ``dagger_reset_seed(run_seed, index · episodes + i)``, labelled by the bot. Returns (episodes, metrics).
    Deterministic in (policy weights, run_seed, step): the β draws and sampled actions use their own seeded RNGs."""
    seeds = [dagger_reset_seed(run_seed, index * cfg.episodes + i) for i in range(cfg.episodes)]
    was_training = policy.training
    policy.eval()
    try:
        episodes, result, stats = labelled_rollouts(
            policy_act(policy, cfg.temperature, seed=run_seed * 1_000_003 + step), env_id, seeds, policy.context_len,
            max_steps, beta=cfg.beta, rng=np.random.default_rng([run_seed, step, 7]),
            bot_memory=policy.context_len if cfg.bot_memory == -1 else cfg.bot_memory)
    finally:
        policy.train(was_training)
    return episodes, {"dagger/success_rate": float(result.success.mean()), "dagger/disagreement": stats["disagreement"],
                      "dagger/bot_errors": stats["bot_errors"], "dagger/round_steps": stats["labelled_steps"]}


def bc_loss(policy: VLAModel, batch: dict[str, torch.Tensor], mission_ids: torch.Tensor, bf16: bool = False):
    """Behaviour-cloning loss of one `Trajectories` batch of B windows of K steps on the policy's device:
    (loss, logits (B, K, A), actions (B, K), mask (B, K)). `mission_ids` (M, L): word ids of the dataset's
    missions, on that device; bf16: autocast the forward (the loss stays fp32)."""
    device = mission_ids.device
    image, direction, mission, prev = unpack_obs(batch["states"])  # (B, K, 7, 7, 3), (B, K) ×3
    mask = batch["mask"].to(device)  # (B, K)
    text = mission_ids[mission[:, -1].to(device)]  # (B, L): the last step is always real
    with bf16_autocast(device, bf16):
        logits = policy(image.long().to(device), text, prev.to(device), direction.to(device), mask)  # (B, K, A)
    actions = batch["actions"].to(device)  # (B, K)
    return action_loss(logits.float(), actions, mask, discrete=True), logits, actions, mask


def load_policy(path: str | Path) -> tuple[VLAModel, dict]:
    """(policy in eval mode, info) from a ``seqrl train vla`` checkpoint folder; errors name the path."""
    return load_policy_checkpoint(path, methods=("vla",))


def episode_strip(frames: list, out_png: str | Path, title: str, max_frames: int = 12) -> Path:
    """Frames (RGB arrays) of one episode as a PNG strip: up to `max_frames`, evenly spaced, first and last kept."""
    from matplotlib.figure import Figure

    if not frames:
        raise ValueError("episode_strip: no frames")
    pick = np.unique(np.linspace(0, len(frames) - 1, min(max_frames, len(frames))).round().astype(int))
    fig = Figure(figsize=(1.8 * len(pick), 2.2))
    for j, t in enumerate(pick):
        ax = fig.add_subplot(1, len(pick), j + 1)
        ax.imshow(frames[t])
        ax.set_title(f"t={t}", fontsize=8)
        ax.axis("off")
    fig.suptitle(title, fontsize=9)
    return _save(fig, out_png)


# ---------------------------------------------------------------------------------------------------
# Training


class BehaviourCloning:
    """The VLA as a run-loop method: one step is a batch of context windows of the demonstrations (and of
    the DAgger rounds so far), the action cross-entropy, one update; every ``dagger.every`` steps a round
    of the policy's own episodes, labelled by the bot, joins the data. The evaluation plays held-out
    episodes (none without ``eval.episodes``)."""

    def __init__(self, cfg: VLAConfig, loop: RunLoop, policy, dataset: OfflineDataset, env_id: str,
                 data: Trajectories, missions: list, info: dict) -> None:
        self.cfg, self.loop, self.policy, self.dataset, self.env_id = cfg, loop, policy, dataset, env_id
        self.info = info  # what a checkpoint needs to rebuild the policy
        self.data, self.missions = data, missions
        self.mission_ids = policy.encode_missions(missions).to(loop.device)  # (M, L)
        self.collected: list = []  # the DAgger rounds' labelled episodes (packed), in order
        self.round_at = range(cfg.dagger.every, cfg.steps, cfg.dagger.every) if cfg.dagger.every else range(0)
        self.at_step = 0
        self.window = [0.0, 0]  # seconds and steps since the last record: perf/steps_per_s
        self.live: dict[str, float] = {}  # the bar's loss, every step
        if not cfg.eval.episodes:
            self.evaluate = None  # no held-out evaluation

    def add_round(self, episodes: list) -> None:
        """A DAgger round's labelled episodes join the training data (and their missions the vocabulary)."""
        if not episodes:
            return
        packed, self.missions = pack_episodes(episodes, self.missions)
        self.collected.extend(packed)
        d = self.dataset
        self.data = Trajectories(OfflineDataset(list(d.episodes) + self.collected, env_id=d.env_id, discrete=True,
                                                action_dim=d.action_dim, name=d.name),
                                 1.0, MAX_EP_LEN, "vla.model", windows="cover")
        self.mission_ids = self.policy.encode_missions(self.missions).to(self.loop.device)

    def step(self, i: int, log: bool) -> dict[str, float]:
        cfg, loop = self.cfg, self.loop
        self.at_step = i + 1
        metrics: dict[str, float] = {}
        if i in self.round_at:  # collected with the weights after `i` steps; stored before training on it
            t_round = time.perf_counter()
            k = self.round_at.index(i)
            loop.bar.advance(0, dagger=f"round {k + 1}: collecting")
            episodes, metrics = collect_round(self.policy, self.env_id, cfg.dagger, cfg.run.seed, i, k, cfg.eval.max_steps)
            save_episodes(dagger_round_path(loop.dir, i), episodes)
            self.add_round(episodes)
            metrics.update({"dagger/episodes": float(len(self.collected)), "data/steps": float(self.data.n_steps),
                            "perf/dagger_s": time.perf_counter() - t_round})
            loop.bar.advance(0, dagger=f"{len(self.collected)} episodes")
        t0 = time.perf_counter()
        b = self.data.batch(i, cfg.batch_size, cfg.model.context_len, cfg.run.seed)
        loss, logits, actions, mask = bc_loss(self.policy, b, self.mission_ids, cfg.run.use_bf16)
        loss.backward()
        stepped = loop.update(i, loss.item())
        self.window[0] += time.perf_counter() - t0
        self.window[1] += 1
        self.live["loss"] = loss.item()
        if log:
            with torch.no_grad():
                real = mask.bool()
                acc = (logits.argmax(-1)[real] == actions[real]).float().mean().item()
            metrics.update({"loss/action": loss.item(), "stats/action_accuracy": acc, "stats/grad_norm": stepped.norm,
                            "stats/lr": stepped.lr, "perf/steps_per_s": self.window[1] / self.window[0],
                            "perf/samples_per_s": self.window[1] * cfg.batch_size / self.window[0]})
            self.window[:] = [0.0, 0]
        return metrics

    def evaluate(self) -> dict[str, float]:
        cfg = self.cfg
        t_eval = time.perf_counter()
        done = self.at_step
        last = done == cfg.steps and cfg.eval.strip
        out, frames, caption = evaluate(self.policy, self.env_id, cfg.eval.episodes, cfg.eval.seed, cfg.eval.max_steps,
                                        record=0 if last else None, temperature=cfg.eval.temperature)
        out["perf/eval_s"] = time.perf_counter() - t_eval
        if frames:
            episode_strip(frames, self.loop.dir / "plots" / "episode.png",
                          f"{cfg.run.name} step {done}, held-out episode 0 — {caption}")
        return out

    def state(self) -> dict:
        return {"policy": self.info}

    def show(self, m: dict[str, float]) -> dict[str, float]:
        return {**self.live, **({"success_rate": m["eval/success_rate"]} if "eval/success_rate" in m else {})}


@releases_run_folder
def train(cfg: VLAConfig, dataset: OfflineDataset | None = None) -> dict[str, float]:
    """Behaviour-clone a VLA on `dataset` (default: the one `cfg.data` names); returns the final metrics."""
    loop = RunLoop(cfg, "vla", distributed=False, seed=False)
    device, run_dir = loop.device, loop.dir

    dataset = dataset if dataset is not None else load_demos(cfg.data)
    if not dataset.env_id.startswith("BabyAI-"):
        raise DatasetError(f"data.dataset {dataset.name}: not a BabyAI dataset (environment {dataset.env_id!r})")
    env_id = resolve_level(dataset.env_id)
    if not dataset.metadata.get("missions"):
        raise DatasetError(f"data.dataset {dataset.name}: no mission list in its metadata (load it with "
                           f"seqrl.data.babyai.load_babyai)")
    data = Trajectories(dataset, 1.0, MAX_EP_LEN, "vla.model", windows="cover")
    seed_everything(cfg.run.seed)  # after the dataset: building one may draw from the global RNGs
    policy = build_policy(cfg, dataset).to(device)
    missions = list(dataset.metadata["missions"])
    info = {"method": "vla", "model": dict(policy.kwargs), "env_id": env_id, "dataset": dataset.name,
            "episodes": len(dataset.episodes)}
    method = BehaviourCloning(cfg, loop, policy, dataset, env_id, data, missions, info)
    optimizer, scheduler = make_optimizer(policy, cfg.optim, cfg.steps, fused=True)

    loop.resume(policy, optimizer, scheduler)
    start = method.at_step = loop.start
    for r, at in enumerate(method.round_at):  # rounds before the resumed step: as they were collected
        if at >= start:
            break
        path = dagger_round_path(run_dir, at)
        if not path.exists():
            raise DatasetError(f"{path}: DAgger round {r} (after step {at}) is missing, and the policy that "
                               f"collected it is gone; resume from a checkpoint before step {at} or start a new run")
        method.add_round(load_episodes(path))
    if start == 0:
        first = {"model/parameters": sum(p.numel() for p in policy.parameters() if p.requires_grad),
                 "data/episodes": len(dataset.episodes), "data/steps": method.data.n_steps,
                 "data/missions": len(method.missions)}
        if cfg.eval.episodes:
            first.update(random_baseline(env_id, cfg.eval.episodes, cfg.eval.seed, cfg.eval.max_steps))
        loop.log_start(first)

    policy.train()
    final = loop.run(cfg.steps, method, Cadence(eval_every=cfg.eval.every))
    curves = ["loss/action", "stats/action_accuracy", "eval/success_rate", "eval/episode_length", "stats/lr",
              "perf/samples_per_s"] + (["dagger/success_rate", "dagger/disagreement"] if cfg.dagger.every else [])
    loop.plot(curves, "vla.png", f"VLA {cfg.run.name}")
    return final
