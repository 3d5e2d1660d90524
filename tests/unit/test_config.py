"""Strict configs: every bad input is a ConfigError naming its dotted path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import yaml

from seqrl.config import ConfigError, dump_yaml, from_dict, load_config, merge, parse_overrides, to_dict


@dataclass
class OptimConfig:
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    warmup_steps: int = 0


@dataclass
class StageConfig:
    name: str
    steps: int = 1


@dataclass
class TrainConfig:
    batch_size: int = 8
    grad_accum: int = 2
    bf16: bool = False
    schedule: Literal["constant", "cosine"] = "cosine"

    def __post_init__(self) -> None:
        if self.batch_size % self.grad_accum:
            raise ValueError(
                f"train.batch_size ({self.batch_size}) must be divisible by "
                f"train.grad_accum ({self.grad_accum})"
            )


@dataclass
class SFTConfig:
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    stages: list[StageConfig] = field(default_factory=list)
    eval_every: int | None = None
    tags: tuple[str, ...] = ()
    reward_weights: dict[str, float] = field(default_factory=dict)
    extra: Any = None


@dataclass
class Required:
    model: str
    seed: int = 0


def error(cls: type, data: dict, path: str = "sft") -> str:
    with pytest.raises(ConfigError) as info:
        from_dict(cls, data, path=path)
    return str(info.value)


# --- from_dict -------------------------------------------------------------------------------------


def test_defaults_and_nested_partial_dict():
    cfg = from_dict(SFTConfig, {"optim": {"lr": 0.5}}, path="sft")
    assert cfg.optim == OptimConfig(lr=0.5)  # missing nested keys keep their defaults
    assert cfg.train == TrainConfig()


def test_unknown_key_names_dotted_path_valid_keys_and_suggestion():
    msg = error(SFTConfig, {"optim": {"lrr": 1.0}})
    assert msg == (
        "sft.optim.lrr: unknown key; did you mean 'lr'? valid keys: betas, lr, warmup_steps, weight_decay"
    )


def test_unknown_key_without_close_match_has_no_suggestion():
    msg = error(SFTConfig, {"optim": {"zzz": 1}})
    assert msg == "sft.optim.zzz: unknown key; valid keys: betas, lr, warmup_steps, weight_decay"


def test_root_path_is_optional():
    assert error(SFTConfig, {"optim": {"lr": "fast"}}, path="") == "optim.lr: expected float, got str 'fast'"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"optim": {"lr": "fast"}}, "sft.optim.lr: expected float, got str 'fast'"),
        ({"optim": {"lr": True}}, "sft.optim.lr: expected float, got bool True"),
        ({"optim": {"warmup_steps": 1.5}}, "sft.optim.warmup_steps: expected int, got float 1.5"),
        ({"optim": {"warmup_steps": True}}, "sft.optim.warmup_steps: expected int, got bool True"),
        ({"train": {"bf16": 1}}, "sft.train.bf16: expected bool, got int 1"),
        ({"train": {"bf16": "yes"}}, "sft.train.bf16: expected bool, got str 'yes'"),
        (
            {"train": {"schedule": "linear"}},
            "sft.train.schedule: expected one of 'constant', 'cosine', got str 'linear'",
        ),
        ({"tags": "a"}, "sft.tags: expected tuple[str, ...], got str 'a'"),
        ({"tags": ["a", 2]}, "sft.tags[1]: expected str, got int 2"),
        (
            {"optim": {"betas": [0.9]}},
            "sft.optim.betas: expected tuple[float, float] (2 items), got list [0.9]",
        ),
        ({"optim": 3}, "sft.optim: expected a mapping for OptimConfig, got int 3"),
        ({"stages": [{"name": "a"}, {"steps": 2}]}, "sft.stages[1].name: missing required field"),
        (
            {"stages": [{"name": "a", "step": 2}]},
            "sft.stages[0].step: unknown key; did you mean 'steps'? valid keys: name, steps",
        ),
        ({"eval_every": "10"}, "sft.eval_every: expected int, got str '10'"),
        ({"reward_weights": {"math": "x"}}, "sft.reward_weights.math: expected float, got str 'x'"),
        ({"reward_weights": [1.0]}, "sft.reward_weights: expected dict[str, float], got list [1.0]"),
    ],
)
def test_wrong_types_name_the_field(data, message):
    assert error(SFTConfig, data) == message


def test_conversions_int_to_float_list_to_tuple_none_any():
    cfg = from_dict(
        SFTConfig,
        {
            "optim": {"lr": 1, "betas": [0.5, 1]},
            "tags": ["x", "y"],
            "eval_every": None,
            "stages": [{"name": "warm", "steps": 3}],
            "reward_weights": {"math": 1, "format": 0.5},
            "extra": {"anything": [1, "goes"]},
        },
    )
    assert cfg.optim.lr == 1.0 and type(cfg.optim.lr) is float
    assert cfg.optim.betas == (0.5, 1.0) and type(cfg.optim.betas[1]) is float
    assert cfg.tags == ("x", "y")
    assert cfg.eval_every is None
    assert cfg.stages == [StageConfig("warm", 3)]
    assert cfg.reward_weights == {"math": 1.0, "format": 0.5}
    assert cfg.extra == {"anything": [1, "goes"]}
    assert from_dict(SFTConfig, {"eval_every": 5}).eval_every == 5


def test_missing_required_field():
    assert error(Required, {"seed": 1}, path="run") == "run.model: missing required field"
    assert from_dict(Required, {"model": "tiny"}) == Required("tiny")


def test_post_init_error_is_prefixed_with_path():
    msg = error(SFTConfig, {"train": {"batch_size": 6, "grad_accum": 4}})
    assert msg == "sft.train: train.batch_size (6) must be divisible by train.grad_accum (4)"


def test_top_level_must_be_mapping():
    assert error(SFTConfig, [1, 2]) == "sft: expected a mapping for SFTConfig, got list [1, 2]"


# --- overrides -------------------------------------------------------------------------------------


def test_parse_overrides_values():
    args = ["--optim.lr=3e-4", "--train.bf16=true", "tags=[a, b]", "--optim.warmup_steps", "10"]
    assert parse_overrides([*args, "--eval_every=null"]) == {
        "optim": {"lr": 0.0003, "warmup_steps": 10},
        "train": {"bf16": True},
        "tags": ["a", "b"],
        "eval_every": None,
    }
    assert isinstance(parse_overrides(["--x=1e-5"])["x"], float)
    assert parse_overrides(["--x=-1"]) == {"x": -1}
    assert parse_overrides(["--lr", "-1.5"]) == {"lr": -1.5}
    # YAML 1.1 quirks are off: only true/false are booleans, no octal
    assert parse_overrides(["--a=yes", "--b=on", "--c=010"]) == {"a": "yes", "b": "on", "c": "010"}
    assert parse_overrides(["--name='123'"]) == {"name": "123"}
    assert parse_overrides(["--a=1", "--a=2"]) == {"a": 2}  # later wins


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--optim.lr"], "'--optim.lr'"),
        (["optim.lr"], "'optim.lr'"),
        (["--optim.lr", "--x=1"], "'--optim.lr'"),
        (["--=3"], "'--=3'"),
        (["--a..b=3"], "'--a..b=3'"),
        (["--a=[1, 2"], "'--a=[1, 2'"),
        (["--a=1", "--a.b=2"], "'--a.b=2'"),
        (["--a.b=1", "--a=2"], "'--a=2'"),
    ],
)
def test_malformed_overrides_name_the_argument(args, fragment):
    with pytest.raises(ConfigError, match="override") as info:
        parse_overrides(args)
    assert fragment in str(info.value)


def test_merge_is_deep_and_does_not_mutate():
    base = {"optim": {"lr": 1.0, "wd": 0.1}, "tags": [1]}
    update = {"optim": {"lr": 2.0}, "steps": 3}
    out = merge(base, update)
    assert out == {"optim": {"lr": 2.0, "wd": 0.1}, "tags": [1], "steps": 3}
    out["tags"].append(2)
    out["optim"]["wd"] = 0.0
    assert base == {"optim": {"lr": 1.0, "wd": 0.1}, "tags": [1]}
    assert update == {"optim": {"lr": 2.0}, "steps": 3}


# --- files -----------------------------------------------------------------------------------------


def test_load_config_file_then_overrides(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text("optim:\n  lr: 3e-4\n  warmup_steps: 5\ntrain:\n  bf16: true\n")
    cfg = load_config(SFTConfig, path, overrides=["--optim.lr=1e-2", "--train.batch_size=4"], root="sft")
    assert cfg.optim == OptimConfig(lr=0.01, warmup_steps=5)  # override wins, file value kept
    assert cfg.train == TrainConfig(batch_size=4, bf16=True)
    assert load_config(SFTConfig, path).optim.lr == 0.0003  # YAML file: 3e-4 is a float too


def test_load_config_errors_name_the_file_and_field(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml.*not found"):
        load_config(SFTConfig, tmp_path / "nope.yaml")
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match=r"list\.yaml.*expected a mapping"):
        load_config(SFTConfig, listing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("optim: [1, 2\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml.*invalid YAML"):
        load_config(SFTConfig, broken)
    with pytest.raises(ConfigError, match=r"^sft\.optim\.lr: expected float"):
        load_config(SFTConfig, overrides=["--optim.lr=fast"], root="sft")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(SFTConfig, empty) == SFTConfig()


def test_dump_yaml_round_trip(tmp_path):
    cfg = SFTConfig(
        optim=OptimConfig(lr=3e-4, betas=(0.9, 0.95), weight_decay=1e-5),
        train=TrainConfig(batch_size=4, bf16=True, schedule="constant"),
        stages=[StageConfig("warm", 2)],
        eval_every=7,
        # strings that a YAML 1.1 or 1.2 reader could mistake for other types
        tags=("3e-4", "true", "yes", "null", "", "010", "1.5"),
        reward_weights={"math": float("inf")},
        extra={"k": [1, "x"]},
    )
    out = dump_yaml(cfg, tmp_path / "run" / "config.yaml")
    assert out == tmp_path / "run" / "config.yaml"
    assert [p.name for p in out.parent.iterdir()] == ["config.yaml"]  # no temp file left
    assert load_config(SFTConfig, out) == cfg
    assert to_dict(cfg)["optim"]["betas"] == [0.9, 0.95]
    assert to_dict(cfg)["stages"] == [{"name": "warm", "steps": 2}]


@dataclass
class RLConfig:
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-6, warmup_steps=7))


def test_partial_section_keeps_the_fields_own_factory_defaults():
    # Only lr is given: warmup_steps keeps the factory's 7, not OptimConfig's class default 0.
    cfg = from_dict(RLConfig, {"optim": {"lr": 3e-4}}, path="rl")
    assert cfg.optim == OptimConfig(lr=3e-4, warmup_steps=7)
    assert from_dict(RLConfig, {}, path="rl").optim == OptimConfig(lr=1e-6, warmup_steps=7)


def test_a_mapping_given_whole_replaces_a_presets_and_a_dotted_key_merges():
    """`--task.kwargs={}` must drop the arith presets' digits so the pipeline can point at gsm."""
    from seqrl.algos.prm import PRMConfig
    from seqrl.cli import preset_file

    cfg = load_config(PRMConfig, preset_file("prm/arith_tiny_prm"), ["--task.name=gsm", "--task.kwargs={}"])
    assert cfg.task.name == "gsm" and cfg.task.kwargs == {}
    cfg = load_config(PRMConfig, preset_file("prm/arith_tiny_prm"), ["--task.kwargs.digits=3"])
    assert cfg.task.kwargs == {"digits": 3}
    cfg = load_config(PRMConfig, preset_file("prm/arith_tiny_prm"), ["--task.kwargs={}", "--task.kwargs.digits=1"])
    assert cfg.task.kwargs == {"digits": 1}
    preset = load_config(PRMConfig, preset_file("prm/arith_tiny_prm"))
    cfg = load_config(PRMConfig, preset_file("prm/arith_tiny_prm"), ["--optim={lr: 1.0e-4}"])
    assert cfg.optim.lr == 1e-4 and cfg.optim.warmup_steps == preset.optim.warmup_steps  # a mapping merges


@pytest.mark.parametrize("lr", [1e38, float("nan"), float("inf"), 0.0, -1e-3])
def test_a_learning_rate_that_would_overflow_adam_is_named(lr):
    """lr 1e38 used to pass the config and overflow inside the optimizer step with a traceback."""
    from seqrl.algos.config import OptimConfig

    with pytest.raises(ValueError, match=r"optim.lr must be a number in \(0, 1e\+10\]"):
        OptimConfig(lr=lr)
    assert OptimConfig(lr=3e-5).lr == 3e-5 and OptimConfig(lr=1e6).lr == 1e6  # 1e6: the divergence tests' lr


def test_trl_names_in_the_two_item_form():
    from seqrl.algos.config import trl_overrides

    assert trl_overrides(["--output_dir", "runs/a", "--learning_rate", "1e-5"], {"run", "optim"}) == [
        "--run.out_dir=runs", "--run.name=a", "--optim.lr=1e-5"]


def test_text_that_yaml_reads_as_a_mapping_is_text_for_a_string_field():
    """`--prompt.template=Q: {question}` was refused: YAML read it as {'Q': {'question': None}}."""
    from seqrl.algos.sft import SFTConfig
    from seqrl.config import from_dict, merge, parse_overrides

    cfg = from_dict(SFTConfig, merge({}, parse_overrides(["--prompt.template=Q: {question} A:", "--task.kwargs={digits: 3}"])))
    assert cfg.prompt.template == "Q: {question} A:" and cfg.task.kwargs == {"digits": 3}


def test_the_old_top_level_eval_every_is_refused_naming_eval_every_and_read_from_an_old_run_folder(tmp_path):
    """RM and PRM spell their evaluation cadence eval.every, as every other trainer does; the old spelling
    is an error that names the new one, and a run folder written with it still resumes."""
    from seqrl.training.run import check_resume_changes
    from seqrl.algos.prm_config import PRMConfig
    from seqrl.algos.rm_config import PreferenceDataConfig, RMConfig
    from seqrl.config import _Dumper

    with pytest.raises(ConfigError, match=r"^eval_every: renamed to eval\.every"):
        from_dict(PRMConfig, {"eval_every": 5})
    with pytest.raises(ConfigError, match=r"^eval_batch_size: renamed to eval\.batch_size"):
        from_dict(PRMConfig, {"eval_batch_size": 8})
    assert from_dict(PRMConfig, {"eval": {"every": 5, "batch_size": 8}}).eval.batch_size == 8
    with pytest.raises(ConfigError, match=r"^eval: every must be >= 0"):
        from_dict(PRMConfig, {"eval": {"every": -1}})
    cfg = from_dict(RMConfig, {"data": {"path": "prefs.jsonl"}, "eval": {"every": 50}})
    assert isinstance(cfg.data, PreferenceDataConfig) and cfg.eval.every == 50
    old = to_dict(cfg)
    old["eval_every"] = old.pop("eval")["every"]  # config.yaml as the trainer wrote it before the rename
    (tmp_path / "config.yaml").write_text(yaml.dump(old, Dumper=_Dumper, sort_keys=False))
    assert check_resume_changes(tmp_path / "config.yaml", cfg) == []
    del old["optim"]["schedule_steps"]  # a field added after the run was written: at its default, no change
    (tmp_path / "config.yaml").write_text(yaml.dump(old, Dumper=_Dumper, sort_keys=False))
    assert check_resume_changes(tmp_path / "config.yaml", cfg) == []
    cfg.optim.schedule_steps = 100  # set to something else on --resume: a change, applied and named
    assert check_resume_changes(tmp_path / "config.yaml", cfg) == ["optim.schedule_steps: None -> 100"]


def test_star_per_iteration_steps_are_finetune_steps_and_an_old_run_folder_still_resumes(tmp_path):
    from seqrl.algos.star_config import STaRConfig
    from seqrl.training.run import check_resume_changes

    with pytest.raises(ConfigError, match="star.steps: renamed to star.finetune_steps \\(steps means a run's "
                                          "optimizer steps in every trainer"):
        from_dict(STaRConfig, {"steps": 5}, "star")
    saved = to_dict(STaRConfig(finetune_steps=7))
    saved["steps"] = saved.pop("finetune_steps")  # a run folder written before the rename
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved), encoding="utf-8")
    assert check_resume_changes(tmp_path / "config.yaml", STaRConfig(finetune_steps=7)) == []
    assert check_resume_changes(tmp_path / "config.yaml", STaRConfig(finetune_steps=9)) == ["finetune_steps: 7 -> 9"]


def test_odt_steps_are_its_optimizer_steps_read_not_set():
    from seqrl.algos.odt_config import ODTConfig

    cfg = from_dict(ODTConfig, {"pretrain_steps": 10, "online": {"iterations": 3, "updates": 4}}, "odt")
    assert cfg.steps == 10 + 3 * 4  # `steps` means optimizer steps in every trainer
    assert "steps" not in to_dict(cfg)
    with pytest.raises(ConfigError, match=r"odt.steps: computed, not set: odt.steps = pretrain_steps \+ "
                                          r"online.iterations × online.updates; set those"):
        from_dict(ODTConfig, {"steps": 5}, "odt")
