"""run.report_to: TensorBoard and wandb (offline) receive a run's metrics and completions, written by the
real libraries and read back from their files; a resumed run's TensorBoard curve has one point a step."""

from __future__ import annotations

import pytest

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.config import ConfigError


def _sft(tmp_path, steps: int, report_to: list[str], resume: bool = False):
    from seqrl.algos.sft import SFTConfig
    from seqrl.evaluation import EvalConfig
    from seqrl.models import ModelConfig

    return SFTConfig(run=RunConfig(name="t", out_dir=str(tmp_path), progress=False, log_every=1, save_every=2,
                                   keep_last=5, report_to=report_to, resume=resume),
                     model=ModelConfig(preset="tiny", max_seq_len=64), task=TaskConfig(name="arith", n_train=16, n_test=2),
                     optim=OptimConfig(lr=1e-3, warmup_steps=0), eval=EvalConfig(max_new_tokens=2), steps=steps,
                     batch_size=4)


def _scalars(folder, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _wandb_history(path) -> dict[int, dict[str, str]]:
    """The history records of an offline wandb run file (a log of 32 KiB blocks, each record a 7-byte
    header — crc, length, type: full 1, first 2, middle 3, last 4 — then a protobuf `Record`)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, chunks, part = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (length == 0 and kind == 0):
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind in (2, 3):
            part += chunk
        elif kind == 4:
            chunks.append(part + chunk)
            part = b""
    history = {}
    for chunk in chunks:
        record = pb.Record()
        record.ParseFromString(chunk)
        if record.WhichOneof("record_type") == "history":
            history[record.history.step.num] = {i.key or "/".join(i.nested_key): i.value_json
                                                for i in record.history.item}
    return history


def test_tensorboard_and_offline_wandb_receive_the_metrics(tmp_path, monkeypatch, capsys):
    from seqrl.algos.sft import train
    from seqrl.utils.metrics import read_metrics

    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc credentials: wandb goes offline and says so
    train(_sft(tmp_path, 3, ["tensorboard", "wandb"]))
    run = tmp_path / "t"
    losses = [(r["step"], r["loss/sft"]) for r in read_metrics(run / "metrics.jsonl") if "loss/sft" in r]
    got = _scalars(run / "tensorboard", "loss/sft")
    assert [s for s, _ in got] == [1, 2, 3] and all(abs(v - dict(losses)[s]) < 1e-6 for s, v in got)
    assert "wandb: no credentials" in capsys.readouterr().err
    offline = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 1
    history = _wandb_history(offline[0])
    assert {s: float(h["loss/sft"]) for s, h in history.items() if "loss/sft" in h} == pytest.approx(dict(losses))


def test_a_resumed_run_continues_its_tensorboard_curve_without_a_fork(tmp_path):
    import shutil

    from seqrl.algos.sft import train

    train(_sft(tmp_path, 3, ["tensorboard"]))
    first = dict(_scalars(tmp_path / "t" / "tensorboard", "loss/sft"))
    shutil.rmtree(tmp_path / "t" / "checkpoint-3")  # as if the run had died after logging step 3
    train(_sft(tmp_path, 4, ["tensorboard"], resume=True))  # from checkpoint-2: steps 3 and 4 again
    got = _scalars(tmp_path / "t" / "tensorboard", "loss/sft")
    assert [s for s, _ in got] == [1, 2, 3, 4]  # step 3's first value purged, not doubled
    assert dict(got)[2] == first[2]


def test_grpo_completions_reach_tensorboard_as_text(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from seqrl.algos.grpo import GRPOConfig, SamplingConfig, train

    cfg = GRPOConfig(run=RunConfig(name="g", out_dir=str(tmp_path), progress=False, log_every=1,
                                   log_completions=2, report_to=["tensorboard"]),
                     task=TaskConfig(name="arith", n_train=16, n_test=2), sampling=SamplingConfig(max_new_tokens=6),
                     steps=2, batch_size=4, group_size=2)
    train(cfg)
    acc = EventAccumulator(str(tmp_path / "g" / "tensorboard"))
    acc.Reload()
    assert "reward/total/mean" in acc.Tags()["scalars"]
    texts = acc.Tensors("completions/text_summary")
    assert [t.step for t in texts] == [1, 2]
    assert "completion" in texts[0].tensor_proto.string_val[0].decode()


def test_report_to_names_are_checked_and_trl_spellings_accepted(tmp_path):
    from seqrl.algos.config import trl_overrides
    from seqrl.algos.grpo_config import GRPOConfig
    from seqrl.config import from_dict

    with pytest.raises(ValueError, match="unknown tracker 'mlflow'; one of tensorboard, wandb"):
        RunConfig(report_to=["mlflow"])
    with pytest.raises(ConfigError, match="run.report_to"):
        from_dict(GRPOConfig, {"run": {"report_to": ["comet"]}})
    assert GRPOConfig(report_to="none").run.report_to == []
    assert GRPOConfig(report_to="tensorboard").run.report_to == ["tensorboard"]
    assert GRPOConfig(report_to="all").run.report_to == ["tensorboard", "wandb"]
    assert trl_overrides(["--report_to=wandb"], {"run"}) == ["--run.report_to=[wandb]"]
    assert trl_overrides(["--report_to", "none"], {"run"}) == ["--run.report_to=[]"]
