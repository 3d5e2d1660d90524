"""Minari datasets: build D4RL-style ones from the kept behaviour policies, load any local one as an `OfflineDataset`.

Build (the library side of ``seqrl data minari ENV LEVEL``)::

    build_dataset("Hopper-v5", "medium")          # -> <MINARI_DATASETS_PATH or ~/.minari/datasets>/seqrl/hopper/medium-v0
    minari.load_dataset("seqrl/hopper/medium-v0")  # a real Minari dataset, ref_min_score/ref_max_score included

Levels (as in D4RL, from the policies in ``seqrl/envs/policies/<env>/``; see docs/datasets.md):

* ``random``         uniform random actions
* ``medium``         one policy at about a third of the expert's (normalised) return
* ``expert``         the best policy of the training run
* ``medium-replay``  equal shares of rollouts of the snapshots saved along training up to ``medium``
  (D4RL kept the replay buffer itself; a uniform replay buffer holds equal amounts of each stretch of
  training too, but its data came from the policy *while* it learned, ours from snapshots)
* ``medium-expert``  half ``medium``, half ``expert`` rollouts

Every dataset is a pure function of (env, level, steps, seed): same arguments, identical arrays.

Load: `load_offline` takes a Minari dataset id that is present locally or a dataset folder, never
touches the network, and sends every episode through `Episode.validate` (a bad episode is named).
`quick_dataset` builds a small Pendulum dataset in memory in about a second, for tests.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import numpy as np

from seqrl.data.config import QUICK_PREFIX, DataConfig
from seqrl.data.offline import DatasetError, Episode, OfflineDataset
from seqrl.utils.extras import require

__all__ = [
    "DATASET_ENVS",
    "DEFAULT_STEPS",
    "LEVELS",
    "QUICK_PREFIX",
    "DataConfig",
    "build_dataset",
    "build_episodes",
    "dataset_id",
    "datasets_root",
    "load_dataset",
    "load_offline",
    "quick_dataset",
    "resolve_env",
    "write_minari",
]

DATASET_ENVS = {"pendulum": "Pendulum-v1", "hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5",
                "walker2d": "Walker2d-v5"}
"""Short name (in dataset ids) → gymnasium id of the environments with kept behaviour policies."""
LEVELS = ("random", "medium", "expert", "medium-replay", "medium-expert")
DEFAULT_STEPS = {"Pendulum-v1": 20_000, "Hopper-v5": 200_000, "HalfCheetah-v5": 200_000, "Walker2d-v5": 200_000}
"""Default dataset sizes in environment steps (D4RL's MuJoCo sets hold 1M; these fit a 2-core CPU)."""
_LEVEL_CODE = {level: i for i, level in enumerate(LEVELS)}
N_PARALLEL = 16  # environments stepped in lockstep while building (fixed: part of what makes a dataset)


def resolve_env(env: str) -> tuple[str, str]:
    """``(short name, gymnasium id)`` of ``pendulum`` / ``Pendulum-v1`` (either spelling); error lists them."""
    if env in DATASET_ENVS:
        return env, DATASET_ENVS[env]
    for short, env_id in DATASET_ENVS.items():
        if env == env_id:
            return short, env_id
    raise DatasetError(f"environment {env!r}: no kept behaviour policies; choose one of "
                       f"{', '.join(f'{s} ({i})' for s, i in DATASET_ENVS.items())}")


def dataset_id(env: str, level: str, version: int = 0) -> str:
    """``seqrl/<env>/<level>-v<version>``, e.g. ``seqrl/hopper/medium-v0``."""
    short, _ = resolve_env(env)
    _check_level(level)
    return f"seqrl/{short}/{level}-v{version}"


def datasets_root() -> Path:
    """Minari's datasets folder: ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise DatasetError(f"level {level!r}: choose one of {', '.join(LEVELS)}")


def _part_seed(seed: int, level: str, part: int) -> int:
    return int(np.random.SeedSequence([seed, _LEVEL_CODE[level], part]).generate_state(1)[0])


# ---------------------------------------------------------------------------------------------------
# Building


def build_episodes(env: str, level: str, n_steps: int | None = None, seed: int = 0) -> list[Episode]:
    """The episodes of dataset (env, level) with at least `n_steps` steps (whole episodes), ids 0…N−1."""
    from seqrl.envs.behaviour import kept_meta, load_behaviour
    from seqrl.envs.make import make_env
    from seqrl.envs.rollout import collect_episodes, uniform_policy

    _, env_id = resolve_env(env)
    _check_level(level)
    n_steps = DEFAULT_STEPS[env_id] if n_steps is None else n_steps
    if n_steps < 1:
        raise DatasetError(f"n_steps must be >= 1 (got {n_steps})")
    if level == "random":
        space = make_env(env_id).action_space
        parts = [(uniform_policy(space), n_steps)]
    elif level in ("medium", "expert"):
        parts = [(load_behaviour(env_id, level), n_steps)]
    elif level == "medium-expert":
        half = max(1, n_steps // 2)
        parts = [(load_behaviour(env_id, "medium"), half), (load_behaviour(env_id, "expert"), max(1, n_steps - half))]
    else:  # medium-replay
        names = [r["name"] for r in kept_meta(env_id)["replay"]]
        cuts = [n_steps * j // len(names) for j in range(len(names) + 1)]
        parts = [(load_behaviour(env_id, name), cuts[j + 1] - cuts[j]) for j, name in enumerate(names)]
    # Part j fills the budget up to its cumulative target Σ_{i≤j} steps_i; whole episodes overshoot a
    # little, and the next part takes less (or is skipped), so the total stays close to n_steps.
    episodes: list[Episode] = []
    target = total = 0
    for part, (policy, steps) in enumerate(parts):
        target += steps
        if target - total <= 0:
            continue
        got = collect_episodes(env_id, policy, n_steps=target - total, seed=_part_seed(seed, level, part),
                               n_parallel=N_PARALLEL)
        episodes += got
        total += sum(len(e) for e in got)
    for i, ep in enumerate(episodes):
        ep.id = i
    return episodes


def _offline(episodes: list[Episode], env_id: str, name: str, level: str, seed: int) -> OfflineDataset:
    from seqrl.envs.behaviour import kept_meta
    from seqrl.envs.make import make_env

    meta = kept_meta(env_id)
    space = make_env(env_id).action_space
    return OfflineDataset(episodes, env_id=env_id, discrete=False, action_dim=int(space.shape[0]),
                          action_low=space.low.astype(np.float32), action_high=space.high.astype(np.float32),
                          ref_min_score=float(meta["ref_min_score"]), ref_max_score=float(meta["ref_max_score"]),
                          name=name, metadata={"level": level, "seed": seed})


def quick_dataset(level: str = "medium-replay", n_steps: int = 4000, seed: int = 0) -> OfflineDataset:
    """A small Pendulum-v1 dataset built in memory from the kept policies (≈ 1 s for 4000 steps).

    Pendulum episodes are 200 steps, so `n_steps` = 4000 gives 20 episodes. ``medium-replay`` (the
    default) mixes rollouts of ~10 snapshots from an untrained policy up to ``medium``, so returns
    spread widely and conditioning on a high target return matters — the setting where a Decision
    Transformer should beat the dataset's mean behaviour return. Reference returns (random / expert)
    come from the kept policies, so `OfflineDataset.normalized` works. Nothing is written to disk.

    >>> ds = quick_dataset(n_steps=400)
    >>> ds.env_id, len(ds.episodes), ds.n_steps, ds.episodes[0].observations.shape
    ('Pendulum-v1', 2, 400, (201, 3))
    """
    episodes = build_episodes("pendulum", level, n_steps, seed)
    return _offline(episodes, "Pendulum-v1", f"quick:pendulum/{level}", level, seed)


@contextmanager
def _minari_root(root: Path) -> Iterator[None]:
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def create_in_place(dataset_id: str, root: Path, buffers: list, **create_kwargs) -> Path:
    """`minari.create_dataset_from_buffers(dataset_id, buffers, **create_kwargs)` into a temporary folder
    beside `root / dataset_id`, then renamed into place (replacing an existing dataset only after the
    new one is complete), so an interrupted build never leaves a half-written dataset; returns the folder."""
    minari = require("minari", "Minari datasets")

    dest = root / dataset_id
    root.mkdir(parents=True, exist_ok=True)
    tmp_root = Path(tempfile.mkdtemp(dir=root, prefix=".seqrl-build-"))
    try:
        with _minari_root(tmp_root), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"`(code_permalink|author_email)` is set to None")
            minari.create_dataset_from_buffers(dataset_id, buffers, **create_kwargs)
        namespace = dataset_id.split("/")[0] if "/" in dataset_id else None
        if namespace and not (root / namespace / "namespace_metadata.json").exists():
            src = tmp_root / namespace / "namespace_metadata.json"
            if src.exists():
                (root / namespace).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, root / namespace / "namespace_metadata.json")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            aside = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, aside)
            os.replace(tmp_root / dataset_id, dest)
            shutil.rmtree(aside)
        else:
            os.replace(tmp_root / dataset_id, dest)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return dest


def write_minari(dataset_id: str, episodes: list[Episode], env_id: str, *, root: str | os.PathLike | None = None,
                 ref_min_score: float | None = None, ref_max_score: float | None = None,
                 algorithm_name: str | None = None, description: str | None = None, force: bool = False) -> Path:
    """Write `episodes` as Minari dataset `dataset_id` under `root` (default `datasets_root`); return its folder.

    Uses `minari.create_dataset_from_buffers` with `EpisodeBuffer`s (no DataCollector, so no jax) and
    the HDF5 format (Minari's default; its arrow writer re-measures the folder after every episode,
    quadratic in the episode count); observations and actions are stored in the environment's space dtypes (Box
    spaces: the episodes' float32 arrays become float64 where the space says so, which is exact). The
    dataset is built in a temporary folder beside its destination and renamed into place, so an
    interrupted build never leaves a half-written dataset. An existing dataset is an error unless
    `force`.
    """
    EpisodeBuffer = require("minari.data_collector", "building a Minari dataset").EpisodeBuffer

    root = Path(root) if root is not None else datasets_root()
    dest = root / dataset_id
    if dest.exists() and not force:
        raise DatasetError(f"Minari dataset {dataset_id} already exists at {dest} (pass --force to rebuild it)")
    for ep in episodes:
        ep.validate()
    # Minari's storages want arrays of the spaces' own dtypes (Hopper-v5 observes float64)
    probe = gym.make(env_id)
    obs_dtype, act_dtype = probe.observation_space.dtype, probe.action_space.dtype
    probe.close()
    buffers = [EpisodeBuffer(id=ep.id, observations=np.asarray(ep.observations, dtype=obs_dtype),
                             actions=np.asarray(ep.actions, dtype=act_dtype),
                             rewards=ep.rewards.astype(np.float64), terminations=ep.terminations,
                             truncations=ep.truncations, infos={}) for ep in episodes]
    return create_in_place(dataset_id, root, buffers, env=env_id, eval_env=env_id, algorithm_name=algorithm_name,
                           author="seqrl", ref_min_score=ref_min_score, ref_max_score=ref_max_score,
                           description=description, data_format="hdf5")


def build_dataset(env: str, level: str, n_steps: int | None = None, seed: int = 0,
                  out: str | os.PathLike | None = None, force: bool = False, version: int = 0) -> Path:
    """Build dataset ``seqrl/<env>/<level>-v<version>`` from the kept policies and write it with Minari.

    `out` is a Minari datasets folder (default: `datasets_root`, so ``minari.load_dataset(id)`` finds
    it). Reference returns are the kept policies' measured random and expert returns.
    """
    from seqrl.envs.behaviour import kept_meta

    short, env_id = resolve_env(env)
    ds_id = dataset_id(short, level, version)
    root = Path(out) if out is not None else datasets_root()
    if (root / ds_id).exists() and not force:
        raise DatasetError(f"Minari dataset {ds_id} already exists at {root / ds_id} (pass --force to rebuild it)")
    n_steps = DEFAULT_STEPS[env_id] if n_steps is None else n_steps
    episodes = build_episodes(env_id, level, n_steps, seed)
    meta = kept_meta(env_id)
    returns = np.array([ep.ret for ep in episodes])
    description = (f"seqrl D4RL-style {level} dataset of {env_id}: {len(episodes)} episodes, "
                   f"{sum(len(e) for e in episodes)} steps, seed {seed}, behaviour return "
                   f"{returns.mean():.1f} ± {returns.std():.1f}; built by `seqrl data minari {short} {level} "
                   f"--steps {n_steps} --seed {seed}` from {meta['algo']} policies; reference returns "
                   f"random {meta['ref_min_score']:.1f}, expert {meta['ref_max_score']:.1f}")
    return write_minari(ds_id, episodes, env_id, root=root, ref_min_score=float(meta["ref_min_score"]),
                        ref_max_score=float(meta["ref_max_score"]),
                        algorithm_name=f"seqrl behaviour policy ({meta['algo']}), level {level}",
                        description=description, force=force)


# ---------------------------------------------------------------------------------------------------
# Loading


def _how_to_get(spec: str) -> str:
    parts = spec.split("/")
    if len(parts) == 3 and parts[0] == "seqrl":
        level = parts[2].rsplit("-v", 1)[0]
        return f"build it here: seqrl data minari {parts[1]} {level}"
    return f"with internet: minari download {spec}"


def open_minari(spec: str | os.PathLike, missing, purpose: str = "Minari datasets"):
    """``(MinariDataset, its data folder)`` for `spec`, a local dataset id or a folder (the dataset's, or
    its ``data/``); the network is never used. Absent: `DatasetError` with ``missing(spec, is_folder)``;
    a folder that does not open: `DatasetError` naming it."""
    MinariDataset = require("minari", purpose).MinariDataset

    spec = str(spec)
    path = Path(spec)
    folder = path.is_dir()
    data = (path / "data" if (path / "data").is_dir() else path) if folder else datasets_root() / spec / "data"
    if not (data / "metadata.json").is_file():
        raise DatasetError(missing(spec, folder))
    try:
        return MinariDataset(str(data)), data
    except Exception as e:  # noqa: BLE001 — a broken folder, named
        raise DatasetError(f"{spec}: cannot open as a Minari dataset: {e}") from e


def load_offline(spec: str | os.PathLike) -> OfflineDataset:
    """A Minari dataset as an `OfflineDataset`: `spec` is a local dataset id or a dataset folder.

    A folder may be the dataset's folder (holding ``data/``) or its ``data/`` folder. An id that is not
    in the local datasets folder is an error saying how to get it; the network is never used. Box and
    Discrete actions are supported; Box, Discrete, Dict and Tuple observations are flattened
    (Discrete to one-hot). Every episode is checked (`Episode.validate`): a bad one is named.
    """
    spec = str(spec)
    dataset, data = open_minari(spec, lambda s, folder: (
        f"{s}: not a Minari dataset folder (no data/metadata.json)" if folder else
        f"Minari dataset {s!r} is not in the local datasets folder {datasets_root()} (MINARI_DATASETS_PATH); "
        f"{_how_to_get(s)}"))
    obs_space, act_space = dataset.observation_space, dataset.action_space
    if isinstance(act_space, gym.spaces.Box):
        discrete, action_dim = False, int(np.prod(act_space.shape))
        low, high = act_space.low.reshape(-1).astype(np.float32), act_space.high.reshape(-1).astype(np.float32)
    elif isinstance(act_space, gym.spaces.Discrete):
        discrete, action_dim, low, high = True, int(act_space.n), None, None
    else:
        raise DatasetError(f"{spec}: action space {act_space} is not supported (Box or Discrete only)")
    # Minari's arrow storage pads every column to the observations' length and drops the last row of
    # the others on reading, so an episode written with too few observations comes back shorter than
    # it was: its metadata's total_steps (len(rewards) at writing) is what tells.
    steps_by_id = {int(m["id"]): m.get("total_steps") for m in dataset.storage.get_episode_metadata(dataset.episode_indices)}
    episodes = []
    for ep in dataset.iterate_episodes():
        where = f"{spec}: episode {ep.id}"
        written = steps_by_id.get(int(ep.id))
        if written is not None and int(written) != len(ep.rewards):
            raise DatasetError(f"{where}: was written with {written} steps but {len(ep.rewards)} were read "
                               f"(its observations, actions and rewards disagree in length)")
        obs = _flatten(obs_space, ep.observations, f"{where}: observations")
        if discrete:
            actions = np.asarray(ep.actions).reshape(-1).astype(np.int64) - int(act_space.start)
            if len(actions) and (actions.min() < 0 or actions.max() >= action_dim):
                raise DatasetError(f"{where}: actions outside [0, {action_dim})")
        else:
            actions = np.asarray(ep.actions, dtype=np.float32)
            actions = actions.reshape(actions.shape[0], -1) if actions.ndim else actions
        episode = Episode(observations=obs, actions=actions, rewards=np.asarray(ep.rewards, dtype=np.float32),
                          terminations=np.asarray(ep.terminations, dtype=bool),
                          truncations=np.asarray(ep.truncations, dtype=bool), id=int(ep.id))
        try:
            episode.validate()
        except DatasetError as e:
            raise DatasetError(f"{spec}: {e}") from e
        episodes.append(episode)
    meta = dataset.storage.metadata
    env_spec = dataset.spec.env_spec
    ref_min, ref_max = meta.get("ref_min_score"), meta.get("ref_max_score")
    return OfflineDataset(
        episodes, env_id=env_spec.id if env_spec is not None else "", discrete=discrete, action_dim=action_dim,
        action_low=low, action_high=high, ref_min_score=None if ref_min is None else float(ref_min),
        ref_max_score=None if ref_max is None else float(ref_max), name=spec,
        metadata={"dataset_id": meta.get("dataset_id"), "algorithm_name": meta.get("algorithm_name"),
                  "description": meta.get("description"), "minari_version": meta.get("minari_version")},
    )


def _flatten(space: gym.spaces.Space, value, where: str) -> np.ndarray:
    """Per-step values of `space` (arrays with a leading time axis) as a float32 (T+1, D) array."""
    if isinstance(space, gym.spaces.Box):
        arr = np.asarray(value, dtype=np.float32)
        return arr.reshape(arr.shape[0], -1)
    if isinstance(space, gym.spaces.Discrete):
        idx = np.asarray(value).reshape(-1).astype(np.int64) - int(space.start)
        if len(idx) and (idx.min() < 0 or idx.max() >= space.n):
            raise DatasetError(f"{where}: values outside the Discrete({space.n}) space")
        return np.eye(int(space.n), dtype=np.float32)[idx]
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, dict):
            raise DatasetError(f"{where}: expected a dict of arrays for {space}")
        return np.concatenate([_flatten(sub, value[key], f"{where}.{key}") for key, sub in space.spaces.items()], axis=1)
    if isinstance(space, gym.spaces.Tuple):
        return np.concatenate([_flatten(sub, v, f"{where}[{i}]") for i, (sub, v) in enumerate(zip(space.spaces, value))],
                              axis=1)
    raise DatasetError(f"{where}: observation space {space} is not supported (Box, Discrete, Dict, Tuple)")


def describe(ds: OfflineDataset) -> dict:
    """Size and return statistics of a dataset (what `seqrl data minari` prints)."""
    r = ds.returns
    out = {"name": ds.name, "env_id": ds.env_id, "episodes": len(ds.episodes), "steps": ds.n_steps,
           "return_mean": float(r.mean()), "return_std": float(r.std()), "return_min": float(r.min()),
           "return_max": float(r.max())}
    if ds.ref_min_score is not None and ds.ref_max_score is not None:
        out.update(ref_min_score=ds.ref_min_score, ref_max_score=ds.ref_max_score,
                   normalized_mean=float(ds.normalized(r.mean())))
    return out


def load_dataset(cfg: DataConfig) -> OfflineDataset:
    """The dataset `cfg.dataset` names (see `DataConfig.dataset`)."""
    if cfg.dataset.startswith(QUICK_PREFIX):
        return quick_dataset(level=cfg.dataset[len(QUICK_PREFIX):], n_steps=cfg.quick_steps, seed=cfg.quick_seed)
    return load_offline(cfg.dataset)


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(describe(quick_dataset()), indent=1))
