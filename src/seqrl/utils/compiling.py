"""`run.compile`: the trained model's forward under `torch.compile`, and the seconds spent compiling.

`compile_model` calls `nn.Module.compile` (the module itself is compiled in place: its parameters and
state-dict names stay as they were, so checkpoints load with or without it) with dynamic shapes, since
the trainers' batches change length from step to step. The rollout engine's lean decoder reads the
weights directly and is not compiled; a model the lean path does not support decodes through its
(compiled) HF forward.

`compile_seconds()` is the wall time dynamo has spent compiling in this process (its start/end
callbacks), which the run loop logs as ``time/compile_s`` beside the step times it inflates.
"""

from __future__ import annotations

import threading
import time

import torch

BACKENDS_CHECKED = ("inductor", "aot_eager", "eager", "cudagraphs")
"""The backends validated by name; `torch._dynamo.list_backends` has the rest (third-party ones included)."""

_lock = threading.Lock()
_spent = 0.0
_started: float | None = None
_installed = False


def _on_start(*_args, **_kwargs) -> None:
    global _started
    with _lock:
        _started = time.perf_counter()


def _on_end(*_args, **_kwargs) -> None:
    global _spent, _started
    with _lock:
        if _started is not None:
            _spent += time.perf_counter() - _started
            _started = None


def _install() -> bool:
    global _installed
    if not _installed:
        try:
            from torch._dynamo import callback

            callback.on_compile_start(_on_start)
            callback.on_compile_end(_on_end)
            _installed = True
        except (ImportError, AttributeError):  # an older torch without the callbacks: no compile time logged
            return False
    return True


def compile_seconds() -> float | None:
    """Seconds dynamo has spent compiling in this process (None: this torch cannot tell)."""
    return _spent if _install() else None


def check_backend(backend: str) -> None:
    """A ValueError naming `run.compile_backend` when torch does not know the backend."""
    if backend in BACKENDS_CHECKED:
        return
    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise ValueError(f"run.compile_backend {backend!r} is not a torch.compile backend here "
                         f"(known: {', '.join(sorted(set(known) | set(BACKENDS_CHECKED)))})")


def compile_model(model: torch.nn.Module, backend: str = "inductor", mode: str | None = None) -> torch.nn.Module:
    """Compile `model`'s forward in place (dynamic shapes), and its HF ``base_model`` where that is another
    module: a scalar model (RM, PRM, PPO's critic) is run as ``base_model`` then its head
    (`seqrl.models.heads.token_scores`). Returns `model`. Starts the compile-time clock."""
    _install()
    model.compile(backend=backend, mode=mode, dynamic=True)
    base = getattr(model, "base_model", None)
    if isinstance(base, torch.nn.Module) and base is not model:
        base.compile(backend=backend, mode=mode, dynamic=True)
    return model


def is_compiled(model: torch.nn.Module) -> bool:
    return getattr(model, "_compiled_call_impl", None) is not None
