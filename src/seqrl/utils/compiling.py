"""`run.compile`: the trained model's forward under `torch.compile`, and the seconds spent compiling.

`compile_model` calls `nn.Module.compile` (the module itself is compiled in place: its parameters and
state-dict names stay as they were, so checkpoints load with or without it) with PyTorch's automatic
dynamic shapes (``dynamic=None``, as HF Trainer's ``torch_compile``): the first shapes compile static, a
dimension that changes (the trainers' batch lengths) is made symbolic on the recompile. ``dynamic=True``
made every dimension symbolic from the start, which inductor 2.13 could not lower for the VLA ("cannot
determine truth value of Relational"). A model that fails to compile all the same (a backend's error at
its first call or at a recompile, its backward's included: the backward is lowered with the forward,
not lazily at the first ``backward()``) runs eager from then on, with one warning naming the error: a
compiler's bug costs the run its speed-up, not the run. The failed call is run again eager, whole: where
dynamo split the forward at a graph break and a part before the failing one had already run, that part's
side effects (a buffer updated in place, random numbers drawn) happen a second time in that one call.
The rollout engine's lean decoder reads the weights directly and is not compiled; a model the lean path
does not support decodes through its (compiled) HF forward.

`compile_seconds()` is the wall time dynamo has spent compiling in this process (its start/end
callbacks), which the run loop logs as ``time/compile_s`` beside the step times it inflates.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings

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


def _compile_failures() -> tuple[type[BaseException], ...]:
    """The exceptions a backend's compile failure surfaces as (dynamo wraps it, inductor may raise its own)."""
    kinds: list[type[BaseException]] = []
    for module, name in (("torch._dynamo.exc", "BackendCompilerFailed"), ("torch._inductor.exc", "InductorError")):
        try:
            kinds.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(kinds)


def _backward_lowered_with_forward():
    """A context in which AOT autograd lowers a graph's backward when it compiles the forward (so that a
    backend's failure on the backward surfaces in the forward call); a no-op where torch has no such option."""
    config = getattr(getattr(torch, "_functorch", None), "config", None)
    try:
        return config.patch(force_non_lazy_backward_lowering=True)
    except (AttributeError, KeyError, TypeError):
        return contextlib.nullcontext()


def _compile_in_place(module: torch.nn.Module, backend, mode: str | None) -> None:
    """`module.compile(...)`, its compiled call falling back to eager for good when compiling fails."""
    module.compile(backend=backend, mode=mode, dynamic=None)
    compiled, failures = module._compiled_call_impl, _compile_failures()

    def call(*args, **kwargs):
        try:
            with _backward_lowered_with_forward():
                return compiled(*args, **kwargs)
        except failures as e:
            inner = getattr(e, "inner_exception", None) or e  # the backend's own error inside dynamo's wrapper
            lines = [ln for ln in str(inner).splitlines() if ln.strip()]
            reason = f"{type(inner).__name__}: {lines[0].strip()[:300] if lines else ''}"
            warnings.warn(f"run.compile: {type(module).__name__} did not compile ({reason}); it runs eager from here",
                          RuntimeWarning, stacklevel=3)  # at the model's caller
            module._compiled_call_impl = None
            module._compile_failed = reason
            return module._call_impl(*args, **kwargs)

    module._compiled_call_impl = call


def compile_model(model: torch.nn.Module, backend="inductor", mode: str | None = None) -> torch.nn.Module:
    """Compile `model`'s forward in place (automatic dynamic shapes; eager again if compiling fails), and its
    HF ``base_model`` where that is another module: a scalar model (RM, PRM, PPO's critic) is run as
    ``base_model`` then its head (`seqrl.models.heads.token_scores`). `backend`: a name or a callable, as
    `torch.compile` takes. Returns `model`. Starts the compile-time clock."""
    _install()
    _compile_in_place(model, backend, mode)
    base = getattr(model, "base_model", None)
    if isinstance(base, torch.nn.Module) and base is not model:
        _compile_in_place(base, backend, mode)
    return model


def is_compiled(model: torch.nn.Module) -> bool:
    """`model`'s forward runs compiled (False after `compile_model` fell back to eager)."""
    return getattr(model, "_compiled_call_impl", None) is not None


def compile_failure(model: torch.nn.Module) -> str | None:
    """Why `compile_model` fell back to eager for `model` (or its ``base_model``); None while it has not."""
    for m in (model, getattr(model, "base_model", None)):
        reason = getattr(m, "_compile_failed", None)
        if reason:
            return reason
    return None
