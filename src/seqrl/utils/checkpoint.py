"""Atomic training checkpoints: ``run_dir/checkpoint-<step>/`` with safetensors weights.

A checkpoint directory holds:

* ``model.safetensors`` (+ ``config.json`` …) — ``model.save_pretrained`` for a Hugging Face
  ``PreTrainedModel`` (possibly sharded, with ``model.safetensors.index.json``; loadable with
  ``from_pretrained`` too), or
  ``adapter_model.safetensors`` + ``adapter_config.json`` for a `peft` model (LoRA: only the
  adapter; the config names the frozen base model's path), or
  the state dict of any other ``nn.Module`` in ``model.safetensors`` (`module_weights`: tied
  weights once, every tensor copied out of shared storage);
* the tokenizer files when a tokenizer is given;
* ``optimizer.pt`` — ``{"optimizer": state_dict | None, "scheduler": state_dict | None}``;
* ``rng.pt`` — `seqrl.utils.seeding.get_rng_state` of the saving process;
* ``trainer_state.json`` — ``{"step": step, **state, "sha256": {file: digest}, "checkpoint_format": 2,
  "state_sha256": …}``, written last: a directory without it is not a checkpoint. The digests cover every
  other file, and ``state_sha256`` the state itself (its canonical JSON without that key); `load_checkpoint`
  and `verify_checkpoint` recompute them all and check ``step`` against the folder's number, so bytes
  changed after the save (a flipped bit, a file overwritten in part, an edited step or digest key) are
  a `CheckpointError` naming the file, not a model that loads silently or a resume at the wrong step.
  A file in the folder that the digests do not list (an added ``model.safetensors.index.json`` would
  change which weights load) is a `CheckpointError` naming it too.
  A state with an integer ``step`` but no file digests is seqrl's and corrupt (every seqrl checkpoint
  records them; one written before ``state_sha256`` existed, without ``checkpoint_format``, has its files
  and step checked); a folder whose state has no ``step`` (a transformers Trainer's) is not checked.

A checkpoint is written only when every floating tensor of the model and optimizer state is finite
(`NonFiniteWeightsError` otherwise), so pruning, which runs only after a successful save, never
removes the last finite checkpoint in favour of a diverged one.

Everything is written into a sibling ``checkpoint-<step>.tmp-<pid>-<random>`` directory, fsynced and
then renamed into place, so a crash never leaves a half-written ``checkpoint-<step>``. Call these on
the main process only (``seqrl.utils.dist.is_main``) and pass the unwrapped model (not a DDP wrapper).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import nn
from transformers import PreTrainedModel

from seqrl.models.lora import is_lora
from seqrl.utils import hf
from seqrl.utils.seeding import get_rng_state, set_rng_state

__all__ = [
    "CheckpointError",
    "NonFiniteWeightsError",
    "clean_stale_tmp",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "save_checkpoint",
    "verify_checkpoint",
]

_FINAL_RE = re.compile(r"^checkpoint-(\d+)$")
_TMP_RE = re.compile(r"^checkpoint-(\d+)\.tmp-")
_ASIDE_RE = re.compile(r"^checkpoint-(\d+)\.old-")
STATE_FILE = "trainer_state.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
ADAPTER_FILE = "adapter_model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.pt"
CHECKSUM_KEY = "sha256"
STATE_DIGEST_KEY = "state_sha256"
FORMAT_KEY = "checkpoint_format"
"""Present in every state that records `STATE_DIGEST_KEY`: without it, a renamed digest key would read as a
checkpoint from before the state digest, and the state would go unchecked."""
FORMAT = 2
_FULL_DISK_BYTES = 1 << 20  # a write failed and less than this is free: the disk is full


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, corrupt or does not fit the model; names the path."""


class NonFiniteWeightsError(CheckpointError):
    """A checkpoint was not written because weights or optimizer state hold NaN or infinity."""


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    model: nn.Module,
    tokenizer: Any = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    state: dict[str, Any] | None = None,
    keep_last: int | None = None,
) -> Path:
    """Write ``run_dir/checkpoint-<step>`` atomically and return its path.

    `tokenizer` is anything with ``save_pretrained(dir)``. `state` holds JSON-serialisable trainer
    state (it must not contain ``"step"``). An existing ``checkpoint-<step>`` is replaced safely (moved
    aside, new one renamed in, old one deleted). With `keep_last`, only the newest `keep_last`
    checkpoints by step are kept — the one just written always among them.
    """
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"save_checkpoint: step must be an int >= 0 (got {step!r})")
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"save_checkpoint: keep_last must be >= 1 or None (got {keep_last})")
    state = dict(state or {})
    for key in ("step", CHECKSUM_KEY, FORMAT_KEY, STATE_DIGEST_KEY):
        if key in state:
            raise ValueError(f"save_checkpoint: state must not contain {key!r} (the checkpoint writes it)")
    json.dumps(state)  # not serialisable: fail before writing anything

    run_dir = Path(run_dir)
    final = run_dir / f"checkpoint-{step}"
    optim_state = None
    if optimizer is not None or scheduler is not None:
        optim_state = {"optimizer": None if optimizer is None else optimizer.state_dict(),
                       "scheduler": None if scheduler is None else scheduler.state_dict()}
    _check_finite_state(final, model.state_dict(), optim_state)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f"checkpoint-{step}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        if is_lora(model):
            with hf.quiet():
                model.save_pretrained(tmp)  # the adapter only: the base stays where adapter_config.json says
        elif isinstance(model, PreTrainedModel):
            # safetensors is the default format; keep the file's keys == model.state_dict() keys
            # (transformers 5 would otherwise revert e.g. fused MoE experts to the legacy layout)
            with hf.quiet():
                model.save_pretrained(tmp, save_original_format=False)
        else:
            safetensors.torch.save_file(module_weights(model), str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if optim_state is not None:
            _torch_save(optim_state, tmp / OPTIMIZER_FILE)
        _torch_save(get_rng_state(), tmp / RNG_FILE)
        apply_user_mode(tmp)
        digests = {str(f.relative_to(tmp)): _sha256(f) for f in sorted(tmp.rglob("*")) if f.is_file()}
        record = {"step": step, **state, CHECKSUM_KEY: digests, FORMAT_KEY: FORMAT}
        trainer_state = json.dumps({**record, STATE_DIGEST_KEY: _state_digest(record)}, indent=2)
        (tmp / STATE_FILE).write_text(trainer_state, encoding="utf-8")
        _fsync_tree(tmp)
        _move_into_place(tmp, final)
    except Exception as e:
        disk = None if isinstance(e, OSError) else (_os_error_in(e, final) or _disk_failure(run_dir, final))
        shutil.rmtree(tmp, ignore_errors=True)
        if disk is not None:  # safetensors and torch report a full disk as their own error types
            raise disk from e
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(run_dir)
    if keep_last is not None:
        others = [path for s, path in list_checkpoints(run_dir) if s != step]
        for path in others[: max(0, len(others) - (keep_last - 1))]:
            shutil.rmtree(path)
    return final


def _check_finite_state(final: Path, weights: dict[str, torch.Tensor], optim_state: Any) -> None:
    """`NonFiniteWeightsError` naming `final` when a floating tensor of the weights or optimizer state
    holds NaN or infinity: a diverged run must not replace its finite checkpoints."""
    bad = total = 0
    seen = set()
    for tensor in weights.values():
        if tensor.is_floating_point() and (tensor.data_ptr(), tensor.shape) not in seen:  # tied weights once
            seen.add((tensor.data_ptr(), tensor.shape))
            total += tensor.numel()
            bad += tensor.numel() - int(torch.isfinite(tensor).sum())
    if bad:
        raise NonFiniteWeightsError(f"{final} not written: {bad:,} of {total:,} weights are NaN or infinite "
                                    "(the run diverged)")
    stack = [optim_state]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.is_floating_point() and not bool(torch.isfinite(item).all()):
                raise NonFiniteWeightsError(f"{final} not written: the optimizer state holds NaN or infinity "
                                            "(the run diverged)")
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _state_digest(record: dict) -> str:
    """sha256 of a trainer state's canonical JSON (sorted keys, no spaces), taken of the state as it reads
    back from JSON (a non-string key such as ``10`` becomes ``"10"`` and sorts as text)."""
    record = json.loads(json.dumps(record))
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def apply_user_mode(folder: str | os.PathLike) -> None:
    """Give every file below `folder` the mode the user's umask gives a new file: safetensors writes
    weights 0600, unlike every other file of a run."""
    from seqrl.config import user_file_mode

    mode = user_file_mode()
    for f in Path(folder).rglob("*"):
        if f.is_file() and not f.is_symlink():
            os.chmod(f, mode)


def _torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` through a Python file, so a failed write keeps its OSError (errno) in the chain."""
    with open(path, "wb") as f:
        torch.save(obj, f)


def _os_error_in(exc: BaseException, final: Path) -> OSError | None:
    """The OS error behind a library's own exception type, naming `final`: an OSError in the cause /
    context chain (torch writing to a Python file), or ``os error N`` in the message (safetensors)."""
    stack, seen = [exc], set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno:
            return OSError(e.errno, e.strerror or os.strerror(e.errno), str(final))
        m = re.search(r"\(os error (\d+)\)|\[Errno (\d+)\]", str(e))
        if m:
            n = int(m.group(1) or m.group(2))
            return OSError(n, os.strerror(n), str(final))
        stack += [e.__cause__, e.__context__]
    return None


def _disk_failure(run_dir: Path, final: Path) -> OSError | None:
    """The OSError a failed write means when `run_dir` is read-only or (nearly) full, else None."""
    try:
        stats = os.statvfs(run_dir)
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), str(final))
    if stats.f_bavail * stats.f_frsize < _FULL_DISK_BYTES:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(final))
    return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """fsync every file below `root`, then the directories, so the rename publishes durable data."""
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    for path in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        _fsync_dir(path)
    _fsync_dir(root)


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename `tmp` to `final`; an existing `final` is moved aside first and restored on failure."""
    if not final.exists():
        os.replace(tmp, final)
        return
    aside = final.with_name(f"{final.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
    os.replace(final, aside)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.replace(aside, final)
        raise
    shutil.rmtree(aside)


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints in `run_dir` as ``(step, path)``, by increasing step.

    Complete = named ``checkpoint-<int>`` and holding ``trainer_state.json``; temporary
    (``.tmp-``) and set-aside (``.old-``) directories are never listed.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    for path in run_dir.iterdir():
        match = _FINAL_RE.match(path.name)
        if match and path.is_dir() and (path / STATE_FILE).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step in `run_dir`, or None."""
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def clean_stale_tmp(run_dir: str | os.PathLike) -> list[Path]:
    """Remove what an interrupted `save_checkpoint` left in `run_dir`; return the removed paths.

    Temporary ``.tmp-`` directories are deleted. A set-aside ``.old-`` directory is renamed back to
    ``checkpoint-<step>`` when the crash hit between moving it aside and renaming the new one in
    (so no complete ``checkpoint-<step>`` exists); otherwise it is deleted. Call at the start of
    training, on the main process, before any save.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    removed = []
    for path in sorted(run_dir.iterdir()):
        if not path.is_dir():
            continue
        aside = _ASIDE_RE.match(path.name)
        if aside:
            final = run_dir / f"checkpoint-{aside.group(1)}"
            if not final.exists() and (path / STATE_FILE).is_file():
                os.replace(path, final)
                continue
        elif not _TMP_RE.match(path.name):
            continue
        shutil.rmtree(path)
        removed.append(path)
    return removed


def verify_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Check checkpoint `path` against the sha256 digests its ``trainer_state.json`` recorded; return
    the trainer state (without the digests).

    A missing, changed or unrecorded file, a state whose own digest or step does not match (the step must
    be the folder's ``checkpoint-<step>`` number), or a state without digests raises `CheckpointError`
    naming it.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory not found")
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(f"{path}: no {STATE_FILE} (incomplete checkpoint or not a checkpoint)")
    try:
        trainer_state = json.loads(state_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{state_file}: corrupt trainer state: {e}") from e
    if not isinstance(trainer_state, dict) or not isinstance(trainer_state.get("step"), int):
        raise CheckpointError(f"{state_file}: expected an object with an integer 'step'")
    recorded = trainer_state.pop(STATE_DIGEST_KEY, None)
    if recorded is None and FORMAT_KEY in trainer_state:
        raise CheckpointError(f"{state_file}: no {STATE_DIGEST_KEY!r} digest, though its {FORMAT_KEY!r} says it "
                              "has one (the trainer state changed after it was written)")
    if recorded is not None and recorded != _state_digest(trainer_state):
        raise CheckpointError(f"{state_file}: checksum mismatch (the trainer state changed after it was written)")
    trainer_state.pop(FORMAT_KEY, None)
    if CHECKSUM_KEY not in trainer_state:  # (a state from before `state_sha256` still has the file digests)
        raise CheckpointError(f"{state_file}: no {CHECKSUM_KEY!r} digests: corrupt, or not written by seqrl")
    folder = _FINAL_RE.match(path.name)
    if folder and int(folder.group(1)) != trainer_state["step"]:
        raise CheckpointError(f"{state_file}: step {trainer_state['step']} does not match the folder's "
                              f"{folder.group(1)}")
    digests = trainer_state.pop(CHECKSUM_KEY)
    if not isinstance(digests, dict):
        raise CheckpointError(f"{state_file}: corrupt {CHECKSUM_KEY!r} record")
    for name, expected in sorted(digests.items()):
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{file}: missing (the checkpoint recorded it)")
        if _sha256(file) != expected:
            raise CheckpointError(f"{file}: checksum mismatch (sha256 differs from the one recorded at save): "
                                  "the file changed after it was written")
    for file in sorted(path.rglob("*")):
        if not file.is_dir() and file != state_file and str(file.relative_to(path)) not in digests:
            raise CheckpointError(f"{file}: not recorded in {STATE_FILE} (added after the save; a loader could "
                                  "read it in place of the saved files): remove it")
    return trainer_state


def verify_if_recorded(path: str | os.PathLike) -> None:
    """`verify_checkpoint` for a model folder whose ``trainer_state.json`` is seqrl's (an integer ``step``,
    either digest key or the format key); any other folder passes unchecked (a Hugging Face model; a transformers
    Trainer checkpoint, whose ``trainer_state.json`` is its own, with ``global_step``)."""
    state_file = Path(path) / STATE_FILE
    if not state_file.is_file():
        return
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{state_file}: corrupt trainer state: {e}") from e
    if isinstance(state, dict) and (isinstance(state.get("step"), int) or CHECKSUM_KEY in state
                                    or STATE_DIGEST_KEY in state or FORMAT_KEY in state):
        verify_checkpoint(path)


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Load checkpoint `path` into `model` (exactly, every key) and optionally the optimizer,
    scheduler and global RNGs; return the trainer state (``{"step": ..., **state}``).

    Weights tied to another parameter (``lm_head.weight`` ↔ ``embed_tokens.weight``) may be absent
    from the file: they are filled through the tie. Any other missing or unexpected key, a shape
    mismatch, a missing/corrupt file, or a file whose checksum differs from the recorded one
    (`verify_checkpoint`) raises `CheckpointError` naming the path.
    """
    path = Path(path)
    trainer_state = verify_checkpoint(path)
    _load_weights(path, model)
    if optimizer is not None or scheduler is not None:
        saved = _torch_load(path / OPTIMIZER_FILE)
        for name, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
            if obj is None:
                continue
            if saved.get(name) is None:
                raise CheckpointError(f"{path / OPTIMIZER_FILE}: no {name} state saved")
            try:
                obj.load_state_dict(saved[name])
            except (ValueError, KeyError, RuntimeError) as e:
                raise CheckpointError(f"{path / OPTIMIZER_FILE}: {name} state does not fit: {e}") from e
        if optimizer is not None and isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
            # the next update's rate from this run's schedule (the same value when it is unchanged): the
            # saved optimizer holds the one the old schedule set, so a longer run took one step at it
            groups = scheduler.optimizer.param_groups
            for group, base, factor in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas):
                group["lr"] = base * factor(scheduler.last_epoch)
            scheduler._last_lr = [group["lr"] for group in groups]
    if restore_rng:
        rng_file = path / RNG_FILE
        try:
            set_rng_state(_torch_load(rng_file))
        except (ValueError, TypeError, RuntimeError) as e:
            raise CheckpointError(f"{rng_file}: invalid RNG state: {e}") from e
    return trainer_state


def _torch_load(file: Path) -> Any:
    if not file.is_file():
        raise CheckpointError(f"{file}: file not found")
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for corrupt archives; name the file
        raise CheckpointError(f"{file}: cannot read: {e}") from e


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint, from ``model.safetensors`` or the shards of its index."""
    index_file = path / WEIGHTS_INDEX_FILE
    if index_file.is_file():
        try:
            shards = sorted(set(json.loads(index_file.read_text(encoding="utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError) as e:
            raise CheckpointError(f"{index_file}: corrupt weight index: {e}") from e
    else:
        shards = [WEIGHTS_FILE]
    weights: dict[str, torch.Tensor] = {}
    for shard in shards:
        file = path / shard
        if not file.is_file():
            raise CheckpointError(f"{file}: weights file not found")
        try:
            weights.update(safetensors.torch.load_file(file, device="cpu"))
        except Exception as e:  # safetensors raises its own error type for corrupt files
            raise CheckpointError(f"{file}: cannot read weights: {e}") from e
    return weights


def module_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` as safetensors can store it: a tied tensor (same storage, offset, shape
    and strides as an earlier key) once, under its first name, and each kept tensor copied to its own
    CPU storage. `safetensors.torch.save_model` refuses views that share a storage without one
    covering it — cuDNN's flattened RNN weights (a GRU on a CUDA device) are such views."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple] = set()
    for key, t in model.state_dict().items():
        ident = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        if t.numel() and ident in seen:
            continue
        seen.add(ident)
        out[key] = t.detach().to("cpu", copy=True).contiguous()
    return out


def _load_weights(path: Path, model: nn.Module) -> None:
    """Copy the checkpoint's tensors into `model`; only tied (storage-sharing) keys may be absent."""
    if is_lora(model):
        _load_adapter(path, model)
        return
    weights = _read_weights(path)
    expected = model.state_dict()
    try:
        result = model.load_state_dict(weights, strict=False)
    except RuntimeError as e:  # shape mismatches
        raise CheckpointError(f"{path}: weights do not fit the model: {e}") from e
    if result.unexpected_keys:
        raise CheckpointError(f"{path}: unexpected keys not in the model: {sorted(result.unexpected_keys)}")
    loaded_ptrs = {expected[key].data_ptr() for key in weights}
    untied = [key for key in result.missing_keys if expected[key].data_ptr() not in loaded_ptrs]
    if untied:
        raise CheckpointError(f"{path}: keys missing from the checkpoint: {sorted(untied)}")


def _load_adapter(path: Path, model: nn.Module) -> None:
    """Load a LoRA checkpoint's adapter into a `peft` model: exactly the adapter's keys, no more, no less."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    file = path / ADAPTER_FILE
    if not file.is_file():
        raise CheckpointError(f"{file}: adapter weights not found (is this a full-model checkpoint? "
                              f"then train without lora, or start a LoRA run from it with model.path)")
    try:
        weights = safetensors.torch.load_file(file, device="cpu")
    except Exception as e:
        raise CheckpointError(f"{file}: cannot read adapter weights: {e}") from e
    expected = get_peft_model_state_dict(model)
    if set(weights) != set(expected):
        raise CheckpointError(f"{path}: adapter keys do not fit the model: missing "
                              f"{sorted(set(expected) - set(weights))[:5]}, unexpected {sorted(set(weights) - set(expected))[:5]}")
    bad = [k for k in weights if weights[k].shape != expected[k].shape]
    if bad:
        raise CheckpointError(f"{path}: adapter shapes do not fit the model (e.g. {bad[0]}: "
                              f"{tuple(weights[bad[0]].shape)} vs {tuple(expected[bad[0]].shape)}; another lora.r?)")
    set_peft_model_state_dict(model, weights)
