"""PRM/ORM: label placement, context overflow, scoring layout, save → load exactness, the trainer's resume."""

from __future__ import annotations

import json

import pytest
import torch

from seqrl.algos.prm import PRMConfig, PRMDataConfig, collate, encode_examples, train
from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.data.stepwise import StepExample, write_stepwise
from seqrl.models.lm import ModelConfig
from seqrl.models.prm import ProcessRewardModel, StepsTooLongError
from seqrl.types import STEP_SEP


@pytest.fixture
def prm():
    torch.manual_seed(0)
    return ProcessRewardModel.build(ModelConfig(preset="tiny", max_seq_len=48))


def test_labels_sit_on_the_last_token_of_each_step(prm):
    # distinguishable steps and labels: the label at each step's separator, nothing elsewhere
    row = StepExample("12+34=", ("AAA", "BBBBB", "<answer>C</answer>"), (0.25, 0.5, 0.75))
    (ex,), dropped = encode_examples(prm, [row])
    assert dropped == 0
    tok = prm.tokenizer
    prompt = prm.prompt_ids("12+34=")
    assert ex.ids[: len(prompt)] == prompt
    pieces, start = [], len(prompt)
    for end in ex.ends:
        pieces.append(tok.decode(ex.ids[start:end + 1]))
        start = end + 1
    assert start == len(ex.ids)  # the pieces cover the solution
    assert pieces == ["<think>AAA\n\n", "BBBBB</think>", "<answer>C</answer>"]
    # the label sits on the step's closing token: the separator, </think>, </answer>
    assert [tok.convert_ids_to_tokens(ex.ids[e]) for e in ex.ends] == [STEP_SEP, "</think>", "</answer>"]
    batch = collate([ex], tok.pad_token_id)
    targets = batch["targets"][0]
    assert targets[ex.ends].tolist() == [0.25, 0.5, 0.75]
    assert int((targets >= 0).sum()) == 3  # no label anywhere else (prompt, step bodies)


def test_orm_labels_only_the_last_step(prm):
    orm = ProcessRewardModel(prm.model, prm.tokenizer, kind="orm")
    (ex,), _ = encode_examples(orm, [StepExample("1+1=", ("a", "b", "c"), (1.0, 0.0, 0.5))])
    assert ex.labels == [0.5] and len(ex.ends) == 1 and ex.ends[0] == len(ex.ids) - 1


def test_steps_longer_than_the_context_are_counted_or_refused(prm):
    long_row = StepExample("1+1=", tuple("x" * 10 for _ in range(8)), (1.0,) * 8)  # 8 × 12 tokens > 48
    short_row = StepExample("1+1=", ("2",), (1.0,))
    examples, dropped = encode_examples(prm, [long_row, short_row])
    kept = len(examples[0].ends)
    assert 0 < kept < 8 and dropped == 8 - kept and max(examples[0].ends) < prm.max_seq_len
    orm = ProcessRewardModel(prm.model, prm.tokenizer, kind="orm")
    examples, dropped = encode_examples(orm, [long_row, short_row])
    assert len(examples) == 1 and dropped == 8  # the ORM's label is at the end: the whole solution goes
    with pytest.raises(ValueError, match=r"row 1: \d+ tokens with its 8 steps, more than the model's context of 48"):
        encode_examples(prm, [long_row], overlong="error")
    with pytest.raises(StepsTooLongError, match="solution 0 has"):
        prm.score(["1+1="], [list(long_row.completions)])


def test_one_forward_scores_equal_per_prefix_scores(prm):
    steps = ["7+5=12", "4+8+1=13", "<answer>132</answer>"]
    together = prm.score_steps("47+85=", steps)
    # causal: a step's score ignores later steps (a prefix ending in a think step reads the same
    # pieces as the full solution up to the last think step, which closes with </think> instead)
    assert prm.score_steps("47+85=", steps[:1]) == pytest.approx(together[:1], abs=1e-5)
    longer = prm.score_steps("47+85=", ["7+5=12", "4+8+1=13", "9+9=18", "<answer>1</answer>"])
    assert longer[:2] == pytest.approx(prm.score_steps("47+85=", steps[:2]), abs=1e-5)
    # batching with other (longer and shorter) solutions changes nothing
    batch = prm.score(["1+1=", "47+85=", "9+9="], [["1+1=2"] * 4, steps, "<answer>18</answer>"], batch_size=3)
    assert batch[1] == pytest.approx(together, abs=1e-5) and len(batch[0]) == 4 and len(batch[2]) == 1
    assert prm.score(["1+1="], ["no steps here"]) == [[]]


@pytest.mark.parametrize("head", ["2class", "scalar"])
def test_save_load_gives_identical_scores(tmp_path, head):
    torch.manual_seed(0)
    prm = ProcessRewardModel.build(ModelConfig(preset="tiny", max_seq_len=48), kind="prm", head=head)
    with torch.no_grad():
        prm.model.score.bias.add_(0.3)  # a head that differs from its initialisation
    solutions = [["7+5=12", "<answer>12</answer>"], ["3+4=8", "<answer>8</answer>"]]
    before = prm.score(["7+5=", "3+4="], solutions)
    prm.save(tmp_path / "m")
    loaded = ProcessRewardModel.load(tmp_path / "m")
    assert (loaded.kind, loaded.head) == ("prm", head)
    assert loaded.score(["7+5=", "3+4="], solutions) == before  # exact


def test_load_refuses_a_plain_causal_lm(tmp_path, tiny_policy):
    tiny_policy.save(tmp_path / "lm")
    with pytest.raises(ValueError, match="no seqrl_prm entry"):
        ProcessRewardModel.load(tmp_path / "lm")


def test_backbone_from_a_policy_checkpoint_keeps_its_weights(tmp_path, tiny_policy):
    tiny_policy.save(tmp_path / "lm")
    prm = ProcessRewardModel.build(ModelConfig(path=str(tmp_path / "lm")), kind="orm", head="scalar")
    a = tiny_policy.model.model.embed_tokens.weight
    assert torch.equal(prm.model.model.embed_tokens.weight, a)


def _cfg(tmp_path, steps, **kw) -> PRMConfig:
    return PRMConfig(run=RunConfig(name="p", out_dir=str(tmp_path), progress=False, log_every=2, save_every=3, keep_last=5),
                     model=ModelConfig(preset="tiny", max_seq_len=48),
                     task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=64, n_test=16),
                     optim=OptimConfig(lr=1e-3, warmup_steps=2, schedule="constant"), steps=steps, batch_size=8, **kw)


def test_train_writes_metrics_and_a_loadable_checkpoint(tmp_path):
    out = train(_cfg(tmp_path, 3))
    assert {"loss/prm", "stats/step_accuracy", "eval/auc", "eval/step_accuracy", "eval/loss"} <= out.keys()
    first = json.loads((tmp_path / "p" / "metrics.jsonl").read_text().splitlines()[0])
    assert 0 < first["data/label_balance"] < 1 and first["data/dropped_steps"] == 0
    prm = ProcessRewardModel.load(tmp_path / "p" / "checkpoint-3")
    assert prm.kind == "prm" and len(prm.score_steps("12+34=", ["4+2=6", "<answer>46</answer>"])) == 2


def test_resume_repeats_an_uninterrupted_run(tmp_path):
    # constant schedule: the cosine one depends on `steps`, which the interrupted run changes
    full = train(_cfg(tmp_path / "a", 6))
    train(_cfg(tmp_path / "b", 3))
    cfg = _cfg(tmp_path / "b", 6)
    cfg.run.resume = True
    resumed = train(cfg)
    assert resumed["loss/prm"] == pytest.approx(full["loss/prm"], abs=1e-6)
    assert resumed["eval/auc"] == pytest.approx(full["eval/auc"], abs=1e-9)


def test_train_from_a_stepwise_file_orm(tmp_path):
    rows = [StepExample(f"{i}+1=", (f"{i}+1={i + 1 + (i % 2)}", f"<answer>{i + 1}</answer>"), (float(i % 2 == 0), 1.0))
            for i in range(20)]
    path = write_stepwise(tmp_path / "rows.jsonl", rows)
    out = train(_cfg(tmp_path, 2, kind="orm", data=PRMDataConfig(path=str(path), test_fraction=0.2)))
    assert "loss/orm" in out and out["eval/label_balance"] == 1.0  # the ORM sees only the last labels


def test_a_stepwise_file_is_split_by_problem():
    """Math-Shepherd files hold several solutions per problem: none of a held-out problem's rows trains."""
    from seqrl.algos.prm import split_by_prompt

    rows = [StepExample(f"{i % 10}+1=", (f"s{i}",), (1.0,)) for i in range(40)]  # 10 problems x 4 rows
    train_rows, test_rows = split_by_prompt(rows, 0.2, seed=0)
    held = {r.prompt for r in test_rows}
    assert len(held) == 2 and len(test_rows) == 8 and len(train_rows) == 32
    assert not held & {r.prompt for r in train_rows}
    assert split_by_prompt(rows, 0.2, seed=0) == (train_rows, test_rows)  # seeded
    assert split_by_prompt(rows[:1] * 3, 0.5, seed=0)[1] == []  # one problem: nothing to hold out


def test_best_of_n_with_a_policy_and_a_prm(tiny_policy, prm):
    from seqrl.data import ArithmeticTask
    from seqrl.rollout import SamplingParams
    from seqrl.search import best_of_n

    task = ArithmeticTask(digits=2)
    problems = task.problems("test", 3, seed=0)
    # a random policy rarely writes a step; give the PRM a context long enough for anything it writes
    prm_long = ProcessRewardModel.build(ModelConfig(preset="tiny", max_seq_len=96))
    out = best_of_n(problems, tiny_policy, 4, prm_long, select="weighted", task=task,
                    params=SamplingParams(temperature=1.0, max_new_tokens=24, seed=0))
    assert [len(c) for c in out.candidates] == [4, 4, 4] and len(out.chosen) == 3
    assert 0 < out.account.generated_tokens <= 3 * 4 * 24
    assert out.account.scorer_tokens >= 0 and out.account.total_s > 0 and len(out.correct) == 3


def test_prm_as_a_reward_function(tmp_path, prm):
    from seqrl.data import ArithmeticTask
    from seqrl.rewards.combine import RewardSpec, build_reward, score_completions
    from seqrl.types import Problem

    prm.save(tmp_path / "m")
    with pytest.raises(ValueError, match="reward 'prm' needs path"):
        RewardSpec(name="prm")
    fn = build_reward(RewardSpec(name="prm", path=str(tmp_path / "m"), aggregation="min"), ArithmeticTask())
    p = Problem("12+34=", "46")
    good = "<think>2+4=6\n\n1+3=4</think><answer>46</answer>"
    long = "<think>" + "\n\n".join(["1+1=2"] * 12) + "</think><answer>2</answer>"
    results = fn([p, p, p], [good, "no steps at all", long])
    assert results[0].score == pytest.approx(min(prm.score_steps(p.prompt, ["2+4=6", "1+3=4", "<answer>46</answer>"])))
    assert 0 < results[0].score < 1 and "min over 3 step(s)" in results[0].reason
    assert (results[1].score, results[1].reason) == (0.0, "no steps")
    assert results[2].score == 0.0 and "too long" in results[2].reason
    batch = score_completions({"prm": (fn, 2.0)}, [p], [good])  # the GRPO path: weighted, never raising
    assert batch.total == [pytest.approx(2 * results[0].score)] and batch.errors["prm"] == 0


def test_cli_train_orm_uses_the_prm_presets_with_its_own_run_folder(capsys):
    from seqrl.cli import main

    assert main(["train", "orm", "--config", "arith_tiny_prm", "--print-config"]) == 0
    text = capsys.readouterr().out
    assert "name: orm_arith_tiny" in text and "kind: orm" in text
    assert main(["train", "prm", "--config", "arith_tiny_prm", "--print-config", "--run.name=x"]) == 0
    text = capsys.readouterr().out
    assert "name: x" in text and "kind: prm" in text


def test_train_on_a_policys_own_solutions(tmp_path, tiny_policy):
    """data.policy: rows are the policy's samples, exactly labelled (cumulative truth), held out by problem."""
    from seqrl.algos.prm import load_rows

    tiny_policy.save(tmp_path / "lm")
    data = PRMDataConfig(policy=str(tmp_path / "lm"), samples=2, max_new_tokens=24)
    cfg = _cfg(tmp_path, 2, data=data)
    cfg.model = ModelConfig(path=str(tmp_path / "lm"))
    train_rows, test_rows, source = load_rows(cfg)
    assert "sampled by" in source and train_rows and test_rows
    assert not {r.prompt for r in train_rows} & {r.prompt for r in test_rows}  # train vs test problems
    assert len(train_rows) <= 2 * 64 and len(test_rows) <= 2 * 16
    for r in train_rows:  # once a step is bad, every later step is
        assert list(r.labels) == sorted(r.labels, reverse=True) and set(r.labels) <= {0.0, 1.0}
    assert load_rows(cfg)[0] == train_rows  # seeded sampling
    out = train(cfg)
    assert "eval/auc" in out
    first = json.loads((tmp_path / "p" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["data/train_examples"] == len(train_rows)


def test_policy_data_needs_exact_step_truth():
    from seqrl.algos.prm import load_rows

    cfg = PRMConfig(task=TaskConfig(name="countdown", n_train=8, n_test=4), data=PRMDataConfig(policy="runs/x"))
    with pytest.raises(ValueError, match="no exact step truth.*seqrl data prm-labels.*data.path"):
        load_rows(cfg)
    with pytest.raises(ValueError, match="data.temperature"):
        PRMDataConfig(policy="x", temperature=0.0)
