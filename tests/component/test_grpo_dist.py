"""torchrun data parallelism: two processes take the same optimizer step as one process on the same batch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import torch
import torch.multiprocessing as mp

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.grpo import GRPOBatch, GRPOConfig, GRPOLearner, LossConfig, SamplingConfig
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig, load_policy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cfg(agg: str, mu: int, advantage: str = "grpo") -> GRPOConfig:
    return GRPOConfig(
        run=RunConfig(name="d", seed=3, progress=False, bf16=False),  # the spawned processes too
        model=ModelConfig(preset="tiny", max_seq_len=64),
        task=TaskConfig(name="arith", n_train=64, n_test=4),
        optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"),
        eval=EvalConfig(max_new_tokens=8),
        sampling=SamplingConfig(max_new_tokens=8),
        loss=LossConfig(agg=agg, beta=0.04, advantage=advantage),
        steps=1, batch_size=16, group_size=4, micro_batch_size=3, num_iterations=mu,
        # the padded forward computes each row alone, so splitting the batch over processes changes no
        # bit; the shared-prompt forward regroups rows (equal to rounding, tests/component/
        # test_shared_prompt_forward.py), which AdamW's step would carry past this test's 1e-10
        shared_prompt_forward="off",
    )


def _trainer(cfg: GRPOConfig) -> GRPOLearner:
    torch.manual_seed(0)
    policy = load_policy(cfg.model)
    policy.model.double()
    task = cfg.task.build()
    trainer = GRPOLearner(cfg, policy, task, task.problems("train", 64, 0))
    trainer.ref.double()
    return trainer


def _rows(batch: GRPOBatch, rows: slice) -> GRPOBatch:
    return GRPOBatch(batch.prompt_ids[rows], batch.completion_ids[rows], batch.completion_mask[rows],
                     batch.loss_mask[rows], batch.sampler_logprobs[rows], batch.rewards[rows],
                     batch.advantages[rows])


CASES = [("seq_mean_token_mean", 1), ("token_mean", 2), ("seq_mean_token_sum_norm", 1)]


def _worker(rank: int, world: int, port: int, folder: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from seqrl.utils import dist

    dist.init_distributed()
    for i, (agg, mu) in enumerate(CASES):
        trainer = _trainer(_cfg(agg, mu))
        batch = torch.load(f"{folder}/batch{i}.pt", weights_only=False)
        half = len(batch.rewards) // world
        trainer.train_step(_rows(batch, slice(rank * half, (rank + 1) * half)))
        if rank == 0:
            torch.save([p.detach() for p in trainer.policy.model.parameters()], f"{folder}/out{i}.pt")
    torch.distributed.destroy_process_group()


def test_two_processes_take_the_same_step_as_one_process(tmp_path):
    expected = []
    for i, (agg, mu) in enumerate(CASES):
        single = _trainer(_cfg(agg, mu))
        torch.manual_seed(5)
        batch = single.collect(0)
        batch.rewards = torch.arange(16, dtype=torch.float64) % 3
        batch.advantages = batch.rewards - 1.0  # non-trivial, and some rows exactly 0
        torch.save(batch, tmp_path / f"batch{i}.pt")
        before = [p.detach().clone() for p in single.policy.model.parameters()]
        single.train_step(batch)
        expected.append([p.detach() for p in single.policy.model.parameters()])
        assert any(not torch.equal(a, b) for a, b in zip(before, expected[-1]))  # the step moved the weights
    # one pair of processes for all cases (each start imports torch and transformers)
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    for i, case in enumerate(CASES):
        got = torch.load(tmp_path / f"out{i}.pt")
        for a, b in zip(got, expected[i]):
            assert torch.allclose(a, b, atol=1e-10, rtol=0), case


def test_torchrun_trains_with_two_processes_and_resumes(tmp_path):
    out = tmp_path / "runs"
    base = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(_free_port()),
            "-m", "seqrl", "train", "grpo", "--model.preset=tiny", "--model.max_seq_len=64", "--task.n_train=64",
            "--task.n_test=4", "--eval.max_new_tokens=8", "--sampling.max_new_tokens=8", "--batch_size=16",
            "--group_size=4", "--micro_batch_size=8", "--run.save_every=2", "--run.log_every=1",
            "--run.progress=false", f"--run.out_dir={out}", "--run.name=tr", "--run.bf16=false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.run([*base, "--steps=2"], capture_output=True, text=True, env=env, timeout=240)
    assert first.returncode == 0, first.stderr[-3000:]
    state = json.loads((out / "tr" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["prompt_cursor"] == [4, 4]  # 16 / 4 = 4 prompts per step, 2 per process, 2 steps
    second = subprocess.run([*base, "--steps=3", "--run.resume=true"], capture_output=True, text=True, env=env,
                            timeout=240)
    assert second.returncode == 0, second.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (out / "tr" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3]  # one log, written by rank 0 only
    assert (out / "tr" / "checkpoint-3" / "trainer_state.json").is_file()
