"""Reward calls are bounded and isolated: confined worker processes, per-call time limits, a batch
budget, a size cap before parsing a program."""

from __future__ import annotations

import os
import uuid

import pytest

from seqrl.types import Problem
from seqrl.types import RewardResult
from seqrl.rewards.code import MAX_CODE_CHARS, check_static
from seqrl.rewards.combine import BoundedReward, RewardSpec, build_reward, score_completions
from seqrl.sandbox.workers import DEFAULT_PRELOAD, WorkerPool, reward_from_reply, shared_pool


def run_python_expr(text):  # module level: it pickles into a worker
    return eval(text)  # noqa: S307 — the point of the test: what model text could do in a scorer


def spin_on_loop(problems, completions):
    out = []
    for c in completions:
        while c == "loop":
            pass
        out.append(RewardResult(1.0 if c == "good" else 0.0, "" if c == "good" else "wrong"))
    return out


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(workers=2, memory_mb=256, preload=(*DEFAULT_PRELOAD, __name__))  # this module's functions
    yield p
    p.close()


def test_code_run_in_a_worker_cannot_write_files_or_connect(pool, tmp_path):
    target = tmp_path / f"pwned-{uuid.uuid4().hex}"
    calls = [f"__import__('os').system('touch {target}')",
             f"__import__('pathlib').Path('{target}').touch()",
             "__import__('socket').create_connection(('127.0.0.1', 22), timeout=1)"]
    outs = [pool.call(run_python_expr, (c,), timeout_s=5.0) for c in calls]
    assert not target.exists()
    assert outs[1].status == "error" and ("PermissionError" in outs[1].reason or "Read-only" in outs[1].reason)
    assert outs[2].status == "error"
    assert {"rlimits", "landlock"} <= set(pool.layers) or os.uname().sysname != "Linux"


def test_a_call_past_its_limit_is_a_timeout_and_the_worker_is_replaced(pool):
    before = pool.replaced
    out = pool.call(run_python_expr, ("9**9**9",), timeout_s=0.5)
    assert out.status == "timeout"
    assert pool.replaced == before + 1
    assert pool.call(run_python_expr, ("6*7",), timeout_s=5.0).value == {"value": 42}


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root (CI runs as root)")
def test_a_worker_cannot_reach_the_hosts_system_v_ipc(pool):
    import ctypes
    import secrets

    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x5EC1000 + secrets.randbelow(1 << 16)
    qid = libc.msgget(key, 0o1000 | 0o600)
    assert qid >= 0
    try:
        out = pool.call(run_python_expr, (f"__import__('ctypes').CDLL(None).msgget({key}, 0)",), timeout_s=5.0)
        assert out.value == {"value": -1}, out
    finally:
        libc.msgctl(qid, 0, None)  # IPC_RMID


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the seccomp filter is built for x86_64")
def test_a_worker_cannot_watch_files_with_inotify(pool):
    """Model text evaluated in a scorer cannot learn which files the host creates or opens."""
    expr = ("(lambda c: (lambda libc: [libc.inotify_init1(0), c.get_errno(), libc.syscall(253), c.get_errno()])"
            "(c.CDLL(None, use_errno=True)))(__import__('ctypes'))")
    out = pool.call(run_python_expr, (expr,), timeout_s=5.0)
    assert "seccomp" in pool.layers and out.value == {"value": [-1, 1, -1, 1]}, (pool.layers, out)  # EPERM


def test_a_memory_blow_up_is_an_error_in_the_worker(pool):
    out = pool.call(run_python_expr, ("bytearray(8 << 30)",), timeout_s=5.0)
    assert out.status == "error" and "MemoryError" in out.reason


def test_map_keeps_order_and_marks_calls_past_the_deadline(pool):
    outs = pool.map(run_python_expr, [(f"{i}*2",) for i in range(20)], timeout_s=5.0)
    assert [o.value["value"] for o in outs] == [2 * i for i in range(20)]
    late = pool.map(run_python_expr, [("1",), ("2",)], timeout_s=5.0, deadline=0.0)
    assert [o.status for o in late] == ["budget", "budget"]


@pytest.mark.parametrize("reply, score, reason", [
    ({"score": 1, "reason": "x", "parts": {"a": 1}}, 1.0, "x"),
    ({"score": "1"}, None, "malformed"),
    ({"value": [1]}, None, "not a reward"),
    ({"score": 0.5, "reason": "r" * 10_000, "parts": "junk"}, 0.5, "r" * 2000),
])
def test_worker_replies_are_checked_field_by_field(reply, score, reason):
    r = reward_from_reply(reply)
    if score is None:
        assert r.score != r.score and reason in r.reason  # NaN: counted as an error by the caller
    else:
        assert r.score == score and r.reason.startswith(reason) and len(r.reason) <= 2000


def test_reward_spec_timeouts_default_by_name_and_reject_nonsense():
    assert RewardSpec("math").timeout_s == 1.0
    assert RewardSpec("task").timeout_s == 2.0
    assert RewardSpec("format", timeout_s=0.25).timeout_s == 0.25
    with pytest.raises(ValueError, match="timeout_s"):
        RewardSpec("math", timeout_s=0)


def test_score_completions_scores_a_timeout_as_zero_and_counts_it(pool):
    fn = BoundedReward(spin_on_loop, timeout_s=0.5, pool=pool)
    probs = [Problem("q", "a")] * 4
    batch = score_completions({"spin": (fn, 1.0)}, probs, ["good", "loop", "bad", "good"])
    assert batch.scores["spin"] == [1.0, 0.0, 0.0, 1.0]
    assert batch.reasons["spin"][1].startswith("timeout")
    assert batch.timeouts["spin"] == 1 and batch.errors["spin"] == 0


def test_score_completions_past_its_budget_scores_zero_with_the_reason(pool):
    fn = BoundedReward(spin_on_loop, timeout_s=0.5, pool=pool)
    probs = [Problem("q", "a")] * 3
    batch = score_completions({"spin": (fn, 1.0), "plain": (spin_on_loop, 1.0)}, probs, ["good"] * 3, budget_s=0.0)
    assert batch.scores["spin"] == [0.0] * 3 and batch.scores["plain"] == [0.0] * 3
    assert set(batch.reasons["plain"]) == {"batch budget exhausted"}
    assert batch.over_budget == {"spin": 3, "plain": 3}


def test_built_in_math_reward_runs_bounded_in_workers_and_scores_as_before():
    fn = build_reward(RewardSpec("math"), task=None)
    assert isinstance(fn, BoundedReward) and fn.timeout_s == 1.0
    probs = [Problem("q", "5"), Problem("q", "5")]
    out = fn(probs, ["<answer>5</answer>", "<answer>6</answer>"])
    assert [r.score for r in out] == [1.0, 0.0]
    assert shared_pool() is shared_pool()


def test_a_program_over_the_size_cap_is_not_parsed():
    syntax, compiles, why = check_static("x = 1\n" * (MAX_CODE_CHARS // 6 + 1))
    assert (syntax, compiles) == (0.0, 0.0) and "too long" in why
    assert check_static("x = 1\n" * (MAX_CODE_CHARS // 6 - 1))[:2] == (1.0, 1.0)


def test_code_reward_extraction_runs_bounded_in_a_worker():
    from seqrl.rewards.code import MAX_COMPLETION_CHARS, CodeExecutionReward, CodeTests

    spec = CodeTests(io_cases=[[[1, 2], 3]], entry_point="add")
    reward = CodeExecutionReward(static_timeout_s=0.3)
    texts = ["```" * 30_000,  # 90 KB of fences: linear extraction, no program
             "x" * (MAX_COMPLETION_CHARS + 1),
             "```python\ndef add(a, b):\n    return a + b\n```"]
    fences, huge, good = reward.score_many(texts, [spec] * 3)
    assert fences.score == 0.0 and not fences.reason.startswith("timeout")
    assert huge.score == 0.0 and "completion too long" in huge.reason
    assert good.score == 1.0
    # past its limit, extraction + parsing is a timeout (a worker round trip alone takes over 1 ms)
    (late,) = CodeExecutionReward(static_timeout_s=1e-3).score_many(["x = 1\n" * 30_000], [spec])
    assert late.score == 0.0 and late.reason.startswith("timeout")


def test_a_worker_that_cannot_be_restarted_leaves_a_slot_that_restarts_later(pool, monkeypatch):
    real_start = pool._start

    def fail():
        raise RuntimeError("no fork today")

    monkeypatch.setattr(pool, "_start", fail)
    assert pool.call(run_python_expr, ("9**9**9",), timeout_s=0.3).status == "timeout"
    monkeypatch.setattr(pool, "_start", real_start)
    assert [o.value["value"] for o in pool.map(run_python_expr, [("1",), ("2",), ("3",)], timeout_s=5.0)] == [1, 2, 3]


def spin_forever(problems, completions):
    while True:
        pass


def test_grpo_counts_reward_timeouts_in_its_metrics(pool):
    import torch

    from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
    from seqrl.algos.grpo import GRPOConfig, GRPOLearner, SamplingConfig
    from seqrl.models import ModelConfig, load_policy

    cfg = GRPOConfig(run=RunConfig(name="g", out_dir="runs", seed=1, progress=False),
                     model=ModelConfig(preset="tiny", max_seq_len=64), task=TaskConfig(name="arith", n_train=16, n_test=4),
                     optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"),
                     sampling=SamplingConfig(max_new_tokens=4), steps=1, batch_size=8, group_size=4)
    torch.manual_seed(0)
    task = cfg.task.build()
    trainer = GRPOLearner(cfg, load_policy(cfg.model), task, task.problems("train", 16, 0))
    trainer.reward_fns["spin"] = (BoundedReward(spin_forever, timeout_s=0.2, pool=pool), 1.0)
    batch = trainer.collect(0)
    assert batch.metrics["reward/spin/timeouts"] == 8.0
    assert batch.metrics["reward/spin/mean"] == 0.0


@pytest.mark.skipif(os.geteuid() != 0, reason="the read-only mount namespace needs root")
def test_without_landlock_a_root_worker_still_writes_no_file(tmp_path):
    p = WorkerPool(workers=1, memory_mb=256, preload=(*DEFAULT_PRELOAD, __name__))
    try:
        p.spec["confine"] = None  # as on a kernel without Landlock (and seccomp)
        p.spec["uid"] = None  # and no spare uid to drop to: the worker stays root
        p._replace(p._acquire())
        assert "landlock" not in p.layers and "mountns_ro" in p.layers and "setuid" not in p.layers
        target = tmp_path / "F"
        out = p.call(run_python_expr, (f"__import__('pathlib').Path('{target}').touch()",), timeout_s=5.0)
        assert out.status == "error" and "Read-only file system" in out.reason
        assert not target.exists()
    finally:
        p.close()


def test_a_task_that_cannot_reach_a_worker_fails_at_build_time_naming_it():
    from seqrl.data.arithmetic import ArithmeticTask

    task = ArithmeticTask()
    task.hook = lambda: None  # lambdas do not pickle
    with pytest.raises(ValueError, match=r"task 'arith.*cannot be sent to a reward worker"):
        build_reward(RewardSpec("task"), task)


@pytest.mark.skipif(os.geteuid() != 0, reason="capabilities are dropped by a root worker")
def test_a_root_worker_cannot_raise_its_memory_limit(pool):
    assert {"setuid", "no_capabilities"} & set(pool.layers)
    out = pool.call(run_python_expr, ("__import__('resource').setrlimit(__import__('resource').RLIMIT_AS, (-1, -1))",),
                    timeout_s=5.0)
    assert out.status == "error" and ("not allowed" in out.reason or "Operation not permitted" in out.reason)


def test_a_script_without_a_main_guard_builds_its_rewards_once(tmp_path):
    """Workers must not re-run the user's script (multiprocessing's main-module fix-up): a script
    without ``if __name__ == "__main__":`` that builds a reward would otherwise start again in the
    forkserver and in every worker."""
    import subprocess
    import sys

    script = tmp_path / "train_me.py"
    script.write_text(
        "print('SCRIPT BODY RAN', flush=True)\n"
        "from seqrl.types import Problem\n"
        "from seqrl.data import get_task\n"
        "from seqrl.rewards.combine import RewardSpec, build_reward\n"
        "fn = build_reward(RewardSpec('math'), get_task('arith'))\n"
        "print('SCORES', [r.score for r in fn([Problem('q', '5')] * 2, ['<answer>5</answer>', '<answer>4</answer>'])], flush=True)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("SCRIPT BODY RAN") == 1
    assert "SCORES [1.0, 0.0]" in out.stdout


def loaded(names):  # module level: it pickles into a worker
    import sys

    return [n for n in names if n in sys.modules]


def test_every_worker_starts_with_math_verifys_parser_loaded():
    """math-verify's first call loads sympy and its LaTeX grammar (≈ 0.75 s idle, seconds on a loaded
    machine), over the math reward's 1 s limit: the forkserver's warm-up must go through math-verify
    itself (its former pairs were settled before it, so a fresh worker loaded nothing), and a worker
    says whether it is warm."""
    from seqrl.sandbox import _warmup

    pool = WorkerPool(workers=1, preload=(*DEFAULT_PRELOAD, __name__))
    try:
        assert pool.warm is True
        assert pool.call(loaded, (list(_warmup.LOADED),), timeout_s=5.0).value == {"value": list(_warmup.LOADED)}
    finally:
        pool.close()


def math_or_spin(problems, completions):  # module level: it pickles into a worker
    """The math reward, except that a completion "loop" spins: an answer no guard catches."""
    from seqrl.rewards.math import math_answer_reward

    spin_on_loop(problems, completions)
    return math_answer_reward(problems, completions)


def test_answers_after_a_batch_of_timeouts_are_scored_not_timed_out():
    """Each timeout replaces its worker; the replacement must be warm (and its first item gets the
    start-up allowance), or correct answers scored next time out in turn."""
    pool = WorkerPool(workers=1, preload=(*DEFAULT_PRELOAD, __name__))
    try:
        reward = BoundedReward(math_or_spin, 1.0, pool=pool)
        bombs = reward([Problem("q", "5")] * 2, ["loop"] * 2)
        assert [r.reason for r in bombs] == ["timeout: over 1 s"] * 2 and pool.replaced == 2
        good = reward([Problem("q", "12")] * 8, ["<answer>\\sqrt{144}</answer>"] * 8)
        assert [r.score for r in good] == [1.0] * 8, [r.reason for r in good]
    finally:
        pool.close()


def test_a_forked_child_exiting_through_atexit_leaves_the_trainers_workers_alive():
    """A user's reward that forks: the child's exit ran the pool's atexit hook and killed the parent's
    reward workers (the same pids)."""
    pool = shared_pool()
    pids = [w.proc.pid for w in list(pool._idle.queue) if w is not None]
    assert pids
    child = os.fork()
    if child == 0:  # the child ends as a Python program does: its atexit hooks run, then it exits
        import atexit

        try:
            atexit._run_exitfuncs()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    for pid in pids:
        os.kill(pid, 0)  # still alive: raises ProcessLookupError otherwise
    import operator

    assert pool.call(operator.mul, (6, 7), timeout_s=5.0).value == {"value": 42}
