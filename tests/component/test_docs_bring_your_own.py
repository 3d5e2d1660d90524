"""docs/bring-your-own.md runs top to bottom as written, in an empty folder.

`<!-- file: NAME -->` before a fenced block writes the block to NAME; `<!-- run -->` before a bash
block runs each line (``seqrl`` is this interpreter's ``-m seqrl``), before a python block runs it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "bring-your-own.md"
_BLOCK_RE = re.compile(r"<!-- (file: (?P<name>\S+)|run) -->\n```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "OMP_NUM_THREADS": "1"}


def test_the_page_runs_as_written(tmp_path):
    steps = list(_BLOCK_RE.finditer(DOC.read_text(encoding="utf-8")))
    assert sum(m["name"] is None for m in steps) >= 3 and sum(m["name"] is not None for m in steps) >= 4
    outputs = []
    for m in steps:
        if m["name"]:
            (tmp_path / m["name"]).write_text(m["body"])
            continue
        if m["lang"] == "bash":
            commands = [line for line in m["body"].splitlines() if line.strip() and not line.startswith("#")]
            argvs = [[sys.executable, "-m", "seqrl", *shlex.split(c)[1:]] if c.startswith("seqrl ") else shlex.split(c)
                     for c in commands]
        else:
            argvs = [[sys.executable, "-c", m["body"]]]
        for argv in argvs:
            done = subprocess.run(argv, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=240)
            assert done.returncode == 0, f"{argv}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            outputs.append(done.stdout)
    shown = outputs[0]
    assert "The assistant solves" in shown and "Give the number of" in shown  # r1 system prompt and template
    records = [json.loads(line) for line in (tmp_path / "runs" / "byo" / "metrics.jsonl").read_text().splitlines()]
    assert any("reward/mentions_unit/mean" in r for r in records)
    assert (tmp_path / "runs" / "byo" / "checkpoint-2").is_dir()
    assert "reward/short/mean" in outputs[2]
    assert outputs[3].count("Twice ") == 2
