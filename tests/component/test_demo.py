"""`seqrl demo` plumbing on a few steps (its learning is shown by the real demo and the e2e tests)."""

from seqrl.cli import main


def test_demo_runs_every_stage_and_writes_the_report(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["demo", "--out", str(out), "--quick", "--sft.steps=3", "--sft.task.n_test=4", "--sft.task.n_train=64",
                 "--grpo.steps=1", "--grpo.batch_size=16", "--grpo.micro_batch_size=16", "--grpo.task.n_train=64",
                 "--grpo.task.n_test=4", "--grpo.eval.samples=0", "--prm.steps=2", "--prm.task.n_train=64",
                 "--prm.task.n_test=8"])
    assert code == 0
    report = (out / "report.md").read_text()
    assert "| metric | untrained | after SFT | after GRPO |" in report
    assert "| PRM-weighted best-of-8 |" in report and "| PRM beam search (N=8, M=4) |" in report
    assert "checks the pipeline only" in report  # --quick says what it is for
    for name in ("stages.png", "sft/plots/sft.png", "grpo/plots/grpo.png", "sft/config.yaml", "grpo/metrics.jsonl",
                 "prm/metrics.jsonl"):
        assert (out / name).is_file(), name


def test_demo_rejects_overrides_outside_its_stages(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "d"), "--steps=3"]) == 2
    assert "overrides must start with sft., grpo. or prm." in capsys.readouterr().err


def _user_folder(tmp_path):
    out = tmp_path / "mine"
    (out / "my_experiment").mkdir(parents=True)
    (out / "notes.txt").write_text("my notes")
    (out / "my_experiment" / "results.csv").write_text("a,b\n1,2\n")
    return out


def test_demo_refuses_a_users_non_empty_folder_and_deletes_nothing(tmp_path, capsys):
    out = _user_folder(tmp_path)
    assert main(["demo", "--out", str(out), "--quick", "--sft.steps=1"]) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and "nothing was deleted" in err and err.count("\n") == 1  # one line, no traceback
    assert (out / "notes.txt").read_text() == "my notes"
    assert (out / "my_experiment" / "results.csv").read_text() == "a,b\n1,2\n"
    assert sorted(p.name for p in out.iterdir()) == ["my_experiment", "notes.txt"]


def test_demo_replaces_only_its_own_folder(tmp_path):
    from seqrl.demo import MARKER, prepare_demo_dir

    out = tmp_path / "d"
    prepare_demo_dir(out)  # new folder: created and marked
    assert (out / MARKER).is_file()
    (out / "old_report.md").write_text("x")
    prepare_demo_dir(out)  # an earlier demo's folder: replaced
    assert sorted(p.name for p in out.iterdir()) == [MARKER]
    empty = tmp_path / "empty"
    empty.mkdir()
    prepare_demo_dir(empty)  # an empty folder is used as it is
    assert (empty / MARKER).is_file()
    f = tmp_path / "file"
    f.write_text("keep")
    import pytest

    from seqrl.config import ConfigError
    with pytest.raises(ConfigError, match="not a folder"):
        prepare_demo_dir(f)
    assert f.read_text() == "keep"


def test_demo_help_says_it_never_empties_a_foreign_folder(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "never emptied" in " ".join(capsys.readouterr().out.split())
