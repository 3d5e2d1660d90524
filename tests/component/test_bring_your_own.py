"""A user's own reward, task, dataset columns and prompt: named in the config, reaching the trainer."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch

from seqrl import cli
from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.grpo import GRPOConfig, GRPOLearner, SamplingConfig, train
from seqrl.data import get_task
from seqrl.data.jsonl import DatasetFormatError, JsonlTask
from seqrl.evaluation import EvalConfig
from seqrl.models.lm import ModelConfig, Policy, build_model, load_policy
from seqrl.models.tokenizer import build_char_tokenizer
from seqrl.prompts import PromptConfig, render_prompt
from seqrl.rewards.combine import RewardSpec, build_reward, build_rewards, score_completions
from seqrl.rewards.user import UserReward
from seqrl.types import Problem, RewardResult
from seqrl.utils.metrics import read_metrics

ROWS = [{"question": f"{a}+{b}=", "answer": str(a + b), "unit": "apples" if a % 2 else "pears", "level": a % 3,
         "split": "test" if a < 12 else "train"} for a in range(10, 40) for b in (1, 2)]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh working directory with its own import path (modules written here are importable)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("byo_"):
            del sys.modules[name]


def _write_module(where, name: str, source: str) -> None:
    (where / f"{name}.py").write_text(textwrap.dedent(source))


def _dataset(where) -> str:
    path = where / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    return f"jsonl:{path}"


def _cfg(where, rewards, **kw) -> GRPOConfig:
    base = dict(
        run=RunConfig(name="byo", out_dir=str(where / "runs"), seed=1, log_every=1, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=96),
        task=TaskConfig(name=_dataset(where), kwargs={"split_field": "split"}, n_train=40, n_test=4),
        optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"),
        eval=EvalConfig(max_new_tokens=8),
        sampling=SamplingConfig(max_new_tokens=8),
        steps=2, batch_size=8, group_size=4, rewards=rewards)
    return GRPOConfig(**{**base, **kw})


def test_a_trl_style_reward_by_import_path_gets_the_dataset_columns_and_trains(workdir):
    _write_module(workdir, "byo_trl", """
        CALLS = []

        def unit_bonus(completions, unit, prompts, answer, scale=1.0, **kwargs):
            CALLS.append({"n": len(completions), "unit": list(unit), "level": list(kwargs["level"]),
                          "prompts": list(prompts), "answer": list(answer), "scale": scale})
            return [scale * (len(c) % 2) for c in completions]
        """)
    spec = RewardSpec("byo_trl:unit_bonus", weight=0.5, kwargs={"scale": 2.0})
    metrics = train(_cfg(workdir, [RewardSpec("task"), spec]))
    calls = sys.modules["byo_trl"].CALLS
    assert len(calls) >= 2 and all(c["n"] == 8 for c in calls)  # every step's 8 completions, one call
    by_question = {r["question"]: r for r in ROWS}
    for call in calls:
        assert call["scale"] == 2.0
        for prompt, unit, level, answer in zip(call["prompts"], call["unit"], call["level"], call["answer"]):
            row = by_question[prompt]  # each row's own columns, aligned with its completions
            assert (unit, level, answer) == (row["unit"], row["level"], row["answer"])
    assert "reward/unit_bonus/mean" in metrics and "reward/accuracy/mean" in metrics


def test_a_seqrl_style_reward_by_import_path_gets_problems_with_their_columns(workdir):
    _write_module(workdir, "byo_native", """
        from seqrl.types import RewardResult

        SEEN = []

        def by_unit(problems, completions, bonus):
            SEEN.extend(p.metadata["unit"] for p in problems)
            return [RewardResult(bonus if p.metadata["unit"] == "apples" else 0.0, "unit") for p in problems]
        """)
    metrics = train(_cfg(workdir, [RewardSpec("byo_native:by_unit", kwargs={"bonus": 1.0})]))
    seen = sys.modules["byo_native"].SEEN
    assert len(seen) == 16 and set(seen) <= {"apples", "pears"}
    assert metrics["reward/by_unit/mean"] == pytest.approx(seen[8:].count("apples") / 8)  # the last step's


def test_none_scores_are_left_out_of_the_sum_and_counted():
    def half(completions, **kw):
        return [None if i % 2 else 1.0 for i in range(len(completions))]

    fn = UserReward(half, "half")
    problems = [Problem("q", "1")] * 4
    batch = score_completions({"half": (fn, 2.0), "const": (lambda p, c: [RewardResult(0.25)] * len(c), 1.0)},
                              problems, ["a", "b", "c", "d"])
    assert batch.total == [2.25, 0.25, 2.25, 0.25]
    assert batch.not_applicable == {"half": 2, "const": 0}
    assert batch.errors["half"] == 0 and batch.reasons["half"][1] == "not applicable"


def test_a_conversational_row_gives_trl_functions_messages_as_trl_does():
    seen = {}

    def fn(prompts, completions, **kw):
        seen.update(prompts=prompts, completions=completions)
        return [float(c[0]["content"] == "4") if isinstance(c, list) else 0.0 for c in completions]

    chat = Problem("2+2=", "4", messages=({"role": "user", "content": "2+2="},))
    out = UserReward(fn, "fn")([chat, Problem("2+2=", "4")], ["4", "4"])
    assert [r.score for r in out] == [1.0, 0.0]
    assert seen["prompts"] == [[{"role": "user", "content": "2+2="}], "2+2="]
    assert seen["completions"] == [[{"role": "assistant", "content": "4"}], "4"]


def test_a_callable_passed_to_train_is_a_reward(workdir):
    seen = []

    def length_reward(completions, **kw):
        seen.append(len(completions))
        return [min(len(c), 8) / 8 for c in completions]

    cfg = _cfg(workdir, [RewardSpec("task")])
    metrics = train(cfg, rewards={"length": (length_reward, 0.1)})
    assert seen and all(n == 8 for n in seen[:2]) and "reward/length/mean" in metrics
    with pytest.raises(ValueError, match="already has a reward named 'accuracy'"):
        build_rewards(cfg.rewards, cfg.task.build(), {"accuracy": length_reward})


def test_a_task_by_import_path(workdir):
    _write_module(workdir, "byo_task", """
        from seqrl.types import Problem, RewardResult, Task

        class Echo(Task):
            name = "echo"

            def __init__(self, word="hi"):
                self.word = word

            def problems(self, split, n, seed=0):
                return [Problem(f"say {self.word} {i}", self.word, uid=f"echo/{i}") for i in range(n)]

            def verify(self, problem, completion):
                return RewardResult(float(problem.answer in completion), "")

        def make(word="hi"):
            return Echo(word)

        NOT_A_TASK = 3
        """)
    task = get_task("byo_task:make", word="yo")
    assert task.problems("train", 2)[1].prompt == "say yo 1"
    assert get_task("byo_task:Echo").verify(Problem("", "hi"), "oh hi").score == 1.0
    with pytest.raises(ValueError, match="task.name 'byo_task:NOT_A_TASK' is not a Task class"):
        get_task("byo_task:NOT_A_TASK")


def test_every_extra_column_reaches_problem_metadata(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": 3, "unit": "kg", "tags": ["a"], "source": "web"}) + "\n")
    (p,) = JsonlTask(path, split_field=None).problems("train", -1) or JsonlTask(path).problems("test", -1)
    assert p.metadata["unit"] == "kg" and p.metadata["tags"] == ["a"] and p.metadata["answer"] == 3
    assert p.metadata["source"] == "web"  # the row's own column wins over the row location


def test_a_column_that_is_not_json_is_named(tmp_path):
    import datasets

    path = tmp_path / "d.parquet"
    datasets.Dataset.from_dict({"question": ["q"], "answer": ["1"], "blob": [b"\x00\x01"]}).to_parquet(str(path))
    with pytest.raises(DatasetFormatError, match=r"row 1: column 'blob' is not JSON-serialisable"):
        JsonlTask(path)


def test_a_code_dataset_with_a_tests_column_works_with_the_code_reward(tmp_path):
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"question": "Write add(a, b).", "tests": "assert add(1, 2) == 3\nassert add(0, 0) == 0"}) + "\n")
    task = JsonlTask(path, answer_field=None, split_field=None)
    (problem,) = [*task.problems("train", -1), *task.problems("test", -1)]
    reward = build_reward(RewardSpec("code", timeout_s=10), task)
    good, bad = reward([problem] * 2, ["```python\ndef add(a, b):\n    return a + b\n```",
                                       "```python\ndef add(a, b):\n    return a - b\n```"])
    assert good.parts["functional"] == 1.0 and bad.parts["functional"] < 1.0 and good.score > bad.score
    assert task.verify(problem, "<answer>1</answer>").reason.startswith("no gold answer")


def test_conversational_rows_go_to_the_chat_template_as_they_are(tmp_path):
    messages = [{"role": "system", "content": "Own system."}, {"role": "user", "content": "1+1="}]
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"prompt": messages, "answer": "2"}) + "\n")
    task = JsonlTask(path, prompt_field="prompt")
    (problem,) = [*task.problems("train", -1), *task.problems("test", -1)]
    assert problem.prompt == "1+1=" and list(problem.messages) == messages
    tok = _chat_tokenizer()
    text = render_prompt(tok, problem, PromptConfig(system="r1"))  # the row's own system turn is kept
    assert text == "<|system|>Own system.\n<|user|>1+1=\n<|assistant|>"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": [{"role": "user"}], "answer": "2"}) + "\n")
    with pytest.raises(DatasetFormatError, match=r"line 1: field 'prompt' item 0 must be"):
        JsonlTask(bad, prompt_field="prompt")


def _chat_tokenizer():
    tok = build_char_tokenizer()
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    return tok


def test_system_prompt_in_the_system_turn_or_folded_into_the_first_user_turn():
    problem = Problem("2+2=", "4", metadata={"unit": "kg"})
    cfg = PromptConfig(system="Think first.", template="{question} ({unit})")
    assert render_prompt(_chat_tokenizer(), problem, cfg) == "<|system|>Think first.\n<|user|>2+2= (kg)\n<|assistant|>"
    # the tiny presets' template has no system role: the system text leads the first user turn
    assert render_prompt(build_char_tokenizer(), problem, cfg) == "<|user|>Think first.\n\n2+2= (kg)<|assistant|>"
    assert render_prompt(build_char_tokenizer(), problem) == "<|user|>2+2=<|assistant|>"  # default unchanged


@pytest.fixture
def chat_model_dir(tmp_path):
    """A fake pretrained chat model folder: random weights, a local tokenizer whose template has a system role."""
    torch.manual_seed(0)
    tok = _chat_tokenizer()
    model = build_model(ModelConfig(preset="tiny", max_seq_len=256), len(tok), tok.pad_token_id, tok.eos_token_id)
    folder = tmp_path / "chat-model"
    Policy(model, tok).save(folder)
    return folder


def test_prompt_show_prints_the_system_prompt_in_the_system_turn_of_a_chat_model(chat_model_dir, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(f"model: {{path: {chat_model_dir}}}\nprompt: {{system: r1}}\n")
    assert cli.main(["prompt", "show", "--config", str(config), "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("<|system|>The assistant solves") == 2 and out.index("<|system|>") < out.index("<|user|>")
    assert "tokens) ---" in out
    policy = load_policy(ModelConfig(path=str(chat_model_dir)))
    policy.prompt = PromptConfig(system="r1")
    assert policy.prompt_text(Problem("1+1=", "2")).startswith("<|system|>The assistant solves")


def test_stop_strings_reach_the_sampler(workdir):
    cfg = _cfg(workdir, [RewardSpec("task")], sampling=SamplingConfig(max_new_tokens=8, stop=["</answer>"]))
    task = cfg.task.build()
    trainer = GRPOLearner(cfg, load_policy(cfg.model), task, task.problems("train", 8))
    assert trainer._params(0, 0).stop == ("</answer>",)
    with pytest.raises(ValueError, match="sampling.stop"):
        SamplingConfig(stop=[""])


@pytest.mark.parametrize("spec,match", [
    ({"name": "byo_missing_mod:f"}, r"rewards name 'byo_missing_mod:f': no module named 'byo_missing_mod'"),
    ({"name": "byo_bad:nope"}, r"rewards name 'byo_bad:nope': module 'byo_bad' has no attribute 'nope'"),
    ({"name": "byo_bad:wrong_signature"}, r"fits neither reward signature"),
    ({"name": "byo_bad:fine", "kwargs": {"unknown": 1}}, r"kwargs 'unknown' is not a parameter"),
    ({"name": "byo_bad:needs_column"}, r"requires 'difficulty', which is neither a column"),
    ({"name": "my rewards"}, r"an import path 'package.module:function'"),
])
def test_bad_reward_specs_are_one_line_naming_the_field_before_the_model_loads(workdir, monkeypatch, capsys, spec, match):
    _write_module(workdir, "byo_bad", """
        def wrong_signature(x, y, z):
            return []

        def fine(completions):
            return [0.0] * len(completions)

        def needs_column(completions, difficulty, **kwargs):
            return [0.0] * len(completions)
        """)
    _dataset(workdir)
    monkeypatch.setattr("seqrl.models.lm.load_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    (workdir / "c.yaml").write_text(json.dumps({"task": {"name": "jsonl:data.jsonl", "n_train": 8, "n_test": 2,
                                                         "kwargs": {"split_field": "split"}},
                                                "rewards": [spec], "run": {"out_dir": "runs"}}))
    assert cli.main(["train", "grpo", "--config", "c.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("seqrl: error: ")
    assert pytest.importorskip("re").search(match, err), err


def test_a_template_naming_a_missing_column_is_one_line_before_the_model_loads(workdir, monkeypatch, capsys):
    _dataset(workdir)
    monkeypatch.setattr("seqrl.algos.sft.load_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    rc = cli.main(["train", "sft", "--task.name=jsonl:data.jsonl", "--task.n_train=8", "--task.n_test=2",
                   "--task.kwargs.split_field=split",
                   "--run.out_dir=runs", "--prompt.template={question} in {units}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "prompt.template names column 'units'" in err and "unit" in err


def test_a_reward_function_that_raises_mid_run_is_isolated(workdir):
    _write_module(workdir, "byo_flaky", """
        def flaky(completions, **kwargs):
            if len(completions) > 1:
                raise RuntimeError("batch failed")
            if "7" in completions[0]:
                raise ZeroDivisionError("seven")
            return [1.0]
        """)
    fn = build_reward(RewardSpec("byo_flaky:flaky"), get_task("arith"))
    batch = score_completions({"flaky": (fn, 1.0)}, [Problem("q", "1")] * 3, ["a", "b7", "c"])
    assert batch.total == [1.0, 0.0, 1.0] and batch.errors["flaky"] == 1
    assert "ZeroDivisionError: seven" in batch.reasons["flaky"][1]


@pytest.mark.parametrize("body,why", [("raise SystemExit(0)", "raised SystemExit(0)"),
                                      ("import sys; sys.exit(3)", "raised SystemExit(3)"),
                                      ("import os; os._exit(0)", "called os._exit(0)")])
def test_a_reward_that_tries_to_end_the_trainer_is_an_error_not_an_exit(workdir, body, why):
    """Once it ended `seqrl train` with exit 0 after step 1 of 3 and no line."""
    _write_module(workdir, "byo_exits", f"""
        def exits(completions, **kwargs):
            if any("7" in c for c in completions):
                {body}
            return [1.0] * len(completions)
        """)
    fn = build_reward(RewardSpec("byo_exits:exits"), get_task("arith"))
    batch = score_completions({"exits": (fn, 1.0)}, [Problem("q", "1")] * 3, ["a", "b7", "c"])
    assert batch.total == [1.0, 0.0, 1.0] and batch.errors["exits"] == 1
    assert why in batch.reasons["exits"][1] and why in batch.first_error["exits"]


def test_a_forked_child_of_a_reward_still_exits(workdir):
    _write_module(workdir, "byo_forks", """
        import os
        def forks(completions, **kwargs):
            pid = os.fork()
            if pid == 0:
                os._exit(7)
            _, status = os.waitpid(pid, 0)
            return [float(os.waitstatus_to_exitcode(status))] * len(completions)
        """)
    fn = build_reward(RewardSpec("byo_forks:forks"), get_task("arith"))
    assert score_completions({"forks": (fn, 1.0)}, [Problem("q", "1")], ["a"]).total == [7.0]


def test_a_reward_that_fails_on_every_completion_stops_with_one_line_naming_it(workdir, monkeypatch, capsys):
    _write_module(workdir, "byo_broken", """
        def broken(completions, **kwargs):
            return ["high"] * len(completions)
        """)
    fn = build_reward(RewardSpec("byo_broken:broken"), get_task("arith"))
    with pytest.raises(ValueError, match=r"reward 'broken' \(rewards name 'byo_broken:broken'\) failed on all 2 "
                                         r"completions.*score of type str"):
        score_completions({"broken": (fn, 1.0)}, [Problem("q", "1")] * 2, ["a", "b"])
    monkeypatch.setattr(sys, "argv", ["seqrl"])
    # eval.samples=0: the first call is inside the training loop, where a ValueError would be a bug's traceback
    rc = cli.main(["train", "grpo", "--config", "arith_tiny_grpo", f"--run.out_dir={workdir / 'runs'}",
                   "--model.preset=tiny", "--model.path=null", "--steps=2", "--batch_size=4", "--group_size=2",
                   "--eval.every=0", "--eval.samples=0", "--run.progress=false", "--sampling.max_new_tokens=4",
                   "--rewards=[{name: 'byo_broken:broken'}]"])
    err = capsys.readouterr().err
    assert rc == 2 and "reward 'broken' (rewards name 'byo_broken:broken') failed on all" in err, err[-2000:]
    assert [line for line in err.splitlines() if "error" in line.lower()] == \
        [line for line in err.splitlines() if line.startswith("seqrl: error: reward 'broken'")], err[-2000:]


def test_reward_failures_continue_scores_zero_and_the_first_error_is_printed_and_logged(workdir, monkeypatch,
                                                                                        capsys):
    """reward_failures=continue keeps going past a function that fails on every completion; any
    failure's first message is printed once and logged per step beside reward/<fn>/errors."""
    _write_module(workdir, "byo_flaky", """
        def flaky(completions, **kwargs):
            return [1.0 / (len(c) % 2) for c in completions]
        """)
    fn = build_reward(RewardSpec("byo_flaky:flaky"), get_task("arith"))
    batch = score_completions({"flaky": (fn, 1.0)}, [Problem("q", "1")] * 2, ["ab", "cd"], stop_on_failure=False)
    assert batch.total == [0.0, 0.0] and batch.errors["flaky"] == 2
    assert "ZeroDivisionError" in batch.first_error["flaky"]
    monkeypatch.setattr(sys, "argv", ["seqrl"])
    rc = cli.main(["train", "grpo", "--config", "arith_tiny_grpo", f"--run.out_dir={workdir / 'runs'}",
                   "--run.name=flaky", "--run.log_every=1", "--model.preset=tiny", "--model.path=null", "--steps=2", "--batch_size=8",
                   "--group_size=2", "--eval.every=0", "--run.progress=false", "--sampling.max_new_tokens=4",
                   "--reward_failures=continue", "--rewards=[{name: 'byo_flaky:flaky'}]"])
    err = capsys.readouterr().err
    assert rc == 0, err[-2000:]
    assert err.count("warning: reward 'flaky' failed on") == 1 and "ZeroDivisionError" in err, err[-2000:]
    records = read_metrics(workdir / "runs" / "flaky" / "metrics.jsonl")
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 2 and all(r["reward/flaky/errors"] > 0 for r in steps)
    assert all("ZeroDivisionError" in r["reward/flaky/first_error"] for r in steps)


def test_log_completions_writes_a_sample_of_each_logged_step_with_every_reward(workdir, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["seqrl"])
    rc = cli.main(["train", "grpo", "--config", "arith_tiny_grpo", f"--run.out_dir={workdir / 'runs'}",
                   "--run.name=logged", "--run.log_every=1", "--run.log_completions=3", "--model.preset=tiny",
                   "--model.path=null", "--steps=2", "--batch_size=8", "--group_size=2", "--eval.every=0",
                   "--run.progress=false", "--sampling.max_new_tokens=4",
                   "--rewards=[{name: task}, {name: format, weight: 0.5}]"])
    assert rc == 0
    records = read_metrics(workdir / "runs" / "logged" / "completions.jsonl")
    assert [r["step"] for r in records] == [1, 1, 1, 2, 2, 2]
    assert len({r["prompt"] for r in records if r["step"] == 1}) == 3  # spread over the step's prompts
    for r in records:
        assert {"prompt", "answer", "completion", "reward", "reward/accuracy", "reason/accuracy",
                "reward/format", "reason/format"} <= set(r)
        assert r["reward"] == pytest.approx(r["reward/accuracy"] + 0.5 * r["reward/format"])


def test_a_score_beyond_float32_is_an_error_naming_the_reward():
    batch = score_completions({"huge": (lambda p, c: [RewardResult(1e308), RewardResult(2.0)], 1.0)},
                              [Problem("q", "1")] * 2, ["a", "b"])
    assert batch.total == [0.0, 2.0] and batch.errors["huge"] == 1 and "beyond float32" in batch.reasons["huge"][0]


def test_a_child_the_reward_forks_still_ends_on_sys_exit():
    """Only the trainer's own process turns SystemExit into an error: a child the reward forked and that
    called sys.exit used to get RewardExit and carry on as a second trainer."""
    import os

    from seqrl.rewards.user import _call_without_exits

    def reward():
        child = os.fork()
        if child == 0:
            raise SystemExit(3)  # the reward's child ends here
        _, status = os.waitpid(child, 0)
        return os.waitstatus_to_exitcode(status)

    trainer = os.fork()  # a stand-in for the trainer, so that nothing of this test process is forked twice
    if trainer == 0:
        try:
            os._exit(_call_without_exits("r", reward))  # the trainer: the child's exit code
        except SystemExit as e:  # the child: SystemExit reached it, as it should
            os._exit(e.code if isinstance(e.code, int) else 97)
        except BaseException:  # noqa: BLE001 — RewardExit in the child: the bug
            os._exit(99)
    _, status = os.waitpid(trainer, 0)
    assert os.waitstatus_to_exitcode(status) == 3
