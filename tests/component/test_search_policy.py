"""Step search with a real (tiny, untrained) policy: prefix continuation, step boundaries, finish
reasons and the token account."""

from __future__ import annotations

import torch

from seqrl.models.lm import ModelConfig, load_policy
from seqrl.rollout import SamplingParams, generate
from seqrl.search import steps as steps_mod
from seqrl.search.steps import PolicyStepper
from seqrl.search.tree import beam_search
from seqrl.search.mcts import mcts
from seqrl.types import STEP_SEP, Problem

PROBLEMS = [Problem("12+34=", "46"), Problem("5+6=", "11")]


def _policy():
    torch.manual_seed(0)
    return load_policy(ModelConfig(preset="tiny", max_seq_len=128))


def test_rollouts_say_whether_a_row_ended_at_a_stop_string_or_the_length_limit():
    policy = _policy()
    prompts = policy.encode_prompts(["1+1="])
    free = generate(policy, prompts, 1, SamplingParams(temperature=0, max_new_tokens=12))
    assert free.ended_by == ["length"] and free.finish_reasons == ["length"]  # seed 0: no EOS in 12 tokens
    stop = free.texts[0][3:5]
    cut = generate(policy, prompts, 1, SamplingParams(temperature=0, max_new_tokens=12, stop=(stop,)))
    assert cut.ended_by == ["stop_string"] and cut.finish_reasons == ["stop"] and stop in cut.texts[0]
    eos = policy.tokenizer.eos_token_id
    policy.model.lm_head.bias = torch.nn.Parameter(torch.zeros(policy.model.config.vocab_size))
    with torch.no_grad():
        policy.model.lm_head.bias[eos] = 1e4  # EOS certain at the first step
    forced = generate(policy, prompts, 1, SamplingParams(temperature=0, max_new_tokens=12, stop=(stop,)))
    assert forced.ended_by == ["eos"] and forced.finish_reasons == ["stop"]


def test_a_step_continues_the_rendered_prompt_plus_the_prefix(monkeypatch):
    policy = _policy()
    seen = []
    real = steps_mod.generate

    def spy(policy_, prompts, n, params, **kw):
        seen.append((prompts, n, params))
        return real(policy_, prompts, n, params, **kw)

    monkeypatch.setattr(steps_mod, "generate", spy)
    stepper = PolicyStepper(policy, step_tokens=8, solution_tokens=64)
    prefix = "<think>1+2=3" + STEP_SEP
    out = stepper.next_steps(PROBLEMS, ["", prefix], 3)
    (prompts, n, params), = seen
    assert n == 3 and params.stop == (STEP_SEP,) and params.max_new_tokens == 8
    assert policy.tokenizer.decode(prompts[1]) == policy.prompt_text(PROBLEMS[1]) + prefix
    assert [len(o) for o in out] == [3, 3]
    for step in out[0] + out[1]:
        if step.ended_by == "stop_string":
            assert step.text.endswith(STEP_SEP) and STEP_SEP not in step.text[: -len(STEP_SEP)] and not step.terminal
        else:
            assert step.terminal
    assert stepper.generated_tokens == sum(s.tokens for o in out for s in o)


def test_a_prefix_the_stepper_wrote_continues_from_the_token_ids_the_policy_sampled(monkeypatch):
    from seqrl.rollout.engine import Rollouts

    policy = _policy()
    tok = policy.tokenizer
    newline = tok.convert_tokens_to_ids("\n")
    wrote = tok.encode("<think>1+2=3", add_special_tokens=False) + [newline, newline]  # "\n\n" as two tokens
    overshoot = tok.encode("<think>1+2=3" + STEP_SEP + "4", add_special_tokens=False)  # a step cut inside the call
    assert tok.decode(wrote) == "<think>1+2=3" + STEP_SEP and tok.encode(tok.decode(wrote)) != wrote
    replies, seen = [wrote, overshoot, wrote, wrote], []

    def fake(policy_, prompts, n, params, **kw):
        seen.append(prompts)
        ids = torch.tensor([replies[len(seen) - 1]] * (len(prompts) * n))
        return Rollouts(prompts, n, ids, torch.ones(ids.shape), torch.zeros(ids.shape), ["stop"] * len(ids),
                        tok.batch_decode(ids.tolist()), ["stop_string"] * len(ids))

    monkeypatch.setattr(steps_mod, "generate", fake)
    stepper = PolicyStepper(policy, step_tokens=16, solution_tokens=64)
    prompt = policy.encode_prompts(PROBLEMS[:1])[0]
    (first,), = stepper.next_steps(PROBLEMS[:1], [""], 1)
    assert first.text == "<think>1+2=3" + STEP_SEP and not first.terminal
    (second,), = stepper.next_steps(PROBLEMS[:1], [first.text], 1)
    assert seen[1] == [prompt + wrote]  # what the policy sampled, not the text encoded again
    assert second.text == first.text  # the "4" after the separator is cut: the ids no longer match the text
    prefix = first.text + second.text
    (third,), = stepper.next_steps(PROBLEMS[:1], [prefix], 1)
    assert seen[2] == [tok.encode(policy.prompt_text(PROBLEMS[0]) + prefix, add_special_tokens=False)]
    other = Problem(PROBLEMS[0].prompt, PROBLEMS[0].answer)  # equal, but not the problem the prefix was written for
    stepper.next_steps([other, PROBLEMS[0]], [prefix + third.text] * 2, 1)
    assert seen[3] == [tok.encode(policy.prompt_text(other) + prefix + third.text, add_special_tokens=False),
                       seen[2][0] + wrote]


class LengthScorer:
    """Longer partial solutions score higher (deterministic, no model)."""

    tokens_scored = 0

    def score(self, problems, solutions):
        self.tokens_scored += sum(len(s) for s in solutions)
        return [[min(len(s), 50) / 50] for s in solutions]


def test_beam_and_mcts_with_a_policy_account_for_every_generated_token():
    policy = _policy()
    stepper = PolicyStepper(policy, step_tokens=6, solution_tokens=24, seed=1)
    result = beam_search(PROBLEMS, stepper, LengthScorer(), n=4, beam_width=2, max_steps=3)
    assert result.account.generated_tokens == stepper.generated_tokens > 0
    assert len(result.chosen) == 2 and all(len(pool) >= 1 for pool in result.pools)
    stepper2 = PolicyStepper(policy, step_tokens=6, solution_tokens=24, seed=1)
    found = mcts(PROBLEMS, stepper2, LengthScorer(), simulations=3, width=2, select="visits")
    assert found.account.generated_tokens == stepper2.generated_tokens > 0 and found.stats["nodes"] > 1
    assert found.account.total_s >= found.account.gen_s + found.account.score_s - 1e-9


def test_the_seeds_entry_points_return_a_solution_text():
    from seqrl.search.wrappers import ReasoningSearch, beam_search_with_prm, monte_carlo_tree_search

    policy = _policy()
    for text in (ReasoningSearch.best_of_n(policy, "1+2=", 2, LengthScorer()),
                 beam_search_with_prm(policy, "1+2=", beam_width=2, max_steps=2, prm=LengthScorer()),
                 monte_carlo_tree_search(policy, "1+2=", num_simulations=2, prm=LengthScorer())):
        assert isinstance(text, str) and text


def test_seqrl_search_beam_and_mcts_write_curves_against_generated_tokens(tmp_path, capsys):
    import json

    from seqrl import cli
    from seqrl.models.prm import ProcessRewardModel

    policy = _policy()
    policy.save(tmp_path / "policy")
    ProcessRewardModel.build(ModelConfig(preset="tiny", max_seq_len=128)).save(tmp_path / "prm")
    for method in ("beam", "mcts"):
        out = tmp_path / method
        rc = cli.main(["search", method, "--policy", str(tmp_path / "policy"), "--scorer", f"prm:{tmp_path / 'prm'}",
                       "--problems", "3", "--budget", "2,4", "--beam-width", "2", "--seeds", "0", "--max-steps", "2",
                       "--step-tokens", "6", "--max-new-tokens", "16", "--difficulty-bins", "2", "--out", str(out)])
        assert rc == 0
        result = json.loads((out / "search.json").read_text())
        assert set(result["summary"]) == {method, "bon_weighted", "majority"}
        assert all(s["generated_tokens"] > 0 for by_n in result["summary"].values() for s in by_n.values())
        assert (out / "search.png").stat().st_size > 0 and "| method | N |" in (out / "search.md").read_text()
        assert len(result["difficulty"]["bins"]) == 3
    assert cli.main(["search", "beam", "--policy", "x", "--scorer", "nope", "--out", str(tmp_path / "z")]) == 2
    assert "expected prm:CKPT or orm:CKPT" in capsys.readouterr().err
