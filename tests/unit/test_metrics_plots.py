"""Metrics JSONL logging, plots, progress bars and the single-process dist helpers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from seqrl.utils import dist
from seqrl.utils.metrics import MetricsLogger, read_metrics
from seqrl.utils.plots import plot_bars, plot_metrics
from seqrl.utils.progress import progress_bar, track

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_logger_writes_plain_numbers_and_reads_back(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    with MetricsLogger(path) as logger:
        logger.log(1, {"loss/policy": torch.tensor(0.25), "stats/kl": np.float32(0.5), "eval/n": np.int64(3)})
        logger.log(2, {"loss/policy": 0.125, "phase": "grpo", "perf/ok": True})
        # flushed after each line: readable while the logger is open
        assert [r["step"] for r in read_metrics(path)] == [1, 2]
    records = read_metrics(path)
    assert [{k: v for k, v in r.items() if k != "time"} for r in records] == [
        {"step": 1, "loss/policy": 0.25, "stats/kl": 0.5, "eval/n": 3},
        {"step": 2, "loss/policy": 0.125, "phase": "grpo", "perf/ok": True},
    ]
    assert all(isinstance(r["time"], float) for r in records)
    assert type(records[1]["loss/policy"]) is float and type(records[0]["eval/n"]) is int


def test_nan_and_inf_become_null_with_key_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(path) as logger:
        logger.log(1, {"loss": float("nan"), "grad_norm": torch.tensor(float("inf")), "ok": 1.0})
    line = path.read_text()
    assert "NaN" not in line and "Infinity" not in line
    record = json.loads(line)
    assert record["loss"] is None and record["grad_norm"] is None and record["ok"] == 1.0


def test_bad_metric_values_are_rejected_by_name(tmp_path):
    with MetricsLogger(tmp_path / "metrics.jsonl") as logger:
        with pytest.raises(TypeError, match="'loss'.*shape"):
            logger.log(1, {"loss": torch.ones(2)})
        with pytest.raises(TypeError, match="'cfg'"):
            logger.log(1, {"cfg": {"a": 1}})
        with pytest.raises(ValueError, match="reserved"):
            logger.log(1, {"step": 3})


def test_fresh_run_starts_empty_and_resume_drops_later_steps(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(path) as logger:
        for step in range(1, 6):
            logger.log(step, {"loss": float(step)})
    with open(path, "a") as f:
        f.write('{"step": 6, "lo')  # torn write from a crash
    with MetricsLogger(path, resume_step=3) as logger:
        assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
        logger.log(4, {"loss": 40.0})
    assert [(r["step"], r["loss"]) for r in read_metrics(path)] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]  # no temp file left

    with MetricsLogger(tmp_path / "new.jsonl", resume_step=10) as logger:  # resume without a file
        logger.log(11, {"loss": 1.0})
    assert [r["step"] for r in read_metrics(tmp_path / "new.jsonl")] == [11]

    MetricsLogger(path).close()  # a fresh run over an old file starts it empty
    assert read_metrics(path) == []


def test_read_metrics_names_a_corrupt_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 2: invalid JSON"):
        read_metrics(path)
    path.write_text('{"step": "one"}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 1: expected an object with an integer 'step'"):
        read_metrics(path)


def test_plot_metrics_writes_png(tmp_path):
    records = [
        {"step": s, "loss": math.exp(-s / 10), "reward": None if s % 7 == 0 else s / 30} for s in range(30)
    ]
    records.append({"step": 30, "eval/accuracy": 0.5})
    keys = ["loss", "reward", "eval/accuracy", "missing"]
    out = plot_metrics(records, keys, tmp_path / "plots" / "train.png", title="run")
    assert out == tmp_path / "plots" / "train.png"
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000
    assert [p.name for p in out.parent.iterdir()] == ["train.png"]  # no temp file left
    with pytest.raises(ValueError, match="none of the keys"):
        plot_metrics(records, ["missing"], tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_plot_bars_single_and_grouped(tmp_path):
    single = plot_bars(["greedy", "pass@8"], [0.25, 0.75], tmp_path / "single.png", "accuracy", "fraction")
    values = {"before": [0.1, 0.2], "after": [0.4, 0.6]}
    grouped = plot_bars(["greedy", "maj@8"], values, tmp_path / "grouped.png", "SFT", "acc")
    for out in (single, grouped):
        assert out.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="series 'after' has 1 values for 2 labels"):
        plot_bars(["a", "b"], {"before": [1, 2], "after": [1]}, tmp_path / "bad.png", "t", "y")


def test_progress_bar_off_a_terminal_prints_once(capsys):
    with progress_bar(4, "train") as bar:
        for i in range(4):
            bar.advance(loss=1.0 / (i + 1), phase="sft")
        bar.advance(0, loss=0.123456)
    assert bar.fields == {"loss": 0.123456, "phase": "sft"}
    captured = capsys.readouterr()
    assert captured.out == ""  # bars go to stderr
    assert captured.err.count("train") == 1 and "loss=0.1235" in captured.err and "4/4" in captured.err
    assert list(track(range(3), "eval", disable=True)) == [0, 1, 2]
    with progress_bar(None, "quiet", disable=True) as bar:
        bar.advance(loss=1.0)
    assert capsys.readouterr().err == ""


def test_dist_helpers_single_process_and_env(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert (dist.rank(), dist.world_size(), dist.local_rank(), dist.is_main()) == (0, 1, 0, True)
    dist.init_distributed()
    dist.barrier()
    t = torch.tensor([1.0, 3.0])
    assert dist.all_reduce_mean(t) is t and torch.equal(t, torch.tensor([1.0, 3.0]))
    assert dist.seed_for_rank(7) == 7
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert (dist.rank(), dist.is_main(), dist.seed_for_rank(7)) == (2, False, 9)
    with pytest.raises(RuntimeError, match="init_distributed"):
        dist.barrier()
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK must be an integer"):
        dist.rank()


def test_trackers_receive_the_values_as_written(tmp_path):
    import numpy as np
    import torch

    from seqrl.utils.metrics import MetricsLogger

    class Seen:
        def __init__(self):
            self.records = []

        def log(self, step, values):
            self.records.append((step, values))

    seen = Seen()
    with MetricsLogger(tmp_path / "m.jsonl", trackers=[seen]) as logger:
        logger.log(1, {"a": np.float32(0.5), "b": torch.tensor(2.0), "c": float("nan"), "d": "text"})
    assert seen.records == [(1, {"a": 0.5, "b": 2.0, "c": None, "d": "text"})]
    assert all(type(v) in (float, type(None), str) for v in seen.records[0][1].values())
