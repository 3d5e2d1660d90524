"""torchrun data parallelism for SFT and DT: two processes (gloo, CPU) take the same steps as one process
with the same global batch (each process keeps its half of every batch and the gradients are summed)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.dt import DataConfig, DTConfig, DTEvalConfig, DTModelConfig
from seqrl.models.loading import load_policy_checkpoint
from seqrl.algos.sft import EvalConfig, SFTConfig
from seqrl.models import ModelConfig, load_policy
from seqrl.utils.metrics import read_metrics

STEPS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sft_cfg(out: str, name: str) -> SFTConfig:
    return SFTConfig(run=RunConfig(name=name, out_dir=out, seed=2, progress=False, log_every=1, device="cpu", bf16=False),
                     model=ModelConfig(preset="tiny", max_seq_len=64), task=TaskConfig(name="arith_mixed", n_train=64, n_test=2),
                     optim=OptimConfig(lr=3e-3, warmup_steps=0, schedule="constant"),
                     eval=EvalConfig(max_new_tokens=4, batch_size=2), steps=STEPS, batch_size=8, grad_accum=2)


def _dt_cfg(out: str, name: str) -> DTConfig:
    cfg = DTConfig(run=RunConfig(name=name, out_dir=out, seed=1, log_every=1, progress=False, device="cpu", bf16=False),
                   data=DataConfig(dataset="quick:medium-replay", quick_steps=400),
                   model=DTModelConfig(hidden_size=32, n_layer=1, n_head=1, context_len=4, max_ep_len=200, dropout=0.0),
                   eval=DTEvalConfig(episodes=0), return_scale=10.0, steps=STEPS, batch_size=8)
    cfg.optim.warmup_steps, cfg.optim.lr = 0, 1e-3
    return cfg


def _assert_same_steps(triples, folder, prefix: str, keys: list[str]) -> None:
    diff = max(float((x - y).abs().max()) for x, y, _ in triples)
    moved = max(float((x - f).abs().max()) for x, _, f in triples if f is not None) if triples[0][2] is not None else None
    assert diff <= (0.01 * moved if moved is not None else 1e-4), (prefix, diff, moved)
    if moved is not None:
        assert moved > 1e-3  # the steps moved the weights
    one, two = (read_metrics(folder / f"{prefix}{n}" / "metrics.jsonl") for n in (1, 2))
    for key in keys:
        a, b = [r[key] for r in one if key in r], [r[key] for r in two if key in r]
        assert len(a) == len(b) == STEPS and a == pytest.approx(b, rel=1e-5), (prefix, key, a, b)


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from seqrl.algos import dt, sft

    sft.train(_sft_cfg(out, "sft2"))
    dt.train(_dt_cfg(out, "dt2"))
    torch.distributed.destroy_process_group()


def test_two_processes_take_the_same_sft_and_dt_steps_as_one(tmp_path):
    from seqrl.algos import dt, sft

    out = str(tmp_path)
    sft.train(_sft_cfg(out, "sft1"))
    dt.train(_dt_cfg(out, "dt1"))
    mp.spawn(_worker, args=(2, _free_port(), out), nprocs=2, join=True)  # one pair of processes for both

    # fp32 sums in another order differ in the last bits; Adam's first steps (≈ lr·sign(g)) magnify that
    # where |g| is near eps, so the weights agree to 1 % of how far the steps moved them, and the logged
    # loss and gradient norm of every step agree to float rounding.
    fresh = load_policy(ModelConfig(preset="tiny", max_seq_len=64)).model.state_dict()
    one = load_policy(ModelConfig(path=str(tmp_path / "sft1" / f"checkpoint-{STEPS}"))).model.state_dict()
    two = load_policy(ModelConfig(path=str(tmp_path / "sft2" / f"checkpoint-{STEPS}"))).model.state_dict()
    _assert_same_steps([(one[k], two[k], fresh[k]) for k in one], tmp_path, "sft", ["loss/sft", "stats/grad_norm"])

    a, _ = load_policy_checkpoint(tmp_path / "dt1" / f"checkpoint-{STEPS}")
    b, _ = load_policy_checkpoint(tmp_path / "dt2" / f"checkpoint-{STEPS}")
    _assert_same_steps([(x, y, None) for x, y in zip(a.state_dict().values(), b.state_dict().values())], tmp_path,
                       "dt", ["loss/action", "stats/grad_norm"])
    # rank 0 alone logged: one record per step (plus step 0), with the device and precision chosen
    lines = (tmp_path / "dt2" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == STEPS + 1 and '"run/device": "cpu"' in lines[0] and '"run/bf16": 0.0' in lines[0]


def test_a_batch_that_does_not_split_over_the_processes_is_an_error(monkeypatch, tmp_path):
    from seqrl.utils import dist

    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match=r"batch_size \(8\) must be divisible by the number of processes \(3\)"):
        dist.shard(8)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert dist.shard(8) == slice(4, 8)
