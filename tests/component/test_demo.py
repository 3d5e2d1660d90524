"""`seqrl demo` plumbing on a few steps (its learning is shown by the real demo and the e2e tests)."""

from seqrl.cli import main


def test_demo_runs_every_stage_and_writes_the_report(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["demo", "--out", str(out), "--quick", "--sft.steps=3", "--sft.task.n_test=4", "--sft.task.n_train=64",
                 "--grpo.steps=1", "--grpo.batch_size=16", "--grpo.micro_batch_size=16", "--grpo.task.n_train=64",
                 "--grpo.task.n_test=4", "--grpo.eval.samples=0"])
    assert code == 0
    report = (out / "report.md").read_text()
    assert "| metric | untrained | after SFT | after GRPO |" in report
    for name in ("stages.png", "sft/plots/sft.png", "grpo/plots/grpo.png", "sft/config.yaml", "grpo/metrics.jsonl"):
        assert (out / name).is_file(), name


def test_demo_rejects_overrides_outside_its_stages(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "d"), "--steps=3"]) == 2
    assert "overrides must start with sft. or grpo." in capsys.readouterr().err
