"""The only place that knows about processes: rank, world size and collective helpers (torchrun).

One code path serves 1..N processes: with ``WORLD_SIZE`` unset (or 1) every helper is a cheap no-op.
Ranks come from the environment variables torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as torch_dist

__all__ = [
    "bf16_fast",
    "resolve_bf16",
    "resolve_device",
    "all_gather_objects",
    "all_reduce_mean",
    "all_reduce_sum",
    "all_reduce_grads",
    "barrier",
    "init_distributed",
    "is_main",
    "local_rank",
    "rank",
    "shard",
    "seed_for_rank",
    "world_size",
]


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer (got {text!r})") from None


def rank() -> int:
    """Global rank of this process (``RANK``, default 0)."""
    return _env_int("RANK", 0)


def world_size() -> int:
    """Number of processes (``WORLD_SIZE``, default 1)."""
    return _env_int("WORLD_SIZE", 1)


def local_rank() -> int:
    """Rank of this process on its machine (``LOCAL_RANK``, default 0); picks the GPU."""
    return _env_int("LOCAL_RANK", 0)


def is_main() -> bool:
    """True on the process that logs, plots and writes checkpoints (rank 0)."""
    return rank() == 0


def seed_for_rank(seed: int) -> int:
    """A distinct seed per process: ``seed + rank()``."""
    return seed + rank()


def resolve_device(spec: str = "auto") -> torch.device:
    """The device a run's spec names: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:N``.

    Under torchrun (``WORLD_SIZE > 1``) ``auto`` and ``cuda`` give each process GPU ``local_rank()``.
    A malformed spec, or CUDA on a machine without it, is a ValueError naming ``run.device``.
    """
    text = str(spec).strip().lower()
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return torch.device("cpu")
    kind, _, index = text.partition(":")
    if kind != "cuda" or (index and not index.isdigit()) or (_ and not index):
        raise ValueError(f"run.device must be auto, cpu, cuda or cuda:N (got {spec!r})")
    if not torch.cuda.is_available():
        raise ValueError(f"run.device is {spec!r} but CUDA is not available on this machine (use cpu or auto)")
    n = int(index) if index else (local_rank() if world_size() > 1 else torch.cuda.current_device())
    if n >= torch.cuda.device_count():
        raise ValueError(f"run.device {spec!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", n)


def bf16_fast(device: torch.device) -> bool:
    """Whether `device` runs bf16 matmuls fast: a CUDA GPU with bf16 support, or a CPU with
    AVX-512 BF16 or AMX-BF16 (``torch.cpu.get_capabilities()``; AVX2-only CPUs emulate bf16, many times slower)."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        caps = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
        return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))
    return False


def resolve_bf16(value: bool | str, device: torch.device) -> bool:
    """``run.bf16``: true/false as given, ``auto`` → `bf16_fast(device)`; anything else is a ValueError."""
    if isinstance(value, bool):
        return value
    if str(value).lower() == "auto":
        return bf16_fast(device)
    raise ValueError(f"run.bf16 must be true, false or auto (got {value!r})")


def bf16_autocast(device: torch.device | str, enabled: bool) -> torch.autocast:
    """The one precision context of every forward pass: bf16 autocast on `device` (a device or its type)
    when `enabled` (`RunConfig.use_bf16`), weights and optimizer state staying fp32; a no-op otherwise."""
    return torch.autocast(device if isinstance(device, str) else device.type, dtype=torch.bfloat16, enabled=enabled)


def shard(n: int, name: str = "batch_size") -> slice:
    """This process's rows of a global batch of `n` rows (all of them for one process).

    Every process builds the same global batch and keeps its equal share, so 1 and N processes see the
    same data; `n` must split evenly (a ValueError naming `name` otherwise).
    """
    world, r = world_size(), rank()
    if n % world:
        raise ValueError(f"{name} ({n}) must be divisible by the number of processes ({world})")
    share = n // world
    return slice(r * share, (r + 1) * share)


def init_distributed(device: str | torch.device | None = None) -> None:
    """Join the process group when ``WORLD_SIZE > 1`` (nccl for a CUDA device, gloo for the CPU); no-op otherwise.

    device: the run's device (`resolve_device`); None means ``auto``. With CUDA, each process also
    selects its GPU (``local_rank()`` unless the device names one).
    """
    if world_size() <= 1 or torch_dist.is_initialized():
        return
    device = resolve_device("auto") if device is None else torch.device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device if device.index is not None else local_rank())
        torch_dist.init_process_group("nccl")
    else:
        torch_dist.init_process_group("gloo")


def _check_initialized(name: str) -> bool:
    """False for a single process; raises when several processes never called `init_distributed`."""
    if world_size() <= 1:
        return False
    if not torch_dist.is_initialized():
        raise RuntimeError(f"{name}: WORLD_SIZE={world_size()} but init_distributed() was not called")
    return True


def barrier() -> None:
    """Wait for every process (no-op for a single process)."""
    if _check_initialized("barrier"):
        torch_dist.barrier()


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """Average `tensor` over processes, in place, and return it (unchanged for a single process)."""
    if _check_initialized("all_reduce_mean"):
        torch_dist.all_reduce(tensor, op=torch_dist.ReduceOp.SUM)
        tensor.div_(world_size())
    return tensor


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over processes, in place, and return it (unchanged for a single process)."""
    if _check_initialized("all_reduce_sum"):
        torch_dist.all_reduce(tensor, op=torch_dist.ReduceOp.SUM)
    return tensor


def all_gather_objects(obj) -> list:
    """``[obj of rank 0, obj of rank 1, …]`` (picklable objects of any size); ``[obj]`` for one process."""
    if not _check_initialized("all_gather_objects"):
        return [obj]
    out = [None] * world_size()
    torch_dist.all_gather_object(out, obj)
    return out


def all_reduce_grads(model: torch.nn.Module) -> None:
    """Sum the gradients of `model` over processes, in one flat buffer (a no-op for one process).

    A parameter that requires grad but got none on this process gets a zero ``.grad`` first, so every
    process reduces the same tensors in the same order.
    """
    if not _check_initialized("all_reduce_grads"):
        return
    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch_dist.all_reduce(flat, op=torch_dist.ReduceOp.SUM)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
