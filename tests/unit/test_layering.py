"""Imports point down (types and core at the bottom, algorithms at the top), read from the source with
`ast` (nothing is imported).

Every import counts, including the lazy ones inside functions: a lazy import still ties two rooms.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PKG = Path(importlib.util.find_spec("seqrl").origin).parent  # src/seqrl of the tree under test

# The shared plumbing of the algos floor (run folder, optimiser) and its torch-free shared configs
# (run, task, optimiser): no algorithm lives in them, so every trainer may import them; they import no
# trainer themselves (checked below). An algorithm's own config sits beside it in `<algo>_config.py`.
ALGOS_SHARED = {"seqrl.training.run", "seqrl.algos.config"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def seqrl_imports(path: Path, package: str | None = None) -> set[str]:
    """Every seqrl module `path` imports; ``from seqrl.x import y`` counts as seqrl.x and seqrl.x.y
    (y may be a submodule), relative imports resolved against the file's package."""
    if package is None:
        package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m == "seqrl" or m.startswith("seqrl.")}


def files(room: str) -> list[Path]:
    target = PKG / room
    return sorted(target.rglob("*.py")) if target.is_dir() else [target]


def in_room(module: str, room: str) -> bool:
    return module == f"seqrl.{room}" or module.startswith(f"seqrl.{room}.")


def violations(room: str, allowed) -> list[str]:
    return [f"{module_name(f)} imports {m}" for f in files(room) for m in sorted(seqrl_imports(f)) if not allowed(f, m)]


def test_the_parser_sees_every_import_form(tmp_path):
    # the checker itself: plain, from, relative, lazy (inside a function) — each would hide an edge if missed
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nimport seqrl.data\nfrom seqrl.rewards import math\nfrom . import sft\n"
                     "def f():\n    from ..core.losses import token_nll_sum\n", encoding="utf-8")
    got = seqrl_imports(probe, package="seqrl.algos")
    assert "os" not in got
    assert {"seqrl.data", "seqrl.rewards", "seqrl.rewards.math", "seqrl.algos.sft", "seqrl.core.losses"} <= got


def test_types_imports_nothing_of_seqrl():
    assert (PKG / "types.py").is_file()
    assert seqrl_imports(PKG / "types.py") == set()


@pytest.mark.parametrize("room", ["core"])
def test_core_imports_only_core(room):
    assert not (v := violations(room, lambda f, m: in_room(m, "core"))), "\n".join(v)


def test_data_and_rewards_do_not_import_each_other():
    assert not (v := violations("data", lambda f, m: not in_room(m, "rewards"))), "\n".join(v)
    assert not (v := violations("rewards", lambda f, m: not in_room(m, "data"))), "\n".join(v)


def test_task_files_do_not_import_the_registry():
    # the registry builds tasks by name; a task importing it back closes a circle
    def allowed(f: Path, m: str) -> bool:
        return f.name in ("__init__.py", "registry.py") or m != "seqrl.data.registry"

    assert not (v := violations("data", allowed)), "\n".join(v)


def test_no_algorithm_imports_another():
    def allowed(f: Path, m: str) -> bool:
        if not in_room(m, "algos") or m == "seqrl.algos":
            return True
        def within(*targets: str) -> bool:
            return any(m == s or m.startswith(s + ".") for s in targets)

        if module_name(f) in ALGOS_SHARED:  # the shared plumbing imports no trainer
            return within(*(ALGOS_SHARED - {module_name(f)}))
        return within(*ALGOS_SHARED, f"{module_name(f)}_config")  # and a trainer its own config

    assert not (v := violations("algos", allowed)), "\n".join(v)



def test_agents_import_only_what_runs_an_episode():
    # tools, prompts, sampling, the sandbox and the import-path reader; never a trainer, a reward or a
    # dataset — except a shipped environment (agents/envs/), which pairs a task set with its judge
    rooms = ("agents", "prompts", "rollout", "sandbox", "types", "utils.imports")
    envs = PKG / "agents" / "envs"

    def allowed(f: Path, m: str) -> bool:
        return any(in_room(m, r) for r in rooms) or (envs in f.parents and (in_room(m, "data") or in_room(m, "rewards")))

    assert not (v := violations("agents", allowed)), "\n".join(v)
    assert not any(in_room(m, "algos") or in_room(m, "training") for f in files("agents") for m in seqrl_imports(f))
