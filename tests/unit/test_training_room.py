"""seqrl.training sits below algos/: the run loop, the run plumbing and the fine-tuning pieces import no
trainer, CLI or demo (not even the shared configs: they read their fields)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOM = Path(importlib.util.find_spec("seqrl").origin).parent / "training"


def test_training_imports_no_trainer_cli_or_demo():
    files = sorted(ROOM.rglob("*.py"))
    assert {"loop.py", "run.py", "finetune.py"} <= {f.name for f in files}
    bad = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{path.name}: {n}" for n in names
                    if n.startswith(("seqrl.algos", "seqrl.cli", "seqrl.demo")) or (isinstance(node, ast.ImportFrom) and node.level)]
    assert not bad, bad
