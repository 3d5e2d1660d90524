"""Math-Shepherd labels: exact hard/soft values, resume without recomputation, the rollout-engine path, the CLI."""

from __future__ import annotations

import json

import pytest

from seqrl.data import ArithmeticTask
from seqrl.data.stepwise import read_stepwise, split_steps
from seqrl.search.labels import LabelConfig, label_problems
from seqrl.search.simulated import NoisyArithmeticPolicy


class Scripted:
    """Solutions are the gold ones; from a prefix of t steps, (4 − 2t + 1) of 4 continuations are right
    for t = 1, 2 (3 then 1), the others wrong. Records every question it is asked about."""

    def __init__(self):
        self.questions = []

    def continue_texts(self, questions, prefixes, n, seed):
        task = ArithmeticTask(digits=2)
        self.questions += questions
        out = []
        for q, pre in zip(questions, prefixes):
            gold = NoisyArithmeticPolicy()._problem(q)
            if not pre:
                out.append([gold.target] * n)
                continue
            t = len(split_steps(pre))  # think steps in the prefix
            tail = gold.target[len(pre):]
            right = 4 - 2 * t + 1 if t <= 2 else n
            out.append([tail if i < right else tail.replace(f">{gold.answer}<", ">-1<") for i in range(n)])
            assert task.verify(gold, pre + out[-1][0]).correct
        return out, 3 * n * len(questions)


def test_hard_and_soft_labels_exact(tmp_path):
    task = ArithmeticTask(digits=2)
    problems = [p for p in task.problems("train", 20, seed=0) if len(p.steps) == 2][:2]
    stats = label_problems(Scripted(), task, problems, LabelConfig(n=1, rollouts=4), tmp_path / "l.jsonl", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "l.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert row["soft"] == [0.75, 0.25, 1.0] and row["hard"] == [True, True, True]  # answer step: its outcome
        assert row["labels"] == row["soft"] and row["truth"] == [True, True, True]
    assert stats.label_acc_hard == 1.0 and stats.label_acc_soft == pytest.approx(4 / 6)  # 0.25 < ½ misses
    assert read_stepwise(tmp_path / "l.jsonl")[0].labels == (0.75, 0.25, 1.0)  # a valid stepwise file


class InFormat:
    """A policy that learned the house format on two-step solutions: after a step separator it writes a
    step, after ``</think>`` the answer; from a correct prefix it is right, except that a third think
    step (which it never saw) leads it astray."""

    def continue_texts(self, questions, prefixes, n, seed):
        out = []
        for q, pre in zip(questions, prefixes):
            gold = NoisyArithmeticPolicy()._problem(q)
            if pre.endswith("</think>"):
                out.append([f"<answer>{gold.answer}</answer>"] * n)
            elif len(split_steps(pre)) >= len(gold.steps):  # one step too many: a made-up step, a wrong answer
                out.append([f"1=1</think><answer>{int(gold.answer) + 1}</answer>"] * n)
            else:
                out.append([gold.target[len(pre):]] * n)
        return out, n * len(questions)


def test_label_accuracy_against_the_step_truth_and_the_prefix_truth():
    from seqrl.search.labels import LabelStats

    stats = LabelStats()
    # steps: right, wrong, right value after the wrong one, wrong answer. Math-Shepherd says: the prefix can
    # succeed after step 1 only.
    stats.count([True, False, False, False], [1.0, 0.0, 0.25, 0.0], [True, False, True, False])
    assert stats.truth_steps == 4
    assert (stats.hard_correct, stats.soft_correct) == (3, 3)  # step 3 disagrees with the step truth
    assert (stats.hard_correct_prefix, stats.soft_correct_prefix) == (4, 4)  # prefix truth T, F, F, F
    stats.count([True, True], [0.75, 0.5], [True, True])
    assert stats.accuracies() == {"label_acc_hard": 5 / 6, "label_acc_soft": 5 / 6,
                                  "label_acc_hard_prefix": 1.0, "label_acc_soft_prefix": 1.0}


def test_the_last_think_step_is_continued_in_format():
    """Continued after a separator, a policy in format invents a step and labels a right last step wrong
    (P(reach gold) 0.006 in format vs 0.657, gsm): after the last think step the prefix closes </think>."""
    task = ArithmeticTask(digits=2)
    problems = [p for p in task.problems("train", 20, seed=0) if len(p.steps) == 2][:3]
    import tempfile
    from pathlib import Path

    out = Path(tempfile.mkdtemp()) / "l.jsonl"
    label_problems(InFormat(), task, problems, LabelConfig(n=1, rollouts=2), out, progress=False)
    for row in map(json.loads, out.read_text().splitlines()):
        assert row["hard"] == [True, True, True] and row["truth"] == [True, True, True], row


def test_resume_skips_finished_problems_and_matches_an_uninterrupted_run(tmp_path):
    task = ArithmeticTask(digits=2)
    problems = task.problems("train", 5, seed=0)
    cfg = LabelConfig(n=2, rollouts=3, problems_per_round=1)
    label_problems(NoisyArithmeticPolicy(), task, problems, cfg, tmp_path / "full.jsonl", progress=False)
    label_problems(NoisyArithmeticPolicy(), task, problems[:3], cfg, tmp_path / "part.jsonl", progress=False)  # "interrupted"

    class Counting(NoisyArithmeticPolicy):
        asked: list = []

        def continue_texts(self, questions, prefixes, n, seed):
            self.asked.extend(questions)
            return super().continue_texts(questions, prefixes, n, seed)

    again = Counting()
    stats = label_problems(again, task, problems, cfg, tmp_path / "part.jsonl", progress=False)
    assert set(again.asked) == {problems[3].prompt, problems[4].prompt}  # 0–2 not recomputed
    assert stats.problems_skipped == 3 and stats.problems_done == 2
    assert (tmp_path / "part.jsonl").read_text() == (tmp_path / "full.jsonl").read_text()
    meta = json.loads((tmp_path / "part.jsonl.meta.json").read_text())
    assert meta["done"] == [0, 1, 2, 3, 4] and meta["generated_tokens"] > 0


def test_resume_refuses_another_problem_set(tmp_path):
    task = ArithmeticTask(digits=2)
    cfg = LabelConfig(n=1, rollouts=1)
    label_problems(NoisyArithmeticPolicy(), task, task.problems("train", 2, seed=0), cfg, tmp_path / "l.jsonl", progress=False)
    with pytest.raises(ValueError, match="does not match this task/split/seed"):
        label_problems(NoisyArithmeticPolicy(), task, task.problems("train", 2, seed=1), cfg, tmp_path / "l.jsonl", progress=False)


def test_label_accuracy_grows_with_rollouts(tmp_path):
    task = ArithmeticTask(digits=3)
    problems = task.problems("train", 60, seed=0)
    acc = {}
    for k in (1, 8):
        s = label_problems(NoisyArithmeticPolicy(0.2, 0.05), task, problems, LabelConfig(n=2, rollouts=k),
                           tmp_path / f"k{k}.jsonl", progress=False)
        acc[k] = s.label_acc_hard
    assert acc[8] > acc[1] + 0.03  # one rollout misses prefixes that can still succeed


def test_rollout_engine_path_and_cli(tmp_path, tiny_policy, capsys):
    from seqrl.cli import main

    tiny_policy.save(tmp_path / "policy")
    rc = main(["data", "prm-labels", "--policy", str(tmp_path / "policy"), "--task", "arith", "--problems", "2",
               "--n", "2", "--rollouts", "2", "--max-new-tokens", "12", "--out", str(tmp_path / "l.jsonl")])
    assert rc == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["problems_done"] == 2 and line["generated_tokens"] > 0
    meta = json.loads((tmp_path / "l.jsonl.meta.json").read_text())
    assert meta["done"] == [0, 1]


def test_search_bon_cli_writes_json_table_and_plot(tmp_path, capsys):
    from seqrl.cli import main

    rc = main(["search", "bon", "--policy", "simulated:0.3", "--scorer", "oracle", "--task", "arith",
               "--problems", "10", "--budget", "1,4", "--seeds", "0,1", "--out", str(tmp_path / "bon")])
    assert rc == 0 and "| majority |" in capsys.readouterr().out
    res = json.loads((tmp_path / "bon" / "bon.json").read_text())
    assert res["budgets"] == [1, 4] and len(res["accuracy_per_seed"]["first"]) == 2
    assert (tmp_path / "bon" / "bon.png").is_file()
    assert main(["search", "bon", "--policy", "simulated", "--scorer", "what", "--out", str(tmp_path / "x")]) == 2
    # an earlier result is never overwritten silently; --force replaces it; the default folder is under runs/
    again = ["search", "bon", "--policy", "simulated:0.3", "--scorer", "oracle", "--problems", "4", "--budget", "1",
             "--seeds", "0", "--out", str(tmp_path / "bon")]
    capsys.readouterr()
    assert main(again) == 2 and "already holds bon.json" in capsys.readouterr().err
    assert main([*again, "--force"]) == 0 and "wrote " in capsys.readouterr().out
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(again[:-2]) == 0 and (tmp_path / "runs" / "search" / "bon_arith" / "bon.json").is_file()
    finally:
        os.chdir(cwd)


def test_simulated_policy_errors():
    task = ArithmeticTask(digits=3)
    problems = task.problems("test", 20, seed=0)
    clean, _ = NoisyArithmeticPolicy(step_error=0.0, answer_error=0.0).sample(problems, 2)
    assert all(t == p.target for p, ts in zip(problems, clean) for t in ts)
    slips, tokens = NoisyArithmeticPolicy(step_error=1.0, error="carry").sample(problems, 1, seed=3)
    assert tokens == sum(len(t[0]) for t in slips)
    from seqrl.data.stepwise import arith_step_truth, split_steps

    for p, (text,) in zip(problems, slips):
        steps = split_steps(text)
        assert not any(arith_step_truth(p, steps))  # every column slipped, and so did the answer
        for step in steps[:-1]:  # … yet each column's sum is right for its own terms
            lhs, _, value = step.rpartition("=")
            assert sum(int(x) for x in lhs.split("+")) == int(value)
    with pytest.raises(ValueError, match="must be 'value' or 'carry'"):
        NoisyArithmeticPolicy(error="typo")


def test_labels_and_search_ask_the_policy_as_its_run_trained_it(tmp_path, tiny_policy, monkeypatch):
    """`seqrl data prm-labels` / `seqrl search` once rendered prompts with the default rendering, not the
    `prompt` section the policy's run saved in its config.yaml."""
    import seqrl.search.labels as labels
    from seqrl.prompts import PromptConfig, saved_prompt

    ckpt = tmp_path / "run" / "checkpoint-1"
    tiny_policy.save(ckpt)
    (tmp_path / "run" / "config.yaml").write_text("prompt:\n  system: null\n  template: 'Q: {question} A:'\n")
    assert saved_prompt(str(ckpt)) == PromptConfig(template="Q: {question} A:")
    assert saved_prompt(str(tmp_path)) == PromptConfig()  # no run config: the default
    seen = []
    monkeypatch.setattr(labels, "label_problems", lambda policy, task, problems, *a, **k: (
        seen.append(policy.prompt_text(problems[0])), labels.LabelStats())[1])
    labels.cli_main(["--policy", str(ckpt), "--task", "arith", "--problems", "1", "--seed", "0", "--out", str(tmp_path / "l.jsonl")])
    assert seen and "Q: 47+56= A:" in seen[0], seen


def test_the_prm_pipeline_runs_on_gsm_from_a_yaml_and_the_cli(tmp_path, capsys):
    """Labels → PRM → search on a task other than arithmetic, as a user drives it: `seqrl data prm-labels`,
    `seqrl train prm --config <their YAML>`, `seqrl search beam` (issue 32: the pipeline once could not
    leave the arith presets)."""
    from seqrl.cli import main

    # a tiny policy that has seen the format for a few steps, so its solutions have steps to label
    assert main(["train", "sft", "--model.preset=tiny", "--model.max_seq_len=160", "--task.name=gsm",
                 "--task.n_train=400", "--task.n_test=10", "--steps=40", "--batch_size=16", "--optim.lr=3e-3",
                 "--eval.every=0", "--eval.max_new_tokens=8", "--run.save_every=0", "--run.progress=false",
                 f"--run.out_dir={tmp_path / 'runs'}", "--run.name=sft_gsm"]) == 0
    policy = tmp_path / "runs" / "sft_gsm" / "checkpoint-40"
    labels = tmp_path / "gsm_labels.jsonl"
    assert main(["data", "prm-labels", "--policy", str(policy), "--task", "gsm", "--problems", "6", "--n", "2",
                 "--rollouts", "2", "--max-new-tokens", "24", "--out", str(labels)]) == 0
    rows = [json.loads(line) for line in labels.read_text().splitlines()]
    assert len(rows) >= 6 and all(len(r["completions"]) == len(r["labels"]) for r in rows)  # ≤ 2 per problem
    assert any("buys" in r["prompt"] or "old" in r["prompt"] for r in rows)  # gsm word problems, not sums
    # a few rows a right step, so both labels are held out whatever the random policy wrote
    rows += [{"prompt": r["prompt"], "completions": ["2*3=6", "<answer>6</answer>"], "labels": [1.0, 1.0]}
             for r in rows[::2]]
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "prm.yaml").write_text(
        f"run: {{name: prm_gsm, out_dir: {tmp_path / 'runs'}, save_every: 0, progress: false}}\n"
        f"model: {{path: {policy}}}\n"
        f"data: {{path: {labels}, test_fraction: 0.5}}\n"
        "steps: 2\nbatch_size: 4\n")
    assert main(["train", "prm", "--config", str(tmp_path / "prm.yaml")]) == 0
    ckpt = tmp_path / "runs" / "prm_gsm" / "checkpoint-2"
    assert ckpt.is_dir()
    capsys.readouterr()
    out = tmp_path / "search"
    assert main(["search", "beam", "--policy", str(policy), "--scorer", f"prm:{ckpt}", "--task", "gsm",
                 "--problems", "3", "--budget", "2", "--beam-width", "2", "--max-new-tokens", "24",
                 "--seeds", "0", "--out", str(out)]) == 0
    assert "| beam |" in capsys.readouterr().out
    res = json.loads((out / "search.json").read_text())
    assert res["task"] == "gsm" and res["problems"] == 3 and res["scorer"] == f"prm:{ckpt}"
