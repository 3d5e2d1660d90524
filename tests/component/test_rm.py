"""Reward model: preference data (TRL format, errors naming file/line/field), the score at the last
real token under either padding and as transformers reads it back, training that resumes exactly,
the synthetic pairing, and an RM folder as a reward function."""

from __future__ import annotations

import json
import random

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.rm import PreferenceDataConfig, RMConfig, pair_samples, train
from seqrl.data.jsonl import DatasetFormatError
from seqrl.data.preferences import load_preferences
from seqrl.models.heads import load_scalar_model, pad_sequences, sequence_scores, shared_prefix_pair_scores
from seqrl.models.lm import ModelConfig
from seqrl.rewards.combine import RewardSpec, build_reward, score_completions
from seqrl.types import Problem
from seqrl.utils.checkpoint import latest_checkpoint
from seqrl.utils.metrics import read_metrics


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def arith_pairs(n: int, seed: int = 0) -> list[dict]:
    """Addition prompts; chosen the right sum, rejected a wrong one."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        rows.append({"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + rng.choice([-3, -1, 1, 2, 10]))})
    return rows


def test_preference_rows_standard_implicit_conversational(tmp_path):
    conv = {"chosen": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
            "rejected": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}]}
    pairs = load_preferences(write(tmp_path / "p.jsonl", [
        {"prompt": "1+1=", "chosen": "2", "rejected": "3", "margin": 1.5},
        {"chosen": "1+1=2", "rejected": "1+1=3"},
        conv,
        {"prompt": "2+2=", "chosen": "4", "rejected": ""},  # the builder writes a completion that stopped at once
    ]))
    assert (pairs[3].chosen, pairs[3].rejected) == ("4", "")
    assert (pairs[0].prompt, pairs[0].chosen, pairs[0].rejected, pairs[0].margin) == ("1+1=", "2", "3", 1.5)
    assert (pairs[1].prompt, pairs[1].chosen) == ("", "1+1=2")
    assert pairs[2].prompt == ({"role": "user", "content": "2+2?"},)
    assert (pairs[2].chosen, pairs[2].rejected) == ("4", "5")


@pytest.mark.parametrize("row,message", [
    ({"prompt": "x", "chosen": "a"}, "line 2: missing field 'rejected'"),
    ({"prompt": "x", "chosen": 3, "rejected": "b"}, "line 2: field 'chosen' must be str or list"),
    ({"prompt": "x", "chosen": "a", "rejected": "b", "margin": "big"}, "line 2: field 'margin' must be int or float"),
    ({"prompt": "x", "chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"}, "mix strings and message lists"),
    ({"chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]},
     "share no leading message"),
    ("{not json", "line 2: invalid JSON"),
])
def test_bad_preference_rows_name_file_line_and_field(tmp_path, row, message):
    path = write(tmp_path / "bad.jsonl", [{"prompt": "1+1=", "chosen": "2", "rejected": "3"}, row])
    with pytest.raises(DatasetFormatError, match=message) as e:
        load_preferences(path)
    assert str(path) in str(e.value)


def test_score_is_read_at_the_last_real_token_under_left_and_right_padding(tmp_path):
    torch.manual_seed(0)
    model, tok = load_scalar_model(ModelConfig(preset="tiny", max_seq_len=32))
    model.eval()
    seqs = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    alone = torch.cat([sequence_scores(model, *pad_sequences([s], tok.pad_token_id)) for s in seqs])
    right = sequence_scores(model, *pad_sequences(seqs, tok.pad_token_id, "right"))
    left = sequence_scores(model, *pad_sequences(seqs, tok.pad_token_id, "left"))
    assert torch.allclose(right, alone, atol=1e-5) and torch.allclose(left, alone, atol=1e-5)
    # reading any other position gives other numbers (the test could fail)
    assert not torch.allclose(sequence_scores(model, *pad_sequences([s[:-1] for s in seqs], tok.pad_token_id)), alone)
    # a saved folder loads back with transformers and its own pooling gives the same scores (right padding)
    model.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    hf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm").eval()
    ids, attn = pad_sequences(seqs, tok.pad_token_id, "right")
    with torch.no_grad():
        assert torch.allclose(hf(input_ids=ids, attention_mask=attn).logits.squeeze(-1), alone, atol=1e-5)


@pytest.mark.parametrize("bf16", [False, True])
def test_shared_prefix_pair_scores_equal_the_padded_forward_in_value_and_gradient(bf16):
    """A pair's shared start computed once gives the padded forward's scores and gradients: pairs with
    prompts of several lengths, sides of several lengths, a side that extends the other, a longer common
    opening than the prompt."""
    torch.manual_seed(0)
    model, tok = load_scalar_model(ModelConfig(preset="tiny", max_seq_len=64))
    g = torch.Generator().manual_seed(1)
    seq = lambda n: torch.randint(3, 20, (n,), generator=g).tolist()  # noqa: E731
    chosen, rejected = [], []
    for i in range(6):
        prompt = seq(4 + 2 * i)
        chosen.append(prompt + seq(2 + i % 3))
        rejected.append(prompt + seq(1 + (2 * i) % 5))
    chosen[1] = rejected[1] + seq(3)  # one side extends the other
    rejected[2] = chosen[2][:-1] + [chosen[2][-1] % 19 + 1]  # the sides differ at the last token only
    weights = torch.linspace(-1, 1, 12)

    def run(fn):
        model.zero_grad()
        scores = fn()
        (scores * weights).sum().backward()
        return scores.detach(), [p.grad.clone() for p in model.parameters()]

    def padded():
        return sequence_scores(model, *pad_sequences(chosen + rejected, tok.pad_token_id), bf16)

    ref, ref_grads = run(padded)
    got, got_grads = run(lambda: torch.cat(shared_prefix_pair_scores(model, chosen, rejected, tok.pad_token_id, bf16)))
    tol = 3e-2 if bf16 else 1e-5
    assert torch.allclose(got, ref, atol=tol, rtol=tol), (got - ref).abs().max()
    for a, b in zip(got_grads, ref_grads):
        assert torch.allclose(a, b, atol=tol * float(b.abs().max()) + 1e-7, rtol=tol)
    # reading the wrong position (the shared part's own last token) would differ: the check can fail
    assert not torch.allclose(torch.cat(shared_prefix_pair_scores(model, [c[:-1] for c in chosen],
                                                                  [r[:-1] for r in rejected], tok.pad_token_id)), ref)


def test_rm_training_with_and_without_the_shared_prefix_matches(tmp_path):
    data = write(tmp_path / "pairs.jsonl", arith_pairs(60))
    a = train(rm_config(tmp_path, data, 4, name="shared", shared_prompt_forward="on"))
    b = train(rm_config(tmp_path, data, 4, name="padded", shared_prompt_forward="off"))
    assert abs(a["eval/loss"] - b["eval/loss"]) < 1e-4 and a["eval/pairwise_accuracy"] == b["eval/pairwise_accuracy"]


def rm_config(tmp_path, data, steps: int, name: str = "rm", **kw) -> RMConfig:
    return RMConfig(
        run=RunConfig(name=name, out_dir=str(tmp_path), seed=0, progress=False, log_every=1, save_every=3),
        model=ModelConfig(preset="tiny", max_seq_len=32),
        data=PreferenceDataConfig(path=str(data), heldout_frac=0.2),
        optim=OptimConfig(lr=1e-3, warmup_steps=2),
        steps=steps, batch_size=8, micro_batch_size=3, center_coef=0.01, **kw)


def test_rm_training_resumes_exactly_and_checkpoint_is_a_reward(tmp_path, monkeypatch):
    data = write(tmp_path / "prefs.jsonl", arith_pairs(80))
    full = train(rm_config(tmp_path / "a", data, 6))
    import seqrl.training.run as plumbing  # the run loop checks every step's loss through it

    real = plumbing.check_finite

    def stop_at_step_5(step, *a, **k):
        if step == 5:
            raise KeyboardInterrupt
        return real(step, *a, **k)

    monkeypatch.setattr(plumbing, "check_finite", stop_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        train(rm_config(tmp_path / "b", data, 6))
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path / "b" / "rm").name == "checkpoint-3"
    cfg = rm_config(tmp_path / "b", data, 6)
    cfg.run.resume = True
    resumed = train(cfg)
    a = load_file(tmp_path / "a" / "rm" / "checkpoint-6" / "model.safetensors")
    b = load_file(tmp_path / "b" / "rm" / "checkpoint-6" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["eval/pairwise_accuracy"] == full["eval/pairwise_accuracy"]
    rows = {r["step"]: r for r in read_metrics(tmp_path / "b" / "rm" / "metrics.jsonl")}
    full_rows = {r["step"]: r for r in read_metrics(tmp_path / "a" / "rm" / "metrics.jsonl")}
    assert [rows[s]["loss/bt"] for s in range(1, 7)] == [full_rows[s]["loss/bt"] for s in range(1, 7)]
    assert 0 in full_rows and "eval/pairwise_accuracy" in full_rows[0] and full_rows[0]["data/heldout_pairs"] > 0

    # the checkpoint as a reward: the score of prompt + completion + EOS, rendered as the policy sees it
    path = str(tmp_path / "a" / "rm" / "checkpoint-6")
    spec = RewardSpec(name="rm", path=path)
    assert spec.key == "rm"
    fn = build_reward(spec, task=None)
    problems = [Problem("1+1=", "2"), Problem("3+4=", "7")]
    scored = score_completions({"rm": (fn, 1.0)}, problems, ["2", "9"])
    model, tok = load_scalar_model(ModelConfig(path=path))
    from seqrl.models.heads import encode_pair
    from seqrl.prompts import render_prompt

    seqs = [encode_pair(tok, render_prompt(tok, p), c) for p, c in zip(problems, ["2", "9"])]
    with torch.no_grad():
        want = sequence_scores(model.eval(), *pad_sequences(seqs, tok.pad_token_id)).tolist()
    assert scored.scores["rm"] == pytest.approx(want, abs=1e-5)
    assert scored.total == pytest.approx(want, abs=1e-5)


def test_rm_spec_needs_a_path():
    with pytest.raises(ValueError, match="needs path"):
        RewardSpec(name="rm")
    with pytest.raises(ValueError, match="path is only for prm, orm, rm"):
        RewardSpec(name="task", path="x")


def test_rm_learns_a_visible_preference(tmp_path):
    # rejected answers end in "?": a feature a fresh tiny model picks up in a few dozen steps
    rows = [{**r, "rejected": r["rejected"] + "?"} for r in arith_pairs(400)]
    data = write(tmp_path / "prefs.jsonl", rows)
    cfg = rm_config(tmp_path, data, 30, "learn")
    cfg.optim = OptimConfig(lr=2e-3, warmup_steps=5)
    cfg.batch_size = cfg.micro_batch_size = 32
    out = train(cfg)
    first = read_metrics(tmp_path / "learn" / "metrics.jsonl")[0]
    print(f"held-out pairwise accuracy {first['eval/pairwise_accuracy']:.3f} -> {out['eval/pairwise_accuracy']:.3f}")
    assert out["eval/pairwise_accuracy"] >= max(0.9, first["eval/pairwise_accuracy"] + 0.1)


def test_pair_samples_pairs_verified_with_unverified_and_flips_with_noise():
    prompts, uids = ["p0", "p1", "p2"], ["u0", "u1", "u2"]
    texts = ["a", "b", "c", "d", "e", "f"]
    verdicts = [0.0, 1.0, 1.0, 1.0, float("nan"), 1.0]  # p0 mixed, p1 all right, p2 NaN counts as rejected
    rows = pair_samples(prompts, uids, texts, verdicts, 2, 0.0, 0)
    assert [(r["prompt"], r["chosen"], r["rejected"], r["flipped"]) for r in rows] == [
        ("p0", "b", "a", False), ("p2", "f", "e", False)]
    flipped = pair_samples(prompts, uids, texts, verdicts, 2, 1.0, 0)
    assert [(r["chosen"], r["rejected"], r["flipped"]) for r in flipped] == [("a", "b", True), ("e", "f", True)]
    with pytest.raises(ValueError, match="3 prompts × 3 samples"):
        pair_samples(prompts, uids, texts, verdicts, 3, 0.0, 0)


def test_pair_samples_several_pairs_per_prompt_use_each_distinct_completion_once():
    texts = ["r1", "w1", "r1", "w2", "r2", "w1", "r3", "x"]  # one prompt, 8 samples: r* right, w*/x wrong
    verdicts = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.5]
    pairs = lambda k: [(r["chosen"], r["rejected"]) for r in pair_samples(["p"], ["u"], texts, verdicts, 8, 0.0, 0, k)]
    assert pairs(1) == [("r1", "w1")]
    assert pairs(2) == [("r1", "w1"), ("r2", "w2")]  # the repeated r1 and w1 are not paired again
    assert pairs(5) == [("r1", "w1"), ("r2", "w2"), ("r3", "x")]  # as many as the shorter distinct side
    with pytest.raises(ValueError, match="pairs_per_prompt"):
        pair_samples(["p"], ["u"], texts, verdicts, 8, 0.0, 0, 0)


def test_data_preferences_cli_names_what_is_missing(tmp_path, capsys):
    from seqrl.cli import main

    assert main(["data", "preferences", "--out", str(tmp_path / "p.jsonl")]) == 2
    assert "needs --policy" in capsys.readouterr().err
    assert main(["data", "preferences", "--policy", str(tmp_path / "nope"), "--out", str(tmp_path / "p.jsonl")]) == 2
    assert "not a model directory" in capsys.readouterr().err
    (tmp_path / "taken.jsonl").write_text("")
    assert main(["data", "preferences", "--policy", str(tmp_path), "--out", str(tmp_path / "taken.jsonl")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["data", "minari", "pendulum"]) == 2
    assert "give a level" in capsys.readouterr().err


def test_sequence_scores_under_bf16_autocast_stay_near_fp32():
    model, tok = load_scalar_model(ModelConfig(preset="tiny", max_seq_len=32))
    model.eval()
    ids, attn = pad_sequences([[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]], tok.pad_token_id)
    with torch.no_grad():
        fp32, bf16 = sequence_scores(model, ids, attn), sequence_scores(model, ids, attn, bf16=True)
    assert torch.allclose(bf16, fp32, atol=3e-2), (bf16 - fp32).abs().max()
