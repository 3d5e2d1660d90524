"""Shared fixtures: one torch thread, a tiny policy, a temporary run folder."""

from __future__ import annotations

import os

# Tests never reach a model hub: a hub id fails at once instead of retrying for 30 s.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import types  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from seqrl.utils.dist import bf16_fast as _REAL_BF16_FAST  # noqa: E402  (before the suite's pin replaces it)


def pytest_collection_modifyitems(items):
    """The end-to-end tests (the longest, 10–120 s each) first, in their order: under pytest-xdist
    (``make test``, ``--dist worksteal``) they start at once on one worker, one after the other (the shared
    SFT run trained once, no worker waiting on it), and the short tests fill both workers to the end."""
    items.sort(key=lambda item: "e2e" not in item.path.parts)


@pytest.fixture(autouse=True, scope="session")
def _fp32_pin():
    """``run.bf16: auto`` (the default) resolves to fp32 in tests, as on an AVX2-only CPU: a seeded test then
    runs the same arithmetic on every CI machine (AVX-512 BF16, AMX or neither). Session-wide, so that the
    session fixtures (the e2e tests' shared SFT model) train under it too, and on its own patch, so that a
    test's ``monkeypatch.undo()`` keeps it. Tests that set ``bf16=True`` run bf16 regardless."""
    from seqrl.utils import dist

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dist, "bf16_fast", lambda device: False)
        yield


@pytest.fixture(autouse=True)
def _real_bf16_probe_when_marked(request, _fp32_pin):
    """Tests marked ``real_bf16_probe`` see the real capability probe instead of the fp32 pin."""
    if request.node.get_closest_marker("real_bf16_probe") is None:
        yield
        return
    from seqrl.utils import dist

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dist, "bf16_fast", _REAL_BF16_FAST)
        yield


@pytest.fixture
def on_nth_call(monkeypatch):
    """``on_nth_call(owner, name, n, action, patch=None)``: ``owner.name`` replaced so that its `n`-th call
    (1-based) runs ``action()`` first (send a signal, raise), then the real function; undone with `patch`
    (a ``monkeypatch.context()``) or at the end of the test."""

    def install(owner, name: str, n: int, action, patch=None) -> None:
        real, calls = getattr(owner, name), [0]

        def hooked(*args, **kwargs):
            calls[0] += 1
            if calls[0] == n:
                action()
            return real(*args, **kwargs)

        (patch or monkeypatch).setattr(owner, name, hooked)

    install.monkeypatch = monkeypatch
    return install


@pytest.fixture
def tiny_policy():
    from seqrl.models import ModelConfig, load_policy

    torch.manual_seed(0)
    return load_policy(ModelConfig(preset="tiny", max_seq_len=96))


# --------------------------------------------------------------------------------------------------
# A continuous-control toy for the sequence-policy trainers (Online DT tests): fast, exact returns.

DRIFT_H = 8  # horizon
DRIFT_ENV_ID = "SeqrlTestDrift-v0"


class DriftEnv(gym.Env):
    """obs = [t / H, x]; action a ∈ [−1, 1] moves x by a; reward = a; H steps. Return = Σ a_t ∈ [−H, H]."""

    observation_space = gym.spaces.Box(-20.0, 20.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, float(self.np_random.uniform(-0.1, 0.1))
        return self._obs(), {}

    def _obs(self):
        return np.array([self.t / DRIFT_H, self.x], dtype=np.float32)

    def step(self, action):
        a = float(np.clip(np.asarray(action, dtype=np.float64).reshape(-1)[0], -1, 1))
        self.t += 1
        self.x += a
        return self._obs(), a, False, self.t >= DRIFT_H, {}


def drift_dataset(n_episodes: int = 48, seed: int = 0, low: float = -1.0, high: float = 0.5):
    """Episodes of the drift env at a constant level c_i ~ U[low, high] plus N(0, 0.1) noise, clipped to
    [−1, 1]: returns in about [H·low, H·high]."""
    from seqrl.data.offline import Episode, OfflineDataset

    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(n_episodes):
        c = rng.uniform(low, high)
        acts = np.clip(c + 0.1 * rng.standard_normal((DRIFT_H, 1)), -1, 1).astype(np.float32)
        x = np.concatenate([[0.0], np.cumsum(acts[:, 0])])
        obs = np.stack([np.array([t / DRIFT_H, x[t]]) for t in range(DRIFT_H + 1)]).astype(np.float32)
        episodes.append(Episode(observations=obs, actions=acts, rewards=acts[:, 0].copy(),
                                terminations=np.zeros(DRIFT_H, bool), truncations=np.arange(DRIFT_H) == DRIFT_H - 1,
                                id=i))
    return OfflineDataset(episodes, env_id=DRIFT_ENV_ID, action_dim=1, action_low=np.array([-1.0], np.float32),
                          action_high=np.array([1.0], np.float32), ref_min_score=-float(DRIFT_H),
                          ref_max_score=float(DRIFT_H), name="drift")


@pytest.fixture
def drift():
    """The drift toy registered with gymnasium: ``drift.env_id``, ``drift.H``, ``drift.dataset(...)``."""
    if DRIFT_ENV_ID not in gym.registry:
        # a string entry point so that Minari can store the env spec as JSON
        gym.register(DRIFT_ENV_ID, entry_point=f"{__name__}:DriftEnv", max_episode_steps=DRIFT_H)
    return types.SimpleNamespace(env_id=DRIFT_ENV_ID, H=DRIFT_H, dataset=drift_dataset)


@pytest.fixture
def bf16_autocast_spy(monkeypatch):
    """``spy(module, name="generate")`` wraps ``module.name`` and returns a list that gets, per call, whether
    it ran under bf16 autocast on the CPU."""

    def spy(module, name: str = "generate") -> list[bool]:
        seen: list[bool] = []
        real = getattr(module, name)

        def wrapped(*args, **kwargs):
            seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapped)
        return seen

    return spy
