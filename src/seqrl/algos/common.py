"""Run plumbing every training loop shares (run folder, optimiser, schedule); the shared config pieces
(`RunConfig`, `TaskConfig`, `OptimConfig`) live torch-free in `seqrl.algos.config` and are re-exported here.

Only plumbing lives here; the loops themselves stay readable top to bottom in their own files.
"""

from __future__ import annotations

import math
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
import yaml

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.config import ConfigError, dump_yaml, to_dict
from seqrl.utils.checkpoint import CheckpointError, clean_stale_tmp, latest_checkpoint, list_checkpoints

RESUMABLE_CHANGES = ("steps", "eval.every", "run.log_every", "run.save_every", "run.keep_last", "run.progress",
                     "run.threads", "run.resume", "run.on_nonfinite", "online.iterations", "run.device")
"""Fields a resumed run may change from its saved config.yaml (length, intervals, display, the device
it continues on); any other change is refused, so the run folder's config always says what was trained."""


class NonFiniteError(ValueError):
    """A training loss or gradient norm became NaN or infinite (run.on_nonfinite: stop)."""


def make_optimizer(model: torch.nn.Module, cfg: OptimConfig, total_steps: int, fused: bool = False):
    """AdamW (no decay on biases, norms and embeddings) and its LambdaLR schedule.

    fused=True asks for PyTorch's fused AdamW kernel, used when every parameter is a floating tensor
    on one CPU or CUDA device: the same update up to float rounding, ≈ 10 % faster per Decision
    Transformer step on one CPU thread at the Pendulum preset size (benchmarks/RESULTS.md). Only the
    DT/BC trainer asks for it: the LM trainers keep the for-loop kernel, because their seed-0
    learning tests move with float rounding (the GRPO e2e gain read +0.005 instead of +0.049 with it).
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 and "embed" not in name else no_decay).append(p)
    params = decay + no_decay
    fused = fused and bool(params) and len({p.device for p in params}) == 1 and all(
        p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=cfg.betas,
        fused=fused or None,
    )

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def prepare_run_dir(run: RunConfig, cfg: Any) -> Path | None:
    """Create the run folder, write the resolved config; return the checkpoint to resume from.

    A fresh run refuses a folder that already holds checkpoints (pass run.resume=true or a new
    run.name) so earlier work is never overwritten.
    """
    run.dir.mkdir(parents=True, exist_ok=True)
    clean_stale_tmp(run.dir)
    last = latest_checkpoint(run.dir)
    if run.resume and last is None:
        raise ValueError(f"run.resume: no checkpoint in {run.dir} to resume from")
    if not run.resume and last is not None:
        raise ValueError(
            f"{run.dir} already holds {last.name}; resume with --resume (run.resume=true) "
            f"or choose another --run.name"
        )
    if run.resume:
        check_resume_changes(run.dir / "config.yaml", cfg)
    dump_yaml(cfg, run.dir / "config.yaml")
    return last if run.resume else None


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: data}


def check_resume_changes(saved_file: Path, cfg: Any) -> list[str]:
    """Compare a resumed run's config with the one it was trained with; return the applied changes.

    Changes to `RESUMABLE_CHANGES` are applied and printed; any other changed field raises a
    `ConfigError` naming it (start a new run for that). A run folder without config.yaml passes.
    """
    from seqrl.config import _Dumper, _yaml_load  # the same YAML schema config.yaml was written with

    if not saved_file.is_file():
        return []
    saved = _flatten(_yaml_load(saved_file.read_text(encoding="utf-8")) or {})
    now = _flatten(_yaml_load(yaml.dump(to_dict(cfg), Dumper=_Dumper, sort_keys=False)))
    changed = sorted(k for k in saved.keys() | now.keys() if saved.get(k, "<absent>") != now.get(k, "<absent>"))
    refused = [k for k in changed if k not in RESUMABLE_CHANGES]
    if refused:
        key = refused[0]
        raise ConfigError(f"{key}: cannot change on --resume ({saved.get(key, '<absent>')!r} in {saved_file}, "
                          f"now {now.get(key, '<absent>')!r}); a resumed run keeps its config except "
                          f"{', '.join(c for c in RESUMABLE_CHANGES if c != 'run.resume')}; start a new run "
                          f"(another --run.name) to change it")
    applied = [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in changed if k != "run.resume"]
    if applied:
        print(f"resume: applying changed {'; '.join(applied)}")
    return applied


def load_resume_checkpoint(run_dir: Path, load: Any) -> tuple[Path, Any]:
    """Call ``load(path)`` on the newest checkpoint of `run_dir` that loads; return (path, its result).

    A checkpoint that fails with `CheckpointError` (cut-short weights, garbage optimizer state) is
    skipped with a line saying which and why, and the next older one is tried; none → `CheckpointError`.
    """
    errors = []
    for _, path in reversed(list_checkpoints(run_dir)):
        try:
            result = load(path)
        except CheckpointError as e:
            print(f"resume: skipping {path.name}: {e}")
            errors.append(f"{path.name}: {e}")
            continue
        if errors:
            print(f"resume: fell back to {path.name}")
        return path, result
    raise CheckpointError(f"{run_dir}: no checkpoint could be loaded ({'; '.join(errors) or 'none found'})")


def check_finite(step: int, on_nonfinite: str, **values: float) -> bool:
    """True when every value is finite; else raise `NonFiniteError` naming the step (or warn)."""
    bad = {k: v for k, v in values.items() if not math.isfinite(float(v))}
    if not bad:
        return True
    what = ", ".join(f"{k} = {v}" for k, v in bad.items())
    message = (f"step {step}: non-finite {what} (diverged; lower optim.lr, or run.on_nonfinite=warn to continue)")
    if on_nonfinite == "stop":
        raise NonFiniteError(message)
    print(f"WARNING: {message}", file=sys.stderr)
    return False


def set_threads(n: int) -> None:
    torch.set_num_threads(n)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def stream_indices(start: int, count: int, n: int, seed: int) -> list[int]:
    """Positions start … start+count−1 of an endless stream of per-epoch permutations of range(n).

    The data order of every loop is a pure function of (seed, position), so a resumed run sees
    the same data as an uninterrupted one.
    """
    return [int(_perm(n, seed, i // n)[i % n]) for i in range(start, start + count)]


def batch_indices(step: int, batch_size: int, n: int, seed: int) -> list[int]:
    """Indices of batch `step`: consecutive slots of per-epoch permutations of range(n).

    >>> batch_indices(0, 3, 4, 0) + batch_indices(1, 3, 4, 0)[:1] == _perm(4, 0, 0).tolist()
    True
    """
    return stream_indices(step * batch_size, batch_size, n, seed)


@lru_cache(maxsize=4)
def _perm(n: int, seed: int, epoch: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
