"""Config presets are package data (`seqrl/configs/<algo>/<name>.yaml`), found through importlib.resources."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import seqrl
from seqrl.cli import configs_root, list_presets, main, preset_description, resolve_config

ALGO_DIRS = {"sft", "grpo", "dt", "odt"}


def test_presets_live_in_the_package_and_cover_every_algorithm():
    root = Path(str(configs_root()))
    assert root == Path(seqrl.__file__).parent / "configs"
    presets = list_presets()
    assert {p.split("/")[0] for p in presets} >= ALGO_DIRS
    assert len(presets) == len(list(root.glob("*/*.yaml"))) and "sft/arith_tiny" in presets


def test_one_copy_of_the_presets():
    """A second tree at the repository root would be read by nobody (and drift): presets are package data."""
    stray = Path(__file__).parents[2] / "configs"
    assert not stray.exists(), f"{stray}: move each configs/<algo>/ to src/seqrl/configs/<algo>/ (git mv)"


def test_every_preset_is_shipped_by_the_package_data_globs():
    """A preset the wheel leaves out exists in a checkout only (setuptools expands the globs as glob does)."""
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    package = Path(seqrl.__file__).parent
    shipped = {f for g in pyproject["tool"]["setuptools"]["package-data"]["seqrl"] for f in package.glob(g)}
    for preset in list_presets():
        assert package / "configs" / f"{preset}.yaml" in shipped, preset


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_loads_and_validates_under_its_algorithm(preset):
    from seqrl.cli import _config_class
    from seqrl.config import load_config

    algo = preset.split("/")[0]
    for method in ("dt", "bc") if algo == "dt" else (algo,):  # BC trains on the DT presets
        cls = _config_class(method)
        cfg = load_config(cls, resolve_config(preset, method), [], root=method)
        assert cfg.run.name
    description = preset_description(preset)
    assert description.endswith(".") and len(description) <= 100, description  # one line of `configs ls`


def test_names_resolve_to_the_packaged_file_from_any_folder(tmp_path, monkeypatch):
    own = tmp_path / "configs" / "sft" / "arith_tiny.yaml"  # a local ./configs is the user's, not the presets
    own.parent.mkdir(parents=True)
    own.write_text("run: {name: mine}\n")
    monkeypatch.chdir(tmp_path)
    packaged = configs_root() / "sft" / "arith_tiny.yaml"
    assert resolve_config("arith_tiny", "sft") == packaged
    assert resolve_config("sft/arith_tiny", "grpo") == packaged
    assert resolve_config("pendulum_medium_expert", "bc") == configs_root() / "dt" / "pendulum_medium_expert.yaml"
    assert resolve_config("hopper_medium", "odt") == configs_root() / "odt" / "hopper_medium.yaml"
    assert resolve_config("configs/grpo/arith_tiny_grpo.yaml", "grpo") == configs_root() / "grpo" / "arith_tiny_grpo.yaml"
    assert resolve_config("configs/sft/arith_tiny.yaml", "sft") == Path("configs/sft/arith_tiny.yaml")  # a file wins
    with pytest.raises(ValueError, match="'arith_tiny_grpo': no such file or preset"):
        resolve_config("arith_tiny_grpo", "sft")


def test_configs_ls_prints_one_described_line_per_preset(capsys):
    assert main(["configs", "ls"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list_presets()
    line = next(line for line in lines if line.startswith("sft/arith_tiny "))
    assert line.split(None, 1)[1] == "SFT of the tiny preset on 2-digit addition with worked column-wise solutions."


def test_configs_show_prints_the_preset_verbatim(capsys):
    assert main(["configs", "show", "sft/arith_tiny"]) == 0
    assert capsys.readouterr().out == (configs_root() / "sft" / "arith_tiny.yaml").read_text(encoding="utf-8")
    assert main(["configs", "show", "hopper_medium"]) == 2  # dt and odt both have one
    assert "ambiguous; one of dt/hopper_medium, odt/hopper_medium" in capsys.readouterr().err


def test_no_presets_is_an_error_not_silence(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("seqrl.cli.configs_root", lambda: tmp_path)
    assert list_presets() == []
    assert main(["configs", "ls"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "no presets found" in captured.err
    assert main(["train", "sft", "--config", "arith_tiny", "--print-config"]) == 2
    assert "presets: none" in capsys.readouterr().err
