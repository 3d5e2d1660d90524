"""Every name a benchmark script imports from seqrl exists: the scripts are not run by the suite, so a
module moved inside seqrl would otherwise break them unnoticed (checked statically, without running them)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def seqrl_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every ``from seqrl… import name`` in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "seqrl":
            out += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, "") for alias in node.names if alias.name.split(".")[0] == "seqrl"]
    return out


@pytest.mark.parametrize("script", sorted(BENCHMARKS.glob("*.py")), ids=lambda p: p.name)
def test_a_benchmark_imports_only_what_seqrl_has(script):
    missing = []
    for line, module, name in seqrl_imports(script):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            missing.append(f"line {line}: {module} ({e})")
            continue
        if name and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")  # a submodule
            except ImportError:
                missing.append(f"line {line}: {module} has no {name}")
    assert not missing, f"{script.name}: " + "; ".join(missing)
