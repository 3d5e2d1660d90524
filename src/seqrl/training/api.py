"""What the TRL-style trainers (`GRPOTrainer`, `RewardTrainer`) share: how a ``model=`` argument and
in-memory datasets become a run's config (the run folder then records both)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from seqrl.models.config import PRESETS, ModelConfig


def model_config_for(model: str | os.PathLike, base: ModelConfig) -> ModelConfig:
    """`base` pointed at `model`: a preset trained from scratch (``tiny``, ``small``) when it names one
    and no such local folder exists, else a path (a folder, a hub id, a catalogue name, a .gguf file)."""
    name = os.fspath(model)
    if name in PRESETS and not Path(name).expanduser().exists():
        return replace(base, preset=name, path=None)
    return replace(base, path=name)


def dataset_file(run_dir: Path, name: str, train: Any, test: Any, resume: bool) -> tuple[Path | None, bool]:
    """The rows of `train` (and `test`, the held-out rows) as ``<run_dir>/data/<name>``, for a config to
    name: (the file, whether it has the split column `seqrl.data.jsonl.SPLIT_COLUMN`). A file given as
    `train` with no `test` is used where it is (None). A resumed run must find the same rows there; a
    fresh run on a folder that already holds checkpoints writes nothing (the trainer refuses the folder,
    saying how to resume)."""
    from seqrl.data.jsonl import write_rows
    from seqrl.utils.checkpoint import latest_checkpoint

    if isinstance(train, (str, os.PathLike)) and test is None:
        return None, False
    file = run_dir / "data" / name
    if resume and not file.is_file():
        raise ValueError(f"run.resume: {run_dir} holds no data/{name} (not a run given its data in memory); "
                         "give its own output_dir")
    if not resume and latest_checkpoint(run_dir) is not None:
        return file, test is not None
    return write_rows(train, test, file), test is not None
