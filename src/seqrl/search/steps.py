"""Continuing partial solutions one reasoning step at a time: what beam search, DVTS and MCTS expand.

A partial solution is house-format text (``<think>step one\\n\\nstep two\\n\\n``). `PolicyStepper`
renders the problem's prompt, appends the partial solution, and samples until the step separator
(`STEP_SEP`), EOS or the step's token limit, through the rollout engine (each distinct prefix
prefilled once per call). A step is *terminal* when the solution ends there: at EOS, at the length
limit of the whole solution, with an answer (``</answer>``), or with an empty step.

A partial solution the stepper itself wrote in a recent call continues from the token ids the
policy sampled, not from its text encoded again: a BPE tokenizer can encode the text into other
tokens than the model chose (and the model then continues a sequence it never wrote), and the
rendering and encoding cost per candidate is saved. Any other prefix (a step cut inside a token,
one older than the last `WRITTEN_KEPT` written, one given by the caller) is encoded from its text.
A prefix the stepper wrote also continues from the K/V its row left (`PrefixCache`, lean decoder): a
round computes one token per continued candidate instead of prefilling its prompt and partial solution.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from seqrl.models.lm import Policy
from seqrl.rollout import PrefixCache, SamplingParams, generate
from seqrl.types import ANSWER_CLOSE, STEP_SEP, Problem


@dataclass(frozen=True)
class Step:
    """One sampled continuation of a partial solution."""

    text: str
    """The step, ending with `STEP_SEP` when more steps follow."""
    terminal: bool
    """The solution ends with this step."""
    ended_by: str
    """eos, stop_string (the step separator), length (the step's token limit) or solution_limit."""
    tokens: int
    """Tokens generated for it."""
    mean_logprob: float
    """Mean log-probability of its tokens under the sampling distribution (PUCT priors)."""


class Stepper(Protocol):
    """Samples next steps; `generated_tokens` counts every token it generated (the search budget)."""

    generated_tokens: int

    def next_steps(self, problems: Sequence[Problem], prefixes: Sequence[str], n: int,
                   greedy: bool = False) -> list[list[Step]]: ...

    def finish(self, problems: Sequence[Problem], prefixes: Sequence[str]) -> list[str]: ...


def is_terminal_text(step: str) -> bool:
    """A step that closes the answer or has no content ends the solution.

    >>> is_terminal_text("4+8=12\\n\\n"), is_terminal_text("</think><answer>12</answer>"), is_terminal_text("\\n\\n")
    (False, True, True)
    """
    return ANSWER_CLOSE in step or not step.strip()


WRITTEN_KEPT = 32768
"""Prefixes whose sampled token ids a `PolicyStepper` remembers (a few rounds of a large search; older
ones are encoded from their text again)."""


@dataclass
class PolicyStepper:
    """A `Policy` continued step by step through the rollout engine.

    step_tokens: token limit of one step; solution_tokens: of a whole solution (a prefix that reaches
    it ends there). temperature/top_p: sampling of non-greedy steps."""

    policy: Policy
    temperature: float = 1.0
    top_p: float = 1.0
    step_tokens: int = 32
    solution_tokens: int = 128
    seed: int = 0
    generated_tokens: int = 0
    calls: int = 0
    prefix_cache: PrefixCache | None = field(default_factory=PrefixCache, repr=False)
    """The K/V of the rows the recent calls ended at a step boundary (None: prefill every prefix again)."""
    _prompts: dict = field(default_factory=dict, repr=False)
    """id(problem) → (problem, its rendered prompt's token ids); keyed by identity (a problem's rendering
    may read fields that equality ignores), the problem held so that its id is not reused."""
    _written: dict = field(default_factory=dict, repr=False)
    """(id(problem), prefix text) → (problem, token ids of prompt + prefix, prompt length) for the prefixes
    the recent calls wrote (each earlier prefix plus one whole sampled step), the newest `WRITTEN_KEPT`."""

    def _prompt_ids(self, problems: Sequence[Problem], prefixes: Sequence[str]) -> list[tuple[list[int], int]]:
        """Per (problem, prefix): the token ids to continue and how many of them are the prompt's."""
        tok = self.policy.tokenizer
        special = not tok.chat_template
        if len(self._prompts) > 4096:  # a long-lived stepper over many problems: keep memory bounded
            self._prompts.clear()
        out = []
        for p, prefix in zip(problems, prefixes):
            known = self._written.get((id(p), prefix))
            if known is not None and known[0] is p:
                out.append(known[1:])
                continue
            held = self._prompts.get(id(p))
            if held is None or held[0] is not p:
                held = self._prompts[id(p)] = (p, self.policy.encode_prompts([p])[0])
            ids = held[1]
            if prefix:
                out.append((tok.encode(self.policy.prompt_text(p) + prefix, add_special_tokens=special), len(ids)))
            else:
                out.append((ids, len(ids)))
        return out

    def next_steps(self, problems: Sequence[Problem], prefixes: Sequence[str], n: int,
                   greedy: bool = False) -> list[list[Step]]:
        """`n` next steps for each (problem, prefix), grouped per prefix in order."""
        if len(problems) != len(prefixes):
            raise ValueError(f"next_steps: {len(problems)} problems for {len(prefixes)} prefixes")
        if not prefixes:
            return []
        self.calls += 1
        params = SamplingParams(temperature=0.0 if greedy else self.temperature, top_p=self.top_p,
                                max_new_tokens=self.step_tokens, stop=(STEP_SEP,),
                                seed=self.seed * 1_000_003 + self.calls)
        inputs = self._prompt_ids(problems, prefixes)
        ro = generate(self.policy, [ids for ids, _ in inputs], n, params, prefix_cache=self.prefix_cache)
        self.generated_tokens += ro.num_generated_tokens
        lengths = ro.lengths.tolist()
        sampled = ro.completion_ids.tolist()
        written: dict = {}
        out: list[list[Step]] = []
        for i, (problem, prefix) in enumerate(zip(problems, prefixes)):
            ids, prompt_len = inputs[i]
            used = len(ids) - prompt_len
            steps = []
            for r in range(i * n, (i + 1) * n):
                text, ended = ro.texts[r], ro.ended_by[r]
                whole = True  # the step is the decoded text of every sampled token
                if ended == "stop_string":
                    cut = text.find(STEP_SEP)
                    if cut >= 0:
                        whole = cut + len(STEP_SEP) == len(text)
                        text = text[: cut + len(STEP_SEP)]
                k = int(lengths[r])
                mean_lp = float(ro.logprobs[r, :k].sum()) / max(k, 1)
                over = used + k >= self.solution_tokens
                terminal = ended != "stop_string" or over or is_terminal_text(text)
                if whole and not terminal:
                    written[(id(problem), prefix + text)] = (problem, ids + sampled[r][:k], prompt_len)
                steps.append(Step(text, terminal, "solution_limit" if over and ended == "stop_string" else ended,
                                  k, mean_lp))
            out.append(steps)
        self._written.update(written)
        for key in list(itertools.islice(self._written, max(0, len(self._written) - WRITTEN_KEPT))):
            del self._written[key]  # the oldest first (dicts keep insertion order)
        return out

    def finish(self, problems: Sequence[Problem], prefixes: Sequence[str]) -> list[str]:
        """Each prefix sampled to the end of its solution (one rollout; MCTS rollout values)."""
        if not prefixes:
            return []
        self.calls += 1
        inputs = self._prompt_ids(problems, prefixes)
        used = max(len(ids) - prompt_len for ids, prompt_len in inputs)
        params = SamplingParams(temperature=self.temperature, top_p=self.top_p,
                                max_new_tokens=max(1, self.solution_tokens - used),
                                seed=self.seed * 1_000_003 + self.calls)
        ro = generate(self.policy, [ids for ids, _ in inputs], 1, params, prefix_cache=self.prefix_cache)
        self.generated_tokens += ro.num_generated_tokens
        return [prefix + text for prefix, text in zip(prefixes, ro.texts)]
