"""Stepping loses nothing: the shared SFT policy continued one reasoning step at a time through
`PolicyStepper`, every candidate kept to the end, solves held-out problems at the rate of its own
unstepped samples (same temperature, same token limit) within three standard errors.

What a step-level search adds or loses then comes from its scorer and its selection, not from how a
partial solution is continued (prefix tokens, step boundaries, stop handling, the last step's format).
"""

import pytest

from seqrl.core.metrics import rate_diff_se
from seqrl.models.lm import load_pretrained
from seqrl.rollout import SamplingParams, generate
from seqrl.search.steps import PolicyStepper

PROBLEMS, SAMPLES, TOKENS = 200, 8, 48


def stepped_to_the_end(stepper: PolicyStepper, problems, n: int, max_rounds: int = 16) -> list[str]:
    """`n` solutions per problem, each grown one step per call until its step is terminal."""
    first = stepper.next_steps(problems, [""] * len(problems), n)
    chains = [(p, s.text, s.terminal) for p, steps in zip(problems, first) for s in steps]
    for _ in range(max_rounds):
        open_rows = [i for i, (_, _, done) in enumerate(chains) if not done]
        if not open_rows:
            break
        steps = stepper.next_steps([chains[i][0] for i in open_rows], [chains[i][1] for i in open_rows], 1)
        for i, (step,) in zip(open_rows, steps):
            p, text, _ = chains[i]
            chains[i] = (p, text + step.text, step.terminal)
    assert all(done for _, _, done in chains), "a solution still open after max_rounds steps"
    return [text for _, text, _ in chains]


@pytest.mark.e2e
def test_a_policy_stepped_to_the_end_keeps_its_own_accuracy(sft_two_digit):
    cfg = sft_two_digit.cfg
    task = cfg.task.build()
    problems = task.problems("test", PROBLEMS, cfg.task.seed)
    policy = load_pretrained(str(sft_two_digit.checkpoint))
    plain = generate(policy, policy.encode_prompts(problems), SAMPLES,
                     SamplingParams(temperature=1.0, max_new_tokens=TOKENS, seed=7)).texts
    stepper = PolicyStepper(policy, temperature=1.0, step_tokens=TOKENS, solution_tokens=TOKENS, seed=7)
    stepped = stepped_to_the_end(stepper, problems, SAMPLES)
    owners = [p for p in problems for _ in range(SAMPLES)]
    rate = [sum(task.verify(p, t).correct for p, t in zip(owners, texts)) / len(owners) for texts in (plain, stepped)]
    margin = 3 * rate_diff_se(rate[0], rate[1], len(owners))
    print(f"pass@1 unstepped {rate[0]:.3f}, stepped {rate[1]:.3f} (3 s.e. {margin:.3f}); "
          f"{stepper.calls} stepper calls")
    assert stepper.calls >= 3  # the solutions really were continued step by step
    assert 0.1 < rate[0] < 0.95  # a policy that is neither always right nor always wrong
    assert abs(rate[1] - rate[0]) <= margin
