"""docs/trl.md: its seqrl script runs as written, in an empty folder, on the real pretrained model.

`make test` fetches the model; run by hand without it the test skips naming the command (CI sets
SEQRL_REQUIRE_REAL_MODEL=1, where it fails instead)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "trl.md"
NAME = "smollm2-135m-instruct"


def test_the_seqrl_script_of_the_page_runs_as_written(tmp_path):
    from seqrl.models.catalog import cached

    if cached(NAME) is None:
        if os.environ.get("SEQRL_REQUIRE_REAL_MODEL"):
            pytest.fail(f"{NAME} is not in the cache and SEQRL_REQUIRE_REAL_MODEL is set (make test fetches it)")
        pytest.skip(f"{NAME} not fetched: run `seqrl models get {NAME}` (make test does)")
    blocks = re.findall(r"<!-- run -->\n```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1 and "from seqrl import GRPOConfig, GRPOTrainer" in blocks[0]
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    done = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert re.search(r"reward -?\d+\.\d\d", done.stdout)
    run = tmp_path / "runs" / "SmolLM2-GRPO"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/reward_len/mean" in r] == [1, 2]
    assert (run / "checkpoint-2" / "model.safetensors").is_file() and (run / "model.safetensors").is_file()
    assert len((run / "data" / "train.jsonl").read_text().splitlines()) == 40
    assert "holding out" in done.stderr  # no eval_dataset: the held-out rule is said
