"""`make_env`: a gymnasium environment by id, with an error that says what to install when it is missing.

gymnasium raises several unrelated errors for "cannot build this id" (an unknown name, an unknown
version, a namespace whose package is not imported, an extra that is not installed). `make_env`
turns each into one `EnvError` whose message names the id and, where an extra or package provides
it, the ``pip install`` line:

>>> try:
...     make_env("NoSuchEnv-v0")
... except EnvError as e:
...     print(e)
environment 'NoSuchEnv-v0': gymnasium has no such id (Environment `NoSuchEnv` doesn't exist.)
"""

from __future__ import annotations

import gymnasium as gym

__all__ = ["EnvError", "env_extra", "make_env"]


class EnvError(ValueError):
    """An environment id that cannot be built here; the message names the id and what to install."""


# entry-point module prefix (or id namespace) -> (what provides it, pip install argument)
_EXTRAS = {
    "gymnasium.envs.mujoco": ("gymnasium[mujoco]", "'seqrl[control]'"),
    "gymnasium.envs.box2d": ("gymnasium[box2d]", "swig 'gymnasium[box2d]'"),
    "gymnasium.envs.toy_text": ("gymnasium[toy-text]", "'gymnasium[toy-text]'"),
    "ale_py": ("gymnasium[atari]", "'gymnasium[atari]'"),
    "minigrid": ("minigrid", "'seqrl[vla]'"),
}
_NAMESPACES = {"ALE": "ale_py", "MiniGrid": "minigrid", "BabyAI": "minigrid"}


def env_extra(env_id: str) -> tuple[str, str] | None:
    """``(extra, pip argument)`` that provides `env_id`, or None when nothing beyond gymnasium is known.

    >>> env_extra("Hopper-v5")
    ('gymnasium[mujoco]', "'seqrl[control]'")
    >>> env_extra("Pendulum-v1") is None
    True
    """
    prefix = env_id.split("-")[0]
    namespace = env_id.split("/")[0] if "/" in env_id else prefix
    if namespace in _NAMESPACES:
        return _EXTRAS[_NAMESPACES[namespace]]
    try:
        entry = gym.spec(env_id).entry_point
    except gym.error.Error:
        return None
    entry = entry if isinstance(entry, str) else f"{entry.__module__}"
    for module, extra in _EXTRAS.items():
        if entry.startswith(module):
            return extra
    return None


def _needs(env_id: str, cause: BaseException) -> EnvError:
    extra = env_extra(env_id)
    if extra is None:
        return EnvError(f"environment {env_id!r}: cannot be built: {cause}")
    name, pip = extra
    return EnvError(f"environment {env_id!r} needs {name}: pip install {pip} ({type(cause).__name__}: {cause})")


def make_env(env_id: str, seed: int | None = None, **kwargs) -> gym.Env:
    """``gymnasium.make(env_id, **kwargs)``, reset once with `seed` when one is given (seeds its RNG).

    Raises `EnvError` naming the id: unknown ids carry gymnasium's did-you-mean; ids whose extra or
    package is missing say which one to install (e.g. ``Hopper-v5 needs gymnasium[mujoco]``).
    """
    if not isinstance(env_id, str) or not env_id:
        raise EnvError(f"environment id must be a non-empty string (got {env_id!r})")
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.NamespaceNotFound as e:
        raise _needs(env_id, e) from e
    except gym.error.UnregisteredEnv as e:  # NameNotFound, VersionNotFound
        raise EnvError(f"environment {env_id!r}: gymnasium has no such id ({e})") from e
    except (gym.error.DependencyNotInstalled, ImportError) as e:
        raise _needs(env_id, e) from e
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env
