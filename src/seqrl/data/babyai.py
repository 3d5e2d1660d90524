"""BabyAI bot demonstrations: build them, store them as a Minari dataset, load them as an `OfflineDataset`.

    seqrl data babyai GoToRedBallGrey --episodes 1000 --seed 0     # -> seqrl/babyai/GoToRedBallGrey-n1000-s0-v0
    build_babyai("GoToLocal", episodes=5000, seed=0)
    load_babyai("seqrl/babyai/GoToLocal-n5000-s0-v0")              # OfflineDataset; missions in .metadata

Stored (Minari, HDF5): observations a Dict of ``image`` (7, 7, 3) uint8, ``direction`` Discrete(4) and
``mission`` Text; actions Discrete(7); BabyAI's rewards, terminations and truncations. Episode i of
seed s starts from `seqrl.envs.babyai.demo_reset_seed` (s, i); the bot's failures (it raised, or the
goal was not reached in time) are skipped and counted, never stored, and the next index is tried, so a
dataset is a pure function of (level, episodes, seed) — also when ``workers`` processes build it. Beside
Minari's files a dataset folder holds `PACKED`: the same episodes as flat arrays, which load in seconds.

In memory each step is one flat float32 row (`OBS_DIM` values, see `unpack_obs`): the 147 image
values, the direction, the mission's index into ``metadata["missions"]`` and the previous action
(``BOS`` at an episode's first step) — so the DT floor's `Trajectories` windows serve the VLA
unchanged, and a window carries the action before its first step.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import numpy as np

from seqrl.data.minari_data import create_in_place, datasets_root, open_minari
from seqrl.data.offline import DatasetError, Episode, OfflineDataset
from seqrl.envs.babyai import BOS, N_ACTIONS, BabyAIEpisode, bot_episode, demo_reset_seed, make_babyai, resolve_level
from seqrl.utils.extras import require

__all__ = ["IMAGE_SHAPE", "OBS_DIM", "PACKED", "babyai_dataset_id", "build_babyai", "collect_demos", "load_babyai",
           "load_episodes", "pack_episodes", "quick_babyai", "read_packed", "save_episodes", "unpack_obs", "write_babyai",
           "write_packed"]

IMAGE_SHAPE = (7, 7, 3)
_IMG = int(np.prod(IMAGE_SHAPE))
OBS_DIM = _IMG + 3
"""image (147) · direction · mission index · previous action."""
MAX_ATTEMPTS_FACTOR = 2
"""Give up when the bot failed on more than this many times the requested episodes (+ 100)."""


def babyai_dataset_id(level: str, episodes: int, seed: int, version: int = 0) -> str:
    """``seqrl/babyai/<Level>-n<episodes>-s<seed>-v<version>``.

    >>> babyai_dataset_id("BabyAI-GoToLocal-v0", 500, 1)
    'seqrl/babyai/GoToLocal-n500-s1-v0'
    """
    short = resolve_level(level)[len("BabyAI-"):-len("-v0")]
    return f"seqrl/babyai/{short}-n{episodes}-s{seed}-v{version}"


def collect_demos(level: str, episodes: int, seed: int = 0, progress: bool = False,
                  workers: int = 1) -> tuple[list[BabyAIEpisode], Counter]:
    """`episodes` successful bot episodes of `level` (indices 0, 1, … skipping failures) and the failures by reason.

    workers > 1: attempts run in that many processes, in chunks of consecutive indices, and are merged
    in index order — the same episodes and failure counts as one process, since an attempt is a pure
    function of (level, `demo_reset_seed` (seed, index)).
    """
    from seqrl.utils.progress import progress_bar

    if episodes < 1:
        raise DatasetError(f"episodes must be >= 1 (got {episodes})")
    if not isinstance(workers, int) or workers < 1:
        raise DatasetError(f"workers must be an int >= 1 (got {workers!r})")
    env_id = resolve_level(level)
    with progress_bar(episodes, f"bot demos {env_id}", disable=not progress) as bar:
        if workers > 1:
            return _collect_parallel(env_id, episodes, seed, workers, bar)
        env = make_babyai(env_id)
        demos: list[BabyAIEpisode] = []
        failures: Counter = Counter()
        index = 0
        try:
            while len(demos) < episodes:
                _check_failures(env_id, failures, len(demos), episodes)
                ep, why = bot_episode(env, demo_reset_seed(seed, index))
                index += 1
                if ep is None:
                    failures[why] += 1
                    continue
                demos.append(ep)
                bar.advance(1, failed=sum(failures.values()))
        finally:
            env.close()
    return demos, failures


def _check_failures(env_id: str, failures: Counter, successes: int, episodes: int) -> None:
    if sum(failures.values()) > MAX_ATTEMPTS_FACTOR * episodes + 100:
        raise DatasetError(f"{env_id}: the bot failed {sum(failures.values())} times for {successes} "
                           f"successes ({dict(failures)}); this level is not one it solves")


def _collect_parallel(env_id: str, episodes: int, seed: int, workers: int, bar) -> tuple[list[BabyAIEpisode], Counter]:
    """`collect_demos` over `workers` processes: rounds of index chunks until the first `episodes`
    successes are known, then the in-order scan one process would have made."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from seqrl.data import babyai_workers

    attempts: list = []  # attempts[i]: (episode or None, why) of index i, filled as a prefix
    shown = 0
    # spawn: the parent may hold torch's threads, which fork would copy half-locked
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        while True:
            demos: list[BabyAIEpisode] = []
            failures: Counter = Counter()
            for ep, why in attempts:  # the sequential scan, failure limit included
                if len(demos) == episodes:
                    break
                _check_failures(env_id, failures, len(demos), episodes)
                if ep is None:
                    failures[why] += 1
                else:
                    demos.append(ep)
            if len(demos) == episodes:
                return demos, failures
            _check_failures(env_id, failures, len(demos), episodes)
            missing = episodes - len(demos)
            ok_rate = len(demos) / len(attempts) if attempts else 1.0
            n = max(workers, int(np.ceil(missing / max(ok_rate, 0.05) * (1.0 if not attempts else 1.1))))
            chunk = max(1, min(64, -(-n // (4 * workers))))
            base = len(attempts)
            futures = [pool.submit(babyai_workers.attempt_chunk, env_id, seed, a, min(a + chunk, base + n))
                       for a in range(base, base + n, chunk)]
            got: dict[int, list] = {}
            try:
                for fut in as_completed(futures):
                    start, rows = fut.result()
                    got[start] = rows
                    new = min(sum(ep is not None for ep, _ in rows), episodes - shown)
                    shown += new
                    bar.advance(new)
            except BaseException:  # a worker died or Ctrl-C: drop the queued chunks instead of running them
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            for start in sorted(got):
                attempts.extend(got[start])


def pack_episodes(demos: list[BabyAIEpisode], missions: list[str] | None = None) -> tuple[list[Episode], list[str]]:
    """Flat `Episode`s (observations (T+1, OBS_DIM)) and the mission list their indices point into
    (`missions` extended with new ones in order of first appearance). The previous-action column holds the
    executed actions; the targets are the episode's `labels` where it has them (DAgger data), else its actions."""
    missions = list(missions or [])
    lookup = {m: i for i, m in enumerate(missions)}
    out = []
    for k, d in enumerate(demos):
        if d.mission not in lookup:
            lookup[d.mission] = len(missions)
            missions.append(d.mission)
        T1 = d.images.shape[0]
        obs = np.empty((T1, OBS_DIM), dtype=np.float32)  # (T+1, OBS_DIM)
        obs[:, :_IMG] = d.images.reshape(T1, _IMG)
        obs[:, _IMG] = d.directions
        obs[:, _IMG + 1] = lookup[d.mission]
        obs[:, _IMG + 2] = np.concatenate([[BOS], d.actions])  # a_{t−1}; BOS at t = 0
        target = d.actions if d.labels is None else d.labels
        out.append(Episode(observations=obs, actions=target.astype(np.int64), rewards=d.rewards.astype(np.float32),
                           terminations=d.terminations.copy(), truncations=d.truncations.copy(), id=k))
    return out, missions


def unpack_obs(obs) -> tuple:
    """Flat rows (…, OBS_DIM) → image (…, 7, 7, 3), direction (…), mission index (…), previous action (…),
    the last three as integers (torch tensors or numpy arrays alike)."""
    if obs.shape[-1] != OBS_DIM:
        raise DatasetError(f"BabyAI observations must have {OBS_DIM} values per step (got {tuple(obs.shape)})")
    lead = tuple(obs.shape[:-1])
    image = obs[..., :_IMG].reshape(*lead, *IMAGE_SHAPE)
    ints = obs[..., _IMG:].round()
    ints = ints.long() if hasattr(ints, "long") else ints.astype(np.int64)
    return image, ints[..., 0], ints[..., 1], ints[..., 2]


def _offline(demos: list[BabyAIEpisode], env_id: str, name: str, metadata: dict) -> OfflineDataset:
    episodes, missions = pack_episodes(demos)
    return OfflineDataset(episodes, env_id=env_id, discrete=True, action_dim=N_ACTIONS, name=name,
                          metadata={**metadata, "missions": missions,
                                    "reset_seeds": [d.reset_seed for d in demos]})


def quick_babyai(level: str = "GoToRedBallGrey", episodes: int = 200, seed: int = 0) -> OfflineDataset:
    """Bot demonstrations built in memory (nothing written), for tests and quick runs."""
    env_id = resolve_level(level)
    demos, failures = collect_demos(env_id, episodes, seed)
    return _offline(demos, env_id, f"quick:babyai/{env_id}", {"level": env_id, "seed": seed,
                                                               "bot_failures": sum(failures.values())})


def _observation_space():
    import gymnasium as gym

    charset = "".join(chr(c) for c in range(32, 127))
    return gym.spaces.Dict({"direction": gym.spaces.Discrete(4),
                            "image": gym.spaces.Box(0, 255, IMAGE_SHAPE, dtype=np.uint8),
                            "mission": gym.spaces.Text(max_length=512, min_length=1, charset=charset)})


def write_babyai(dataset_id: str, demos: list[BabyAIEpisode], env_id: str, *, root: str | os.PathLike | None = None,
                 description: str | None = None, force: bool = False) -> Path:
    """Write `demos` as Minari dataset `dataset_id` under `root` (default `datasets_root`), atomically
    (built in a temporary folder beside it, then renamed in); an existing one is an error unless `force`."""
    import gymnasium as gym
    EpisodeBuffer = require("minari.data_collector", "BabyAI demonstrations").EpisodeBuffer

    root = Path(root) if root is not None else datasets_root()
    dest = root / dataset_id
    if dest.exists() and not force:
        raise DatasetError(f"Minari dataset {dataset_id} already exists at {dest} (pass --force to rebuild it)")
    buffers = [EpisodeBuffer(id=k, observations={"direction": d.directions, "image": d.images,
                                                  "mission": [d.mission] * len(d.directions)},
                             actions=d.actions, rewards=d.rewards.astype(np.float64), terminations=d.terminations,
                             truncations=d.truncations, infos={}) for k, d in enumerate(demos)]
    path = create_in_place(dataset_id, root, buffers, env=env_id, eval_env=env_id,
                           algorithm_name="minigrid BabyAIBot", author="seqrl", observation_space=_observation_space(),
                           action_space=gym.spaces.Discrete(N_ACTIONS), description=description, data_format="hdf5")
    write_packed(path, demos)
    return path


def build_babyai(level: str, episodes: int = 1000, seed: int = 0, out: str | os.PathLike | None = None,
                 force: bool = False, progress: bool = False, workers: int = 1) -> tuple[Path, dict]:
    """Collect bot demonstrations of `level` (in `workers` processes) and write them (`babyai_dataset_id`);
    returns (folder, summary). The dataset's bytes do not depend on `workers`."""
    env_id = resolve_level(level)
    ds_id = babyai_dataset_id(env_id, episodes, seed)
    root = Path(out) if out is not None else datasets_root()
    if (root / ds_id).exists() and not force:
        raise DatasetError(f"Minari dataset {ds_id} already exists at {root / ds_id} (pass --force to rebuild it)")
    t0 = time.perf_counter()
    demos, failures = collect_demos(env_id, episodes, seed, progress=progress, workers=workers)
    build_s = time.perf_counter() - t0
    lengths = np.array([len(d.actions) for d in demos])
    summary = {"dataset": ds_id, "env_id": env_id, "episodes": len(demos), "steps": int(lengths.sum()),
               "mean_length": float(lengths.mean()), "missions": len({d.mission for d in demos}),
               "bot_failures": sum(failures.values()), "failure_reasons": dict(failures),
               "demos_per_s": round(len(demos) / max(build_s, 1e-9), 1), "workers": workers}
    description = (f"BabyAI bot demonstrations of {env_id}: {len(demos)} episodes, {summary['steps']} steps, "
                   f"seed {seed}, {summary['bot_failures']} bot failures skipped; built by `seqrl data babyai "
                   f"{env_id} --episodes {episodes} --seed {seed}`")
    path = write_babyai(ds_id, demos, env_id, root=root, description=description, force=force)
    return path, {**summary, "path": str(path)}


PACKED = "seqrl_packed"
"""Folder beside a dataset's ``data/``: its episodes as flat .npy arrays, read instead of the HDF5 file
(Minari reads one HDF5 group per episode: ≈ 5–20 ms each, minutes for 20k episodes)."""
_PACKED_VERSION = 1


def _sha256(file: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _flat_arrays(demos: list[BabyAIEpisode]) -> tuple[list[str], dict[str, np.ndarray]]:
    """The sorted distinct missions and `demos` as flat arrays, episodes back to back."""
    missions = sorted({d.mission for d in demos})
    lookup = {m: i for i, m in enumerate(missions)}
    cat = lambda xs, dtype, shape=(): np.concatenate(xs).astype(dtype) if xs else np.zeros((0, *shape), dtype)  # noqa: E731
    return missions, {
        "images": cat([d.images for d in demos], np.uint8, IMAGE_SHAPE),  # (Σ T+1, 7, 7, 3)
        "directions": cat([d.directions for d in demos], np.int64),  # (Σ T+1,)
        "actions": cat([d.actions for d in demos], np.int64),  # (Σ T,)
        "rewards": cat([d.rewards for d in demos], np.float32),
        "terminations": cat([d.terminations for d in demos], bool),
        "truncations": cat([d.truncations for d in demos], bool),
        "lengths": np.array([len(d.actions) for d in demos], dtype=np.int64),  # (E,)
        "mission_index": np.array([lookup[d.mission] for d in demos], dtype=np.int64),  # (E,)
    }


def _split_arrays(a: dict[str, np.ndarray], missions: list[str]) -> list[BabyAIEpisode] | None:
    """`_flat_arrays`' inverse (with ``labels`` and ``reset_seeds`` when present); None when the array
    sizes do not match the episode lengths."""
    lengths = a["lengths"]
    if a["actions"].shape[0] != lengths.sum() or a["images"].shape[0] != lengths.sum() + len(lengths) or \
            ("labels" in a and a["labels"].shape[0] != lengths.sum()):
        return None
    act_end, obs_end = np.cumsum(lengths), np.cumsum(lengths + 1)
    out = []
    for k, T in enumerate(lengths):
        a0, o0 = act_end[k] - T, obs_end[k] - T - 1
        out.append(BabyAIEpisode(images=a["images"][o0:o0 + T + 1], directions=a["directions"][o0:o0 + T + 1],
                                 mission=missions[a["mission_index"][k]], actions=a["actions"][a0:a0 + T],
                                 rewards=a["rewards"][a0:a0 + T], terminations=a["terminations"][a0:a0 + T],
                                 truncations=a["truncations"][a0:a0 + T],
                                 reset_seed=int(a["reset_seeds"][k]) if "reset_seeds" in a else -1,
                                 labels=a["labels"][a0:a0 + T] if "labels" in a else None))
    return out


def write_packed(folder: str | os.PathLike, demos: list[BabyAIEpisode]) -> Path:
    """Write `demos` (the episodes of the Minari dataset at `folder`, in order) as `PACKED` .npy arrays,
    fingerprinted with the SHA-256 of ``data/main_data.hdf5`` so a changed dataset never reads stale
    arrays; atomic (temporary folder, then renamed in). Deterministic bytes for the same episodes."""
    import json
    import shutil
    import tempfile

    folder = Path(folder)
    dest = folder / PACKED
    missions, arrays = _flat_arrays(demos)
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix=f".{PACKED}-"))
    try:
        for name, a in arrays.items():
            np.save(tmp / f"{name}.npy", a, allow_pickle=False)
        (tmp / "index.json").write_text(json.dumps({"version": _PACKED_VERSION, "episodes": len(demos),
                                                    "missions": missions,
                                                    "hdf5_sha256": _sha256(folder / "data" / "main_data.hdf5")},
                                                   indent=1), encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except OSError:  # another process put it there first, or a read-only folder: the HDF5 file still serves
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


_EPISODE_ARRAYS = ("images", "directions", "actions", "labels", "rewards", "terminations", "truncations", "lengths",
                   "mission_index", "reset_seeds", "missions")


def save_episodes(path: str | os.PathLike, demos: list[BabyAIEpisode]) -> Path:
    """Write `demos` (labelled or not) to one ``.npz`` file, atomically (temporary file, fsync, rename)."""
    path = Path(path)
    missions, arrays = _flat_arrays(demos)
    arrays["labels"] = np.concatenate([arrays["actions"][:0]] + [d.actions if d.labels is None else d.labels
                                                                 for d in demos]).astype(np.int64)
    arrays["reset_seeds"] = np.array([d.reset_seed for d in demos], dtype=np.int64)
    arrays["missions"] = np.array(missions, dtype=str)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_episodes(path: str | os.PathLike) -> list[BabyAIEpisode]:
    """The episodes `save_episodes` wrote (each with `labels`); a missing, torn or inconsistent file raises
    `DatasetError` naming it."""
    import zipfile

    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            a = {name: z[name] for name in _EPISODE_ARRAYS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise DatasetError(f"{path}: not a readable episode file ({type(e).__name__}: {e})") from e
    out = _split_arrays(a, [str(m) for m in a["missions"]])
    if out is None:
        raise DatasetError(f"{path}: array sizes do not match the episode lengths")
    return out


def read_packed(folder: str | os.PathLike) -> list[BabyAIEpisode] | None:
    """The episodes `write_packed` stored for the dataset at `folder`, or None when there are none or they
    do not match its ``data/main_data.hdf5`` (version or fingerprint)."""
    import json

    folder = Path(folder)
    src = folder / PACKED
    try:
        index = json.loads((src / "index.json").read_text(encoding="utf-8"))
        if index.get("version") != _PACKED_VERSION or index.get("hdf5_sha256") != _sha256(folder / "data" / "main_data.hdf5"):
            return None
        a = {name: np.load(src / f"{name}.npy", allow_pickle=False)
             for name in ("images", "directions", "actions", "rewards", "terminations", "truncations", "lengths",
                          "mission_index")}
    except (OSError, ValueError, KeyError):
        return None
    if len(a["lengths"]) != index["episodes"]:
        return None
    return _split_arrays(a, index["missions"])


def load_babyai(spec: str | os.PathLike) -> OfflineDataset:
    """A BabyAI demonstration dataset (a local Minari id or folder, written by `build_babyai`) as an
    `OfflineDataset` of flat rows (see the module docstring); the network is never used."""
    spec = str(spec)
    dataset, data = open_minari(spec, lambda s, folder: (
        f"BabyAI dataset {s!r}: not found (no metadata.json under {s if folder else datasets_root() / s}); "
        f"build it with `seqrl data babyai LEVEL --episodes N --seed S`"), "BabyAI demonstrations")
    env_spec = dataset.spec.env_spec
    env_id = env_spec.id if env_spec is not None else ""
    demos = read_packed(data.parent)
    if demos is None:
        demos = _read_minari(dataset, spec)
        if demos:
            write_packed(data.parent, demos)  # the next load reads arrays (best effort)
    if not demos:
        raise DatasetError(f"{spec}: has no episodes")
    try:
        return _offline(demos, env_id, spec, {"level": env_id, "description": dataset.storage.metadata.get("description")})
    except DatasetError as e:
        raise DatasetError(f"{spec}: {e}") from e


def _read_minari(dataset, spec: str) -> list[BabyAIEpisode]:
    """Every episode of an open `MinariDataset`, checked; errors name `spec` and the episode."""
    demos = []
    for ep in dataset.iterate_episodes():
        where = f"{spec}: episode {ep.id}"
        obs = ep.observations
        if not isinstance(obs, dict) or not {"image", "direction", "mission"} <= set(obs):
            raise DatasetError(f"{where}: observations must be a dict with image, direction and mission")
        missions = {str(m) for m in obs["mission"]}
        if len(missions) != 1:
            raise DatasetError(f"{where}: the mission changes within the episode ({sorted(missions)[:3]})")
        images = np.asarray(obs["image"], dtype=np.uint8)
        if images.shape[1:] != IMAGE_SHAPE:
            raise DatasetError(f"{where}: images must be {IMAGE_SHAPE} per step (got {images.shape[1:]})")
        actions = np.asarray(ep.actions).reshape(-1).astype(np.int64)
        if len(actions) and (actions.min() < 0 or actions.max() >= N_ACTIONS):
            raise DatasetError(f"{where}: actions outside [0, {N_ACTIONS})")
        demos.append(BabyAIEpisode(images=images, directions=np.asarray(obs["direction"], dtype=np.int64),
                                   mission=missions.pop(), actions=actions,
                                   rewards=np.asarray(ep.rewards, dtype=np.float32),
                                   terminations=np.asarray(ep.terminations, dtype=bool),
                                   truncations=np.asarray(ep.truncations, dtype=bool), reset_seed=-1))
    return demos
