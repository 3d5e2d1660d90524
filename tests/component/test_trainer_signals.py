"""SIGTERM / SIGINT in the PRM, RM, PPO, STaR and VLA trainers: the first signal saves the step (STaR: the
iteration) reached and exits 143 / 130 naming that checkpoint, ``--resume`` repeats the uninterrupted run
exactly; a second signal stops at once and says what is lost.

Signals are sent to this process from inside the loop (`check_finite`, once per optimizer update: the
`FiniteCheck`s in `seqrl.training.run`, the run loop's and the sampled learners'; STaR's as each
fine-tune starts),
so the real handlers run. Also `start_run`'s side of it: a one-process trainer refuses torchrun, and under torchrun a signal to one RM process stops every process at the same step.
"""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import safetensors.torch
import torch

import seqrl.training.run as plumbing
from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.models.config import ModelConfig
from seqrl.training.run import RunInterrupted
from seqrl.utils.checkpoint import list_checkpoints, verify_checkpoint
from seqrl.utils.metrics import read_metrics


def _weights(checkpoint) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(checkpoint / "model.safetensors")


def _same_weights(a, b) -> bool:
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _records(run, key: str) -> list[tuple[int, float]]:
    return [(r["step"], r[key]) for r in read_metrics(run / "metrics.jsonl") if key in r]


def _run(name: str, out, **kw) -> RunConfig:
    return RunConfig(name=name, out_dir=str(out), seed=1, progress=False, log_every=1, save_every=0, keep_last=5, bf16=False,
                     **kw)


def _interrupted(train, cfg, on_nth_call, module, at: int, *signums: int, name: str = "check_finite") -> RunInterrupted:
    """`train(cfg)` with `signums` sent to this process in the `at`-th call (1-based) of `module.<name>`."""
    # the handlers the process had before (SIGINT is SIG_IGN, not Python's default, in a background job)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with on_nth_call.monkeypatch.context() as patch:
        on_nth_call(module, name, at, lambda: [os.kill(os.getpid(), signum) for signum in signums], patch)
        with pytest.raises(RunInterrupted) as caught:
            train(cfg)
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored
    return caught.value


def _check_stop_and_resume(train, make_cfg, on_nth_call, module, tmp_path, loss_key: str, signum: int,
                           at: int, last: int, updates: int = 1) -> None:
    """Whole run vs one stopped by `signum` in step `at` and resumed: same final weights, same losses.
    `updates`: calls of ``module.check_finite`` per step (one per optimizer update)."""
    whole = make_cfg(tmp_path / "whole")
    train(whole)
    cut = make_cfg(tmp_path / "cut")
    e = _interrupted(train, cut, on_nth_call, module, (at - 1) * updates + 1, signum)
    run = cut.run.dir
    assert e.exit_code == 128 + signum
    assert (f"stopped by {signal.Signals(signum).name} after step {at}; newest complete checkpoint: "
            f"{run / f'checkpoint-{at}'} (resume with --resume)") == e.message
    assert [s for s, _ in list_checkpoints(run)] == [at]
    verify_checkpoint(run / f"checkpoint-{at}")
    resumed = make_cfg(tmp_path / "cut", resume=True)
    train(resumed)
    assert _same_weights(whole.run.dir / f"checkpoint-{last}", run / f"checkpoint-{last}")
    assert _records(run, loss_key) == _records(whole.run.dir, loss_key) and len(_records(run, loss_key)) == last


# ---- PRM ------------------------------------------------------------------------------------------

def _prm_cfg(out, resume: bool = False):
    from seqrl.algos.prm import PRMConfig

    return PRMConfig(run=_run("p", out, resume=resume), model=ModelConfig(preset="tiny", max_seq_len=48),
                     task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=32, n_test=8),
                     optim=OptimConfig(lr=1e-3, warmup_steps=1), steps=4, batch_size=4)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_prm_saves_the_step_reached_and_resume_repeats_the_run(tmp_path, on_nth_call, signum):
    import seqrl.algos.prm as prm

    _check_stop_and_resume(prm.train, _prm_cfg, on_nth_call, plumbing, tmp_path, "loss/prm", signum, at=2, last=4)


def test_prm_second_signal_stops_at_once_and_says_no_checkpoint_exists(tmp_path, on_nth_call):
    import seqrl.algos.prm as prm

    cfg = _prm_cfg(tmp_path)
    e = _interrupted(prm.train, cfg, on_nth_call, plumbing, 2, signal.SIGTERM, signal.SIGTERM)
    assert e.exit_code == 143
    assert e.message == f"stopped at once by a second SIGTERM; no complete checkpoint in {cfg.run.dir}"
    assert list_checkpoints(cfg.run.dir) == []


# ---- RM -------------------------------------------------------------------------------------------

def _rm_cfg(out, resume: bool = False):
    import json

    from seqrl.algos.rm import PreferenceDataConfig, RMConfig

    data = out.parent / "prefs.jsonl"
    if not data.exists():
        rng = random.Random(0)
        rows = []
        for _ in range(40):
            a, b = rng.randint(0, 49), rng.randint(0, 49)
            rows.append({"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + rng.choice([-1, 1, 10]))})
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return RMConfig(run=_run("rm", out, resume=resume), model=ModelConfig(preset="tiny", max_seq_len=32),
                    data=PreferenceDataConfig(path=str(data), heldout_frac=0.2),
                    optim=OptimConfig(lr=1e-3, warmup_steps=1), steps=4, batch_size=4, micro_batch_size=2)


def test_rm_saves_the_step_reached_and_resume_repeats_the_run(tmp_path, on_nth_call):
    import seqrl.algos.rm as rm

    _check_stop_and_resume(rm.train, _rm_cfg, on_nth_call, plumbing, tmp_path, "loss/bt", signal.SIGTERM, at=3, last=4)


# ---- PPO ------------------------------------------------------------------------------------------

def _ppo_cfg(out, resume: bool = False):
    from seqrl.algos.ppo import PPOConfig, SamplingConfig
    from seqrl.evaluation import EvalConfig

    return PPOConfig(run=_run("p", out, resume=resume), model=ModelConfig(preset="tiny", max_seq_len=64),
                     task=TaskConfig(name="arith", n_train=32, n_test=2),
                     optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"),
                     eval=EvalConfig(max_new_tokens=2, samples=0), sampling=SamplingConfig(max_new_tokens=4),
                     steps=3, batch_size=8, group_size=4, micro_batch_size=8)


def test_ppo_saves_policy_and_critic_at_the_step_reached_and_resume_repeats_the_run(tmp_path, on_nth_call):
    import seqrl.algos.ppo as ppo

    cfg = _ppo_cfg(tmp_path)  # the learner's update checks each optimizer update (`FiniteCheck`)
    _check_stop_and_resume(ppo.train, _ppo_cfg, on_nth_call, plumbing, tmp_path, "loss/value", signal.SIGTERM, at=2,
                           last=3, updates=cfg.num_iterations * cfg.minibatches)
    run = tmp_path / "cut" / "p"
    assert [s for s, _ in list_checkpoints(run / "critic")] == [2, 3]  # the critic saved beside the policy
    assert _same_weights(tmp_path / "whole" / "p" / "critic" / "checkpoint-3", run / "critic" / "checkpoint-3")


# ---- VLA ------------------------------------------------------------------------------------------

def _vla_cfg(out, resume: bool = False):
    from seqrl.algos.vla import VLAConfig, VLADataConfig, VLAEvalConfig
    from seqrl.models.vla import VLAModelConfig

    return VLAConfig(run=_run("v", out, resume=resume), data=VLADataConfig(dataset="quick:GoToRedBallGrey", quick_episodes=6),
                     model=VLAModelConfig(hidden_size=16, n_layer=1, n_head=2, context_len=3, n_fusion=1, dropout=0.1),
                     optim=OptimConfig(lr=3e-3, warmup_steps=1), eval=VLAEvalConfig(episodes=0), steps=4, batch_size=4)


def test_vla_saves_the_step_reached_and_resume_repeats_the_run(tmp_path, on_nth_call):
    import seqrl.algos.vla as vla

    _check_stop_and_resume(vla.train, _vla_cfg, on_nth_call, plumbing, tmp_path, "loss/action", signal.SIGINT, at=2, last=4)


# ---- STaR -----------------------------------------------------------------------------------------

def _scripted(policy, prompts, n, params):
    """A stand-in sampler: answers ``a+b=`` right with probability 0.6 (seeded by the call's seed)."""
    from seqrl.data.arithmetic import addition_steps
    from seqrl.types import format_completion

    rng, texts = random.Random(params.seed), []
    for ids in prompts:
        question = policy.tokenizer.decode(ids, skip_special_tokens=True).partition(" hint: ")[0]
        a, b = (int(x) for x in question.rstrip("=").split("+"))
        texts += [format_completion(addition_steps(a, b), str(a + b + (rng.random() >= 0.6))) for _ in range(n)]
    return SimpleNamespace(texts=texts, finish_reasons=["stop"] * len(texts), num_generated_tokens=10 * len(texts))


def _star_cfg(out, resume: bool = False):
    from seqrl.algos.star import BaseConfig, STaRConfig
    from seqrl.evaluation import EvalConfig

    return STaRConfig(run=_run("s", out, resume=resume), model=ModelConfig(preset="tiny", max_seq_len=64),
                      base=BaseConfig(examples=8, hinted=4, steps=2, batch_size=4),
                      task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=8, n_test=4),
                      optim=OptimConfig(lr=1e-3, warmup_steps=1), eval=EvalConfig(max_new_tokens=8),
                      iterations=3, max_new_tokens=8, finetune_steps=2, batch_size=4)


def _star_records(run) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")}
            for r in read_metrics(run / "metrics.jsonl")]


@pytest.mark.parametrize("signals", [1, 2])
def test_star_stops_after_the_iteration_or_at_once_saying_what_is_lost_and_resume_repeats_the_run(
        tmp_path, monkeypatch, on_nth_call, signals):
    import seqrl.algos.star as star

    monkeypatch.setattr(star, "generate", _scripted)
    whole = _star_cfg(tmp_path / "whole")
    star.train(whole)
    cut = _star_cfg(tmp_path / "cut")
    e = _interrupted(star.train, cut, on_nth_call, star, 3, *[signal.SIGTERM] * signals,
                     name="finetune")  # the fine-tune of iteration 2 (the first is the base's)
    run = cut.run.dir
    assert e.exit_code == 143
    if signals == 1:  # iteration 2 finishes and is saved
        assert e.message == (f"stopped by SIGTERM after iteration 2; newest complete checkpoint: {run / 'checkpoint-2'} "
                             f"(resume with --resume)")
        assert [s for s, _ in list_checkpoints(run)] == [0, 1, 2]
    else:  # iteration 2's work is lost; its checkpoint was never started
        assert e.message == (f"stopped at once by a second SIGTERM during iteration 2, whose work is lost; newest "
                             f"complete checkpoint: {run / 'checkpoint-1'} (--resume restarts iteration 2 from it)")
        assert [s for s, _ in list_checkpoints(run)] == [0, 1]
    star.train(_star_cfg(tmp_path / "cut", resume=True))
    assert _same_weights(whole.run.dir / "checkpoint-3", run / "checkpoint-3")
    assert _star_records(run) == _star_records(whole.run.dir)


# ---- start_run ------------------------------------------------------------------------------------

@pytest.mark.parametrize("make_cfg", [_prm_cfg, _vla_cfg], ids=["prm", "vla"])
def test_a_one_process_trainer_under_torchrun_is_refused_before_its_run_folder_exists(tmp_path, monkeypatch, make_cfg):
    import seqrl.algos.prm as prm
    import seqrl.algos.vla as vla

    cfg = make_cfg(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"runs in one process \(WORLD_SIZE=2\); start it without torchrun"):
        (prm if make_cfg is _prm_cfg else vla).train(cfg)
    assert not cfg.run.dir.exists()


def _rm_stop_worker(rank: int, world: int, port: int, out: str) -> None:
    """One torchrun-like process of a 4-step RM run; only rank 1 gets SIGTERM, during step 2."""
    import seqrl.algos.rm as rm

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    real, calls = plumbing.check_finite, []

    def hooked(*args, **kwargs):
        calls.append(1)
        if rank == 1 and len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    plumbing.check_finite = hooked
    cfg = _rm_cfg(Path(out) / "runs")
    cfg.run.device = "cpu"
    try:
        rm.train(cfg)
        result = "finished"
    except RunInterrupted as e:
        result = f"{e.exit_code} {e.message}"
    Path(out, f"rank{rank}.txt").write_text(result)


def test_rm_under_torchrun_a_signal_to_one_process_stops_every_process_at_the_same_step(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _rm_cfg(tmp_path / "runs")  # writes the preference file once, before the processes read it
    mp.spawn(_rm_stop_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    run = tmp_path / "runs" / "rm"
    for r in (0, 1):
        assert (tmp_path / f"rank{r}.txt").read_text() == (
            f"143 stopped by SIGTERM after step 2; newest complete checkpoint: {run / 'checkpoint-2'} (resume with --resume)")
    assert [s for s, _ in list_checkpoints(run)] == [2]
    verify_checkpoint(run / "checkpoint-2")


@pytest.mark.parametrize("algo,fn,loss_key", [("rm", "bradley_terry_loss", "loss/bt"), ("prm", "batch_loss", "loss/prm")])
def test_rm_and_prm_skip_a_non_finite_update_and_count_it(tmp_path, monkeypatch, algo, fn, loss_key):
    import importlib

    module = importlib.import_module(f"seqrl.algos.{algo}")
    real, calls = getattr(module, fn), [0]

    def poisoned(*args, **kwargs):  # the second call (RM: after the step-0 evaluation; PRM: step 2) turns NaN
        calls[0] += 1
        out = real(*args, **kwargs)
        return (out[0] * float("nan"), *out[1:]) if calls[0] == 2 else out

    monkeypatch.setattr(module, fn, poisoned)
    cfg = {"rm": _rm_cfg, "prm": _prm_cfg}[algo](tmp_path / "runs")
    cfg.run.on_nonfinite = "skip_step"
    final = module.train(cfg)
    rows = [r for r in read_metrics(cfg.run.dir / "metrics.jsonl") if loss_key in r]
    counts = [r["stats/skipped_updates"] for r in rows]
    assert counts == sorted(counts) and counts[-1] == 1
    assert sum(r[loss_key] is None for r in rows) == 1 and final[loss_key] is not None
    assert json.loads((cfg.run.dir / "checkpoint-4" / "trainer_state.json").read_text())["skipped_updates"] == 1
