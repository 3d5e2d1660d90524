"""The README's "Using it" block, run top to bottom as a bash script in an empty folder.

The commands are the README's own; ``$SEQRL_OVERRIDES`` (documented beside the block) shrinks every
training run — a few steps, small batches and data — so the script runs in well under a minute.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- readme-script:"

# fewer steps, tiny batches and data; the GRPO presets start from the short SFT's last checkpoint
SHRINK = ("--run.progress=false --batch_size=8 --task.n_train=64 --task.n_test=4 --eval.max_new_tokens=4 "
          "--eval.samples=0 --sft.steps=4 --sft.run.save_every=2 --sft.eval.every=0 --grpo.steps=2 "
          "--grpo.model.path=runs/sft_arith_tiny_short/checkpoint-4 --grpo.sampling.max_new_tokens=4 "
          "--grpo.dapo.soft_overlong_cache=2 --grpo.micro_batch_size=8 --grpo.eval.every=0")


def readme_script(text: str) -> str:
    """The first ```bash block after the marker comment."""
    start = text.index(MARKER)
    match = re.compile(r"```bash\n(.*?)```", re.S).search(text, start)
    assert match, "no bash block after the readme-script marker"
    return match.group(1)


def test_readme_script_is_found():
    script = readme_script(README.read_text(encoding="utf-8"))
    assert "seqrl train sft" in script and "seqrl train grpo" in script


@pytest.mark.e2e
def test_readme_block_runs_in_an_empty_folder(tmp_path):
    script = readme_script(README.read_text(encoding="utf-8"))
    bindir = tmp_path / "bin"  # `seqrl` on PATH runs this tree's package with this interpreter
    bindir.mkdir()
    (bindir / "seqrl").write_text(f"#!/bin/sh\nexec {sys.executable} -m seqrl \"$@\"\n")
    (bindir / "seqrl").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    src = str(Path(__import__("seqrl").__file__).resolve().parents[1])
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "SEQRL_OVERRIDES": SHRINK,
           "PYTHONPATH": os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])]),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)  # a hang guard: over 5x its idle time
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    runs = work / "runs"
    for name in ("sft_arith_tiny", "sft_arith_tiny_short", "grpo_arith_tiny", "dapo_arith_tiny"):
        assert (runs / name / "config.yaml").is_file(), f"{name}: no run folder"
    assert len(list((runs / "sft_arith_tiny" / "evals").glob("*.json"))) == 1
    assert "lr: 0.001" in proc.stdout and "name: sft_lr1e-3" in proc.stdout  # the printed config
    assert (runs / "dapo_arith_tiny" / "checkpoint-2" / "adapter_config.json").is_file()  # LoRA
    assert "score=1.0" in proc.stdout  # the math reward line
