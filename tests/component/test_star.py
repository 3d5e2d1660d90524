"""STaR's loop with the tiny preset: what is kept, the hint kept out of training, restart from the base,
a skipped fine-tune, resume, the seed's wrapper names and the CLI.

Most tests replace the sampler with a scripted one (`Scripted`): it answers each prompt by a rule, so
what the loop keeps is known exactly while the fine-tunes, checkpoints and evaluation run for real.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from seqrl.algos import star
from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.algos.star import BaseConfig, STaRConfig, STaRTrainer, collect, hint_words, quotes_hint, train
from seqrl.cli import main
from seqrl.data import get_task
from seqrl.data.arithmetic import addition_steps
from seqrl.evaluation import EvalConfig
from seqrl.models import ModelConfig, load_policy
from seqrl.types import format_completion
from seqrl.utils.metrics import read_metrics

HINT = "{question} hint: {answer}"


def solution(a: int, b: int, answer: int | None = None) -> str:
    return format_completion(addition_steps(a, b), str(a + b if answer is None else answer))


class Scripted:
    """A stand-in for `rollout.generate`: reads ``a+b=`` (and a hint) from each prompt and answers by `rule`.

    rule(a, b, hint, k, rng) -> (text, finish reason); k is the sample's index among the n of its prompt,
    rng a `random.Random` seeded by the call's sampling seed (so a resumed run draws the same).
    """

    def __init__(self, rule):
        self.rule, self.prompts = rule, []

    def __call__(self, policy, prompts, n, params):
        rng = random.Random(params.seed)
        texts, reasons = [], []
        for ids in prompts:
            text = policy.tokenizer.decode(ids, skip_special_tokens=True)
            self.prompts.append(text)
            question, _, hint = text.partition(" hint: ")
            a, b = (int(x) for x in question.rstrip("=").split("+"))
            for k in range(n):
                t, r = self.rule(a, b, hint or None, k, rng)
                texts.append(t)
                reasons.append(r)
        return SimpleNamespace(texts=texts, finish_reasons=reasons, num_generated_tokens=10 * len(texts))


def _cfg(tmp_path, name="star", **kw) -> STaRConfig:
    fields = dict(
        run=RunConfig(name=name, out_dir=str(tmp_path), seed=1, progress=False),
        model=ModelConfig(preset="tiny", max_seq_len=64),
        base=BaseConfig(examples=8, hinted=4, steps=3, batch_size=4),
        task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=12, n_test=6),
        optim=OptimConfig(lr=1e-3, warmup_steps=1),
        eval=EvalConfig(max_new_tokens=8),
        iterations=2, max_new_tokens=8, finetune_steps=2, batch_size=4,
    )
    fields.update(kw)
    return STaRConfig(**fields)


def test_collect_keeps_only_complete_verified_rationales_and_rationalizes_without_the_hint(tiny_policy):
    def rule(a, b, hint, k, rng):
        if hint is None:  # unhinted: right when a is even, else wrong; sample 1 is truncated; sample 2 repeats 0
            if k == 1:
                return solution(a, b), "length"
            return (solution(a, b) if a % 2 == 0 else solution(a, b, a + b + 1)), "stop"
        if k == 0:  # hinted: one that quotes the hint, one clean, one wrong
            return f"<think>hint: {hint}</think><answer>{hint}</answer>", "stop"
        return (solution(a, b) if k == 1 else solution(a, b, a + b + 2)), "stop"

    task = get_task("arith", digits=2)
    problems = task.problems("train", 20, 0)
    tiny_policy.prompt.template = None
    cfg = _cfg(".", samples_per_problem=3)
    with pytest.MonkeyPatch.context() as mp:
        scripted = Scripted(rule)
        mp.setattr(star, "generate", scripted)
        kept, stats = collect(tiny_policy, task, problems, cfg, iteration=1, seed=0)
    even = [p for p in problems if p.metadata["a"] % 2 == 0]
    assert even and len(even) < len(problems)
    assert stats["star/kept"] == len(kept) == len(problems)  # one per problem: repeats, truncated, quoted and wrong dropped
    assert stats["star/kept_from_rationalization"] == len(problems) - len(even)
    assert stats["star/train_coverage"] == 1.0 and stats["star/solved"] == len(even) / len(problems)
    for k in kept:
        assert task.verify(k.problem, k.completion).correct
        assert k.rationalized == (k.problem.metadata["a"] % 2 == 1)
        text = tiny_policy.prompt_text(k.problem) + k.completion
        assert "hint" not in text and not quotes_hint(k.completion, HINT)
        assert k.problem == problems[k.index] and k.problem.prompt == problems[k.index].prompt
    assert any(" hint: " in p for p in scripted.prompts)  # the failures were asked with the hint


def test_without_rationalization_failures_stay_unkept(tiny_policy):
    task = get_task("arith", digits=2)
    problems = task.problems("train", 10, 0)
    cfg = _cfg(".", rationalize=False, samples_per_problem=2)
    with pytest.MonkeyPatch.context() as mp:
        scripted = Scripted(lambda a, b, h, k, rng: (solution(a, b, None if a % 2 == 0 else 0), "stop"))
        mp.setattr(star, "generate", scripted)
        kept, stats = collect(tiny_policy, task, problems, cfg, iteration=1, seed=0)
    assert stats["star/kept_from_rationalization"] == 0 and not any(" hint: " in p for p in scripted.prompts)
    assert len(kept) == sum(p.metadata["a"] % 2 == 0 for p in problems)  # two equal samples count once


@pytest.mark.parametrize("bf16", [True, False])
def test_rationales_are_sampled_under_run_bf16(tiny_policy, bf16):
    task = get_task("arith", digits=2)
    problems = task.problems("train", 4, 0)
    seen = []

    def rule(a, b, hint, k, rng):
        seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)
        return solution(a, b, None if hint else 0), "stop"  # wrong unhinted: the rationalization pass runs too

    cfg = _cfg(".", samples_per_problem=1)
    cfg.run.bf16 = bf16
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(star, "generate", Scripted(rule))
        collect(tiny_policy, task, problems, cfg, iteration=1, seed=0)
    assert seen == [bf16] * 2 * len(problems)
    assert not torch.is_autocast_enabled("cpu")


def test_a_rationale_too_long_to_train_on_is_dropped_not_an_error():
    short_ctx = load_policy(ModelConfig(preset="tiny", max_seq_len=24))
    task = get_task("arith", digits=2)
    problems = task.problems("train", 4, 0)

    def rule(a, b, hint, k, rng):  # sample 0: a full worked solution (8 + 22 + EOS > 24 tokens); 1: the answer alone
        return (solution(a, b) if k == 0 else f"<answer>{a + b}</answer>"), "stop"

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(star, "generate", Scripted(rule))
        kept, _ = collect(short_ctx, task, problems, _cfg(".", samples_per_problem=2), iteration=1, seed=0)
    assert [k.completion for k in kept] == [f"<answer>{p.answer}</answer>" for p in problems]
    star.encode_pairs(short_ctx, [k.problem for k in kept], [k.completion for k in kept])  # fits


class Recorder:
    """Wraps `finetune`: records the parameters the model has and the examples it gets at each call."""

    def __init__(self, real, fail_at: int | None = None):
        self.real, self.fail_at, self.calls = real, fail_at, []

    def __call__(self, model, examples, **kw):
        self.calls.append(({k: v.detach().clone() for k, v in model.state_dict().items()}, list(examples)))
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise KeyboardInterrupt
        return self.real(model, examples, **kw)


def _always_right(a, b, hint, k, rng):
    return solution(a, b), "stop"


@pytest.mark.parametrize("restart", [True, False])
def test_each_fine_tune_starts_from_the_base_weights_only_with_restart_from_base(tmp_path, monkeypatch, restart):
    rec = Recorder(star.finetune)
    monkeypatch.setattr(star, "finetune", rec)
    monkeypatch.setattr(star, "generate", Scripted(_always_right))
    cfg = _cfg(tmp_path, restart_from_base=restart, iterations=3)
    metrics = train(cfg)
    assert len(rec.calls) == 4  # the base's short SFT, then one per iteration
    base = load_policy(ModelConfig(path=str(cfg.run.dir / "base"))).model.state_dict()
    after_1 = load_policy(ModelConfig(path=str(cfg.run.dir / "checkpoint-1"))).model.state_dict() \
        if (cfg.run.dir / "checkpoint-1").exists() else None
    for i, (params, _) in enumerate(rec.calls[1:], start=1):
        same = all(torch.equal(params[k], base[k]) for k in base)
        assert same == (restart or i == 1), f"fine-tune {i}: parameters equal to the base: {same}"
    if not restart and after_1 is not None:
        assert all(torch.equal(rec.calls[2][0][k], after_1[k]) for k in after_1)
    assert metrics["star/fine_tune_steps"] == round(2 * 1.2**2) and metrics["star/kept"] == 12


def test_held_out_accuracy_by_digit_count_is_logged_each_iteration_and_plotted(tmp_path, monkeypatch):
    monkeypatch.setattr(star, "generate", Scripted(_always_right))
    cfg = _cfg(tmp_path, task=TaskConfig(name="arith", kwargs={"digits": [1, 2]}, n_train=12, n_test=10))
    train(cfg)
    _, _, test = star.split_problems(cfg.task.build(), cfg)
    sizes = {d: sum(p.metadata["digits"] == d for p in test) for d in (1, 2)}
    assert all(sizes.values())
    records = read_metrics(cfg.run.dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records:  # the groups partition the held-out problems: their weighted mean is the accuracy
        weighted = sum(r[f"eval/acc_digits_{d}"] * n for d, n in sizes.items()) / len(test)
        assert weighted == pytest.approx(r["eval/accuracy"], abs=1e-12)
    assert (cfg.run.dir / "plots" / "star.png").stat().st_size > 0


def test_training_examples_never_hold_the_hint(tmp_path, monkeypatch):
    rec = Recorder(star.finetune)
    monkeypatch.setattr(star, "finetune", rec)
    # wrong without the hint, right with it: every example comes from rationalization
    monkeypatch.setattr(star, "generate", Scripted(lambda a, b, h, k, rng: (solution(a, b, None if h else -1), "stop")))
    cfg = _cfg(tmp_path)
    metrics = train(cfg)
    assert metrics["star/kept_from_rationalization"] == metrics["star/kept"] == 12
    policy = load_policy(ModelConfig(path=str(cfg.run.dir / "base")))
    words = hint_words(cfg.hint_template)
    for _, examples in rec.calls[1:]:
        assert len(examples) == 12
        for prompt, completion in examples:
            text = policy.tokenizer.decode(prompt + completion).lower()
            assert not any(w in text for w in words), text
    # the base's short SFT is the one place the hint format is shown
    base_text = [policy.tokenizer.decode(p) for p, _ in rec.calls[0][1]]
    assert sum("hint" in t for t in base_text) == cfg.base.hinted


def test_an_iteration_with_nothing_kept_warns_and_skips_the_fine_tune(tmp_path, monkeypatch, capsys):
    rec = Recorder(star.finetune)
    monkeypatch.setattr(star, "finetune", rec)
    monkeypatch.setattr(star, "generate", Scripted(lambda a, b, h, k, rng: ("<answer>no</answer>", "stop")))
    cfg = _cfg(tmp_path)
    metrics = train(cfg)
    err = capsys.readouterr().err
    assert err.count("WARNING: STaR iteration") == 2 and "fine-tune skipped" in err
    assert len(rec.calls) == 1  # the base only
    assert metrics["star/fine_tune_skipped"] == 1.0 and metrics["star/kept"] == 0
    base = load_policy(ModelConfig(path=str(cfg.run.dir / "base"))).model.state_dict()
    last = load_policy(ModelConfig(path=str(cfg.run.dir / "checkpoint-2"))).model.state_dict()
    assert all(torch.equal(base[k], last[k]) for k in base)
    records = read_metrics(cfg.run.dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]


def _coin(a, b, hint, k, rng):
    return solution(a, b, None if rng.random() < 0.6 else a + b + 1), "stop"


@pytest.mark.parametrize("restart", [True, False])
def test_resume_after_an_interrupted_iteration_equals_an_uninterrupted_run(tmp_path, monkeypatch, restart):
    monkeypatch.setattr(star, "generate", Scripted(_coin))
    real = star.finetune
    whole = _cfg(tmp_path, "whole", restart_from_base=restart, iterations=3)
    train(whole)

    monkeypatch.setattr(star, "finetune", Recorder(real, fail_at=3))  # base, iteration 1, then iteration 2 stops
    cut = _cfg(tmp_path, "cut", restart_from_base=restart, iterations=3)
    with pytest.raises(KeyboardInterrupt):
        train(cut)
    assert (cut.run.dir / "checkpoint-1").exists() and not (cut.run.dir / "checkpoint-2").exists()
    monkeypatch.setattr(star, "finetune", real)
    cut.run.resume = True
    train(cut)

    a = load_policy(ModelConfig(path=str(whole.run.dir / "checkpoint-3"))).model.state_dict()
    b = load_policy(ModelConfig(path=str(cut.run.dir / "checkpoint-3"))).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)

    def strip(records):
        return [{k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")} for r in records]

    assert strip(read_metrics(whole.run.dir / "metrics.jsonl")) == strip(read_metrics(cut.run.dir / "metrics.jsonl"))


def test_a_base_from_a_model_folder_is_used_as_it_is(tmp_path, monkeypatch, tiny_policy):
    tiny_policy.save(tmp_path / "given")
    monkeypatch.setattr(star, "generate", Scripted(_always_right))
    rec = Recorder(star.finetune)
    monkeypatch.setattr(star, "finetune", rec)
    cfg = _cfg(tmp_path, base=BaseConfig(path=str(tmp_path / "given")), iterations=1)
    train(cfg)
    given = tiny_policy.model.state_dict()
    assert len(rec.calls) == 1 and all(torch.equal(rec.calls[0][0][k], given[k]) for k in given)


def test_the_seed_names_work_as_thin_wrappers(tiny_policy, monkeypatch):
    scripted = Scripted(_always_right)
    monkeypatch.setattr(star, "generate", scripted)
    cfg = _cfg(".", finetune_steps=1)
    trainer = STaRTrainer(tiny_policy.model, tiny_policy.tokenizer, num_iterations=2, task=get_task("arith", digits=2),
                          config=cfg)
    assert trainer.generate_rationale("12+30=") == solution(12, 30)
    trainer.generate_rationale("12+30=", hint="42")
    assert scripted.prompts[-1] == "12+30= hint: 42"
    data = get_task("arith", digits=2).problems("train", 6, 0)
    stats = trainer.star_iteration(data)
    assert stats["star/kept"] == 6 and trainer.iteration == 1
    history = trainer.train(data, eval_problems=get_task("arith", digits=2).problems("test", 3, 0))
    assert len(history) == 2 and all("eval/accuracy" in h for h in history)


def test_cli_trains_star_from_the_preset(capsys):
    assert main(["train", "star", "--config", "arith_tiny_star", "--print-config", "--iterations=2"]) == 0
    out = capsys.readouterr().out
    assert "iterations: 2" in out and "restart_from_base: true" in out and "hint_template" in out


def test_under_torchrun_it_refuses_to_start(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="one process"):
        train(_cfg(tmp_path))
    assert not (tmp_path / "star").exists()


def test_with_every_row_the_base_examples_are_not_training_problems(tmp_path):
    """n_train: -1 once trained STaR on the rows the base had been fine-tuned on."""
    import json

    rows = [{"question": f"{a}+{a}=", "answer": str(2 * a)} for a in range(40)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = TaskConfig(name=f"jsonl:{data}", n_train=-1, n_test=-1)
    cfg = _cfg(tmp_path, task=task)
    built = cfg.task.build()
    every = built.problems("train", -1, cfg.task.seed)
    train_p, base_p, _ = star.split_problems(built, cfg)
    assert len(base_p) == 12 and len(train_p) + len(base_p) == len(every) and train_p
    assert not {p.prompt for p in train_p} & {p.prompt for p in base_p}
    with pytest.raises(ValueError, match="worked examples"):
        star.split_problems(built, _cfg(tmp_path, task=task, base=BaseConfig(examples=35, hinted=5, steps=3,
                                                                            batch_size=4)))
