"""Demonstrations from a scripted expert: an expert writes each turn from the episode's text so far, the
multi-turn rollout runs it exactly as it runs the policy (the same prompt, tool turns, syntax and limits),
and each episode becomes a fine-tuning example whose tool tokens are left out of the loss.

An expert is ``expert(text) -> str``: the episode's decoded context (the prompt and every turn so far)
to the next turn's text — a call in the toolbox's syntax, or a final answer (which ends the episode);
a privileged one also reads its episode's environment, ``expert(text, env)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from seqrl.agents.rollout import Episode, Sampled


def expert_sampler(policy, expert: Callable[..., str], call_close: str, with_env: bool = False) -> Callable:
    """A rollout sampler that writes `expert`'s turns: a turn holding `call_close` stops there (as the
    engine stops at a closed call), any other ends with EOS (a final answer). Log-probs are 0 (not the
    policy's: demonstrations are fine-tuned on, not used as π_old). `with_env`: the expert is
    ``expert(text, env)`` and reads its episode's environment (a privileged expert: the task's fix)."""
    tok = policy.tokenizer

    def sample(contexts: list[list[int]], max_new: int, seed: int | None, envs=None) -> list[Sampled]:
        out = []
        for k, ctx in enumerate(contexts):
            text = tok.decode(ctx, skip_special_tokens=True)
            text = expert(text, envs[k] if envs else None) if with_env else expert(text)
            calls = call_close in text
            if calls:
                text = text[: text.index(call_close) + len(call_close)]
            ids = tok.encode(text, add_special_tokens=False) + ([] if calls else [tok.eos_token_id])
            ended = "stop_string" if calls else "eos"
            if len(ids) > max_new:
                ids, ended = ids[:max_new], "length"
            out.append(Sampled(ids, [0.0] * len(ids), ended))
        return out

    sample.takes_envs = with_env
    return sample


def episode_examples(episodes: Sequence[Episode], solved: Sequence[bool] | None = None
                     ) -> list[tuple[list[int], list[int], list[int]]]:
    """Fine-tuning examples ``(prompt ids, episode ids, policy mask)`` (`seqrl.training.finetune.collate`
    trains on the mask's tokens only), of the episodes `solved` marks (all without it)."""
    keep = [e for i, e in enumerate(episodes) if solved is None or solved[i]]
    return [(list(e.prompt_ids), list(e.ids), list(e.mask)) for e in keep if e.ids]
