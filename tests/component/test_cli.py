"""The `seqrl` command: config printing, errors that name the field, eval output."""

from __future__ import annotations

import json

import pytest
import torch

from seqrl.cli import main
from seqrl.models import ModelConfig, load_policy


def test_print_config_applies_overrides(capsys):
    assert main(["train", "sft", "--config", "src/seqrl/configs/sft/arith_tiny.yaml", "--optim.lr=3e-4", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "lr: 0.0003" in out and "preset: tiny" in out


def test_preset_name_resolves_and_configs_ls_lists_it(capsys):
    assert main(["configs", "ls"]) == 0
    assert "sft/arith_tiny" in capsys.readouterr().out
    assert main(["train", "sft", "--config", "arith_tiny", "--print-config"]) == 0


@pytest.mark.parametrize(
    "argv,message",
    [
        (["train", "sft", "--config", "arith_tiny", "--optim.lrr=1"], "sft.optim.lrr: unknown key"),
        (["train", "sft", "--config", "nope"], "no such file or preset; sft presets: arith_mixed_small, arith_tiny"),
        (["train", "sft", "--config", "arith_tny"], "did you mean 'arith_tiny'? sft presets: "),
        (["train", "nope"], "unknown algorithm 'nope'; implemented: sft, grpo"),
        (["train", "sft", "--task.name=nope", "--print-config"], ""),
        (["eval", "./missing_dir", "--task", "arith"], "missing_dir: not found"),
        (["eval", "no-such-org/no-such-model", "--task", "arith"], "could not be loaded"),
    ],
)
def test_errors_exit_2_and_name_the_problem(argv, message, capsys):
    code = main(argv)
    if argv[-1] == "--print-config":  # task names are checked when the task is built, not when printing
        assert code == 0
        return
    assert code == 2
    assert message in capsys.readouterr().err


def test_unknown_task_lists_valid_ones(tmp_path, capsys):
    torch.manual_seed(0)
    load_policy(ModelConfig(preset="tiny", max_seq_len=64)).save(tmp_path / "m")
    assert main(["eval", str(tmp_path / "m"), "--task", "nope"]) == 2
    assert "arith" in capsys.readouterr().err


def test_eval_writes_json_with_all_metrics(tmp_path, capsys):
    torch.manual_seed(0)
    load_policy(ModelConfig(preset="tiny", max_seq_len=64)).save(tmp_path / "m")
    out = tmp_path / "eval.json"
    code = main(["eval", str(tmp_path / "m"), "--task", "arith", "--n", "4", "--metrics", "greedy,pass@2,maj@2",
                 "--max-new-tokens", "8", "--out", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data["metrics"]) >= {"eval/accuracy", "eval/pass@2", "eval/maj@2"}
    assert len(data["records"]) == 4 and "greedy" in data["records"][0]
    assert "eval/accuracy" in capsys.readouterr().out


def test_eval_results_sit_beside_the_checkpoints_one_file_per_evaluation(tmp_path, capsys):
    torch.manual_seed(0)
    ckpt = tmp_path / "run" / "checkpoint-1"
    load_policy(ModelConfig(preset="tiny", max_seq_len=64)).save(ckpt)
    argv = ["eval", str(ckpt), "--task", "arith", "--n", "2", "--max-new-tokens", "4"]
    assert main(argv) == 0
    assert main([*argv, "--metrics", "greedy"]) == 0  # same name within the second: a new file, not overwritten
    written = sorted((tmp_path / "run" / "evals").glob("checkpoint-1-arith-test-greedy-*.json"))
    assert len(written) == 2
    assert not any("eval" in p.name for p in ckpt.iterdir())  # checkpoint pruning cannot reach them
    folder = tmp_path / "results"
    folder.mkdir()
    assert main([*argv, "--out", str(folder)]) == 0  # an existing folder: a new file inside it
    assert len(list(folder.glob("*.json"))) == 1


def test_eval_of_a_run_folder_evaluates_its_last_complete_checkpoint(tmp_path, capsys):
    torch.manual_seed(0)
    run = tmp_path / "run"
    for step in (2, 10):
        load_policy(ModelConfig(preset="tiny", max_seq_len=64)).save(run / f"checkpoint-{step}")
        (run / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    load_policy(ModelConfig(preset="tiny", max_seq_len=64)).save(run / "checkpoint-30")  # incomplete: no state
    assert main(["eval", str(run), "--task", "arith", "--n", "2", "--max-new-tokens", "4"]) == 0
    (written,) = (run / "evals").glob("*.json")
    assert written.name.startswith("checkpoint-10-")
    assert json.loads(written.read_text())["checkpoint"] == str(run / "checkpoint-10")


def test_seqrl_overrides_apply_after_the_command_line_per_algorithm(capsys, monkeypatch):
    monkeypatch.setenv("SEQRL_OVERRIDES", "--steps=7 --sft.batch_size=4 --grpo.group_size=2")
    assert main(["train", "sft", "--config", "arith_tiny", "--steps=600", "--print-config"]) == 0
    captured = capsys.readouterr()
    assert "steps: 7\n" in captured.out and "batch_size: 4\n" in captured.out  # the environment wins
    assert "$SEQRL_OVERRIDES applies --steps=7 --batch_size=4" in captured.err and "group_size" not in captured.err
    monkeypatch.setenv("SEQRL_OVERRIDES", "--sft.optim.lrr=1")
    assert main(["train", "sft", "--config", "arith_tiny", "--print-config"]) == 2
    assert "optim.lrr: unknown key" in capsys.readouterr().err
    monkeypatch.setenv("SEQRL_OVERRIDES", "oops")
    assert main(["train", "sft", "--config", "arith_tiny", "--print-config"]) == 2
    assert capsys.readouterr().err.startswith("seqrl: error: $SEQRL_OVERRIDES: override 'oops'")


def test_eval_refuses_an_existing_out_file_before_evaluating(tmp_path, capsys):
    torch.manual_seed(0)
    load_policy(ModelConfig(preset="tiny", max_seq_len=64)).save(tmp_path / "m")
    old = tmp_path / "old.json"
    old.write_text('{"metrics": {"eval/accuracy": 0.5}}')
    assert main(["eval", str(tmp_path / "m"), "--task", "arith", "--n", "2", "--out", str(old)]) == 2
    captured = capsys.readouterr()
    assert "already exists" in captured.err and "eval/accuracy" not in captured.out  # refused before the work
    assert old.read_text() == '{"metrics": {"eval/accuracy": 0.5}}'


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--task-kwargs", "{digits: 3}"], "--task-kwargs '{digits: 3}': not valid JSON"),
        (["--task-kwargs", '{"digit": 3}'], "--task-kwargs"),
        (["--threads", "0"], "--threads must be >= 1"),
    ],
)
def test_eval_bad_arguments_are_one_line_errors(tmp_path, capsys, extra, message):
    assert main(["eval", str(tmp_path), "--task", "arith", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_eval_of_a_cut_short_checkpoint_is_a_one_line_error(tmp_path, capsys):
    torch.manual_seed(0)
    load_policy(ModelConfig(preset="tiny", max_seq_len=64)).save(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    assert main(["eval", str(tmp_path / "m"), "--task", "arith", "--n", "2"]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint {tmp_path / 'm'}: cannot load the model" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--memory", "0"], "--memory must be > 0"),
        (["--memory", "-5"], "--memory must be > 0"),
        (["--timeout", "0"], "--timeout must be > 0"),
        (["--tree-memory", "-1"], "--tree-memory must be > 0"),
    ],
)
def test_sandbox_run_bad_limits_are_one_line_errors(tmp_path, capsys, extra, message):
    (tmp_path / "s.py").write_text("def f():\n    return 1\n")
    (tmp_path / "t.py").write_text("assert f() == 1\n")
    assert main(["sandbox", "run", str(tmp_path / "s.py"), "--tests", str(tmp_path / "t.py"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_sandbox_run_with_an_empty_tests_file_says_there_are_no_tests(tmp_path, capsys):
    (tmp_path / "s.py").write_text("def f():\n    return 1\n")
    (tmp_path / "t.py").write_text("\n")
    assert main(["sandbox", "run", str(tmp_path / "s.py"), "--tests", str(tmp_path / "t.py")]) == 2
    assert "the file is empty (no tests to run)" in capsys.readouterr().err


def test_small_cli_conveniences(capsys, tmp_path):
    from seqrl import __version__
    from seqrl.cli import format_value

    with pytest.raises(SystemExit):
        main(["--version"])
    assert __version__ in capsys.readouterr().out
    assert main(["configs", "show", "arith_tiny"]) == 0
    assert "preset: tiny" in capsys.readouterr().out
    assert main(["demo", "--out", str(tmp_path / "d"), "--quik"]) == 2
    assert "unknown option '--quik'" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    assert format_value(866700.0) == "866,700" and format_value(0.25) == "0.25" and format_value(12) == "12"
    with pytest.raises(SystemExit):
        main(["eval", "dt", "--help"])
    out = capsys.readouterr().out
    assert "--target-returns" in out and "--task-kwargs" not in out


def test_run_files_follow_the_umask(tmp_path):
    import os

    from seqrl.algos.sft import SFTConfig
    from seqrl.config import dump_yaml
    from seqrl.utils.metrics import MetricsLogger

    old = os.umask(0o022)
    try:
        dump_yaml(SFTConfig(), tmp_path / "config.yaml")
        (tmp_path / "metrics.jsonl").write_text('{"step": 1, "a": 1.0}\n')
        MetricsLogger(tmp_path / "metrics.jsonl", resume_step=1).close()
    finally:
        os.umask(old)
    assert (tmp_path / "config.yaml").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "metrics.jsonl").stat().st_mode & 0o777 == 0o644


def test_grpo_without_its_sft_checkpoint_names_the_command_that_creates_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # any folder: presets are package data
    assert main(["train", "grpo", "--config", "arith_tiny_grpo"]) == 2
    err = capsys.readouterr().err
    assert "`seqrl train sft --config arith_tiny_short` creates it" in err and err.count("\n") == 1


def test_override_syntax_errors_come_before_torch_is_imported(capsys):
    import subprocess
    import sys

    code = ("import sys; from seqrl.cli import main; rc = main(['train', 'sft', '--config', 'arith_tiny', 'oops']); "
            "print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["2", "False"]


@pytest.mark.parametrize(
    "content,extra,message",
    [
        (b"\xff\xfe{}\n", [], "not UTF-8 text"),
        (b"", [], "the file is empty (no rows)"),
        (None, ["--task.kwargs.digit=3"], "task.kwargs"),
        (None, ["--run.threads=0"], "run.threads must be >= 1"),
    ],
)
def test_train_bad_input_is_one_line_naming_the_field_or_file(tmp_path, capsys, content, extra, message):
    argv = ["train", "sft", "--config", "arith_tiny", f"--run.out_dir={tmp_path}", "--steps=1", *extra]
    if content is not None:
        data = tmp_path / "rows.jsonl"
        data.write_bytes(content)
        config = tmp_path / "c.yaml"
        config.write_text(f"task: {{name: 'jsonl:{data}'}}\nmodel: {{preset: tiny}}\nsteps: 1\n")
        argv = ["train", "sft", "--config", str(config), f"--run.out_dir={tmp_path}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    if content is not None:
        assert str(tmp_path / "rows.jsonl") in err


def test_n_train_minus_one_means_every_row():
    from seqrl.algos.config import TaskConfig
    from seqrl.config import ConfigError, from_dict

    assert from_dict(TaskConfig, {"n_train": -1}).n_train == -1
    with pytest.raises(ConfigError, match="task.n_test must be >= 1, or -1"):
        from_dict(TaskConfig, {"n_test": 0}, path="task")


def test_a_mistyped_run_folder_is_one_line_at_once_with_a_did_you_mean(tmp_path, monkeypatch, capsys):
    """`runs/nothere` has one slash like a hub id; it used to go to the hub (≈ 50 s of retries offline)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "sft_arith_tiny" / "checkpoint-2").mkdir(parents=True)
    rc = main(["eval", "runs/sft_arith_tyni", "--n", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "runs/sft_arith_tyni: not found; did you mean runs/sft_arith_tiny?" in err
    with pytest.raises(ValueError, match="model.path 'runs/other': not found"):
        load_policy(ModelConfig(path="runs/other"))
    # before any run made runs/, `runs/x` is still seqrl's run folder, not the hub's `runs` organisation
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main(["eval", "runs/my_run"]) == 2
    assert capsys.readouterr().err.strip() == "seqrl: error: runs/my_run: not found"


@pytest.mark.parametrize("argv,line", [
    (["trian", "sft"], "seqrl: error: argument command: invalid choice: 'trian' (choose from 'train', "),
    (["train", "grpo", "--config", "arith_tiny_grpo", "--loss_type=dr_grpo"],
     "seqrl: error: --loss_type: TRL's loss_type has no single seqrl counterpart; set loss.agg and loss.advantage"),
    (["train", "sft", "--config", "arith_tiny", "--steps=-5"], "seqrl: error: sft: steps must be >= 1 (got -5)"),
    (["train", "sft", "--config", "mine.yaml"],
     "seqrl: error: config file 'mine.yaml', line 2, column 6: invalid YAML: mapping values are not allowed here"),
])
def test_bad_commands_are_one_line_naming_what_to_change(tmp_path, monkeypatch, capsys, argv, line):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("steps: 2\n  bad: indent\n")
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(line), err
    if argv[0] == "trian":
        assert err[0].endswith("did you mean 'train'? (usage: seqrl --help)")


def test_a_split_column_with_no_test_rows_names_the_column(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1), "split": "train"})
                                                 + "\n" for i in range(4)))
    (tmp_path / "c.yaml").write_text(json.dumps({"task": {"name": "jsonl:data.jsonl", "n_train": -1, "n_test": -1,
                                                          "kwargs": {"split_field": "split"}},
                                                 "model": {"preset": "tiny"}, "steps": 1, "batch_size": 4, "group_size": 2}))
    assert main(["train", "grpo", "--config", "c.yaml", "--run.progress=false"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "seqrl: error: no held-out problems to evaluate: data.jsonl: its split column 'split' marks no row 'test'"


def test_train_grpo_takes_trls_config_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = main(["train", "grpo", "--config", "arith_tiny_grpo", "--num_generations=4", "--max_completion_length=16",
               "--learning_rate=1e-5", "--output_dir=out/trl_run", "--beta=0.01", "--epsilon_high=0.28",
               "--logging_steps=3", "--print-config"])
    import yaml

    cfg = yaml.safe_load(capsys.readouterr().out)
    assert rc == 0 and cfg["group_size"] == 4 and cfg["sampling"]["max_new_tokens"] == 16
    assert cfg["optim"]["lr"] == 1e-5 and cfg["loss"]["beta"] == 0.01 and cfg["loss"]["clip_eps_high"] == 0.28
    assert (cfg["run"]["out_dir"], cfg["run"]["name"], cfg["run"]["log_every"]) == ("out", "trl_run", 3)
    assert main(["train", "ppo", "--config", "arith_tiny_ppo", "--scale_rewards=none", "--print-config"]) == 2
    assert "scale_rewards" in capsys.readouterr().err  # an alias PPO has no field for is named, not dropped


def test_every_command_is_found_from_the_help(capsys):
    """`seqrl search` was missing from `seqrl --help` and refused `--help`; `seqrl data --help` omitted
    prm-labels; the demo was described as SFT then GRPO only."""
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "search" in out and "process reward model and test-time search" in out
    with pytest.raises(SystemExit) as e:
        main(["search", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "{bon,beam,dvts,mcts}" in out
    with pytest.raises(SystemExit) as e:
        main(["data", "--help"])
    assert e.value.code == 0 and "prm-labels" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["search", "bon", "--help"])
    assert e.value.code == 0 and "--scorer" in capsys.readouterr().out


def test_a_task_kwarg_typo_is_one_line_before_anything_is_built(tmp_path, capsys):
    code = main(["train", "sft", "--config", "arith_tiny", "--task.kwargs.digitz=3", f"--run.out_dir={tmp_path}",
                 "--run.name=x"])
    err = capsys.readouterr().err
    assert code == 2 and "task.kwargs.digitz: task 'arith' takes no such keyword; did you mean 'digits'?" in err
    assert not (tmp_path / "x").exists()  # no run folder, no model built
