"""A policy, a value network and a reward model made of LSTMs, trained with GRPO-style PPO on a toy
task: the teaching version of the RLHF recipe, with the math from `seqrl.core`.

    python examples/lstm_grpo.py [--steps 80] [--seed 0]

Task: the prompt is three digits 0–4; the right completion is their maximum followed by EOS.
Pipeline: (1) train `RewardModel` with the Bradley–Terry loss on synthetic preference pairs (the
better of two completions by a partial score: right digit first, stops after one token); (2) run
`GRPO.generate_and_train`: sample G completions per prompt, score them with the frozen reward
model, GAE per token with `ValueNetwork`, normalised within each prompt's group (`gae_then_group`),
clipped surrogate plus a k3 KL to a frozen reference policy, clipped value loss. It prints the
reward model's held-out pairwise accuracy and the policy's reward and true accuracy before and after.

What a naive version of this recipe gets wrong, and what this file does instead:
- generation feeds the whole prefix each step (an LSTM run on only the last token forgets the prompt);
- completions end at EOS; masks keep padding out of log-probs, GAE, losses and the KL;
- log-probs are those of the sampling distribution, log_softmax(logits / temperature);
- G samples of the *same* prompt form a group (normalising across different prompts compares apples
  with oranges);
- the KL is taken against a frozen copy of the initial policy with the non-negative k3 estimator;
- the reward model is trained (Bradley–Terry) before it is used, and reads its score at the last
  real token, never at padding.
"""

from __future__ import annotations

import argparse
import copy
import random

import torch
from torch import nn

from seqrl.core.advantages import gae
from seqrl.core.masking import masked_mean
from seqrl.core.policy_loss import clipped_surrogate, kl_penalty
from seqrl.core.ppo import clipped_value_loss, group_whiten_tokens
from seqrl.core.preference import bradley_terry_loss, last_token_index

DIGITS, EOS, PAD, SEP = 5, 5, 6, 7  # tokens 0–4 are digits; the policy outputs digits and EOS
VOCAB, ACTIONS, PROMPT_LEN, MAX_NEW = 8, 6, 4, 3


def make_prompts(n: int, rng: random.Random) -> torch.Tensor:
    """(n, 4): three digits and the separator."""
    return torch.tensor([[rng.randrange(DIGITS) for _ in range(3)] + [SEP] for _ in range(n)])


def partial_score(prompt: list[int], completion: list[int]) -> float:
    """0.5 for the right digit first, 0.5 for stopping right after it (the preference labeller)."""
    right = bool(completion) and completion[0] == max(prompt[:3])
    stops = len(completion) >= 2 and completion[1] == EOS
    return 0.5 * right + 0.5 * stops


def verify(prompt: list[int], completion: list[int]) -> float:
    """1 when the completion is exactly [max digit, EOS]."""
    return float(completion[:2] == [max(prompt[:3]), EOS])


class PolicyNetwork(nn.Module):
    """An LSTM language model over the toy vocabulary; logits over digits and EOS."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, ACTIONS)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (B, L) → (B, L, ACTIONS)
        return self.head(self.lstm(self.embed(ids))[0])


class ValueNetwork(nn.Module):
    """V(prefix) at every position: (B, L) → (B, L)."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.embed(ids))[0]).squeeze(-1)


class RewardModel(nn.Module):
    """One score per sequence, read at its last real token (padding excluded)."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:  # (B, L) → (B,)
        scores = self.head(self.lstm(self.embed(ids))[0]).squeeze(-1)  # (B, L); right padding: causal, unaffected
        return scores.gather(1, last_token_index(attention_mask)[:, None]).squeeze(1)


def pad_completion(tokens: list[int]) -> list[int]:
    return tokens + [PAD] * (MAX_NEW - len(tokens))


def train_reward_model(rm: RewardModel, rng: random.Random, steps: int = 300, batch: int = 64) -> float:
    """Bradley–Terry on synthetic pairs; returns held-out pairwise accuracy."""

    def pairs(n: int):
        prompts, chosen, rejected = [], [], []
        while len(prompts) < n:
            p = [rng.randrange(DIGITS) for _ in range(3)] + [SEP]
            a, b = ([rng.randrange(ACTIONS) for _ in range(rng.randint(1, MAX_NEW))] for _ in range(2))
            a, b = (c[: c.index(EOS) + 1] if EOS in c else c for c in (a, b))
            sa, sb = partial_score(p, a), partial_score(p, b)
            if sa == sb:
                continue
            prompts.append(p)
            chosen.append(a if sa > sb else b)
            rejected.append(b if sa > sb else a)
        return prompts, chosen, rejected

    def scores(prompts, comps):
        ids = torch.tensor([p + pad_completion(c) for p, c in zip(prompts, comps)])
        return rm(ids, (ids != PAD).long())

    opt = torch.optim.Adam(rm.parameters(), lr=3e-3)
    for _ in range(steps):
        p, c, r = pairs(batch)
        loss, _ = bradley_terry_loss(scores(p, c), scores(p, r))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        p, c, r = pairs(500)
        _, stats = bradley_terry_loss(scores(p, c), scores(p, r))
    return float(stats["accuracy"])


class GRPO:
    """GRPO-style PPO with a critic: group-normalised GAE advantages, clipped updates, k3 KL."""

    def __init__(self, policy: PolicyNetwork, value: ValueNetwork, reward_model: RewardModel, group_size: int = 8,
                 lr: float = 3e-3, clip_eps: float = 0.2, beta: float = 0.02, gamma: float = 1.0, lam: float = 0.95,
                 temperature: float = 1.0, epochs: int = 2):
        self.policy, self.value, self.reward_model = policy, value, reward_model.eval().requires_grad_(False)
        self.ref = copy.deepcopy(policy).eval().requires_grad_(False)  # frozen reference for the KL
        self.g, self.clip_eps, self.beta, self.gamma, self.lam = group_size, clip_eps, beta, gamma, lam
        self.temperature, self.epochs = temperature, epochs
        self.opt = torch.optim.Adam(list(policy.parameters()) + list(value.parameters()), lr=lr)

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """G samples per prompt, feeding the whole prefix at each step: (B·G, T) tokens and mask."""
        seqs = prompts.repeat_interleave(self.g, dim=0)  # (N, P)
        done = torch.zeros(len(seqs), dtype=torch.bool)
        tokens, mask = [], []
        for _ in range(MAX_NEW):
            logits = self.policy(seqs)[:, -1] / self.temperature  # (N, ACTIONS): the whole prefix is read
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(1)  # (N,)
            mask.append((~done).float())
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            tokens.append(nxt)
            seqs = torch.cat([seqs, nxt[:, None]], 1)
            done |= nxt == EOS
        return torch.stack(tokens, 1), torch.stack(mask, 1)  # (N, T) each

    def logprobs(self, model: nn.Module, prompts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """log π(o_t | prefix) at the sampling temperature: (N, T)."""
        ids = torch.cat([prompts.repeat_interleave(self.g, 0), tokens], 1)  # (N, P+T)
        logits = model(ids)[:, PROMPT_LEN - 1 : -1] / self.temperature  # (N, T, ACTIONS) predicting each token
        safe = tokens.clamp(max=ACTIONS - 1)  # PAD positions: any index, masked later
        return torch.log_softmax(logits, -1).gather(-1, safe[..., None]).squeeze(-1)

    def compute_gae(self, rewards, values, mask):
        return gae(rewards, values, mask, self.gamma, self.lam)

    def compute_group_advantages(self, advantages, mask):
        """GAE advantages whitened within each prompt's group of G samples (gae_then_group)."""
        return group_whiten_tokens(advantages, mask, self.g)

    def compute_kl_divergence(self, logp, ref_logp, mask):
        """Mean k3 estimate of KL(π‖π_ref) per token: non-negative, unbiased."""
        return masked_mean(kl_penalty(logp, ref_logp, "k3"), mask)

    def ppo_loss(self, logp, old_logp, advantages, mask):
        surr = clipped_surrogate((logp - old_logp).exp(), advantages, self.clip_eps, self.clip_eps, mask)
        return masked_mean(surr.loss, mask)

    def train_step(self, prompts: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
        tokens, mask = self.generate(prompts, generator)
        n = len(tokens)
        ids = torch.cat([prompts.repeat_interleave(self.g, 0), tokens], 1)
        with torch.no_grad():
            scores = self.reward_model(ids, (ids != PAD).long())  # (N,) at the last real token
            rewards = torch.zeros_like(mask)
            rewards[torch.arange(n), mask.sum(1).long() - 1] = scores  # the score on the last completion token
            old = self.logprobs(self.policy, prompts, tokens)
            ref = self.logprobs(self.ref, prompts, tokens)
            old_values = self.value(ids)[:, PROMPT_LEN - 1 : -1]  # (N, T) V of the state before each token
            adv, returns = self.compute_gae(rewards, old_values, mask)
            adv = self.compute_group_advantages(adv, mask)
        for _ in range(self.epochs):
            logp = self.logprobs(self.policy, prompts, tokens)
            kl = self.compute_kl_divergence(logp, ref, mask)
            values = self.value(ids)[:, PROMPT_LEN - 1 : -1]
            vloss, _ = clipped_value_loss(values, old_values, returns, mask, 0.2)
            loss = self.ppo_loss(logp, old, adv, mask) + self.beta * kl + masked_mean(vloss, mask)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        prompt_list = prompts.repeat_interleave(self.g, 0).tolist()
        comps = [[t for t, m in zip(row, mrow) if m > 0] for row, mrow in zip(tokens.tolist(), mask.tolist())]
        acc = sum(verify(p, c) for p, c in zip(prompt_list, comps)) / n
        return {"reward": float(scores.mean()), "accuracy": acc, "kl": float(kl.detach())}

    def generate_and_train(self, steps: int, prompts_per_step: int, rng: random.Random, seed: int) -> list[dict]:
        gen = torch.Generator().manual_seed(seed)
        return [self.train_step(make_prompts(prompts_per_step, rng), gen) for _ in range(steps)]


def evaluate(algo: GRPO, rng: random.Random, seed: int, n: int = 64) -> dict[str, float]:
    prompts = make_prompts(n, rng)
    tokens, mask = algo.generate(prompts, torch.Generator().manual_seed(seed))
    ids = torch.cat([prompts.repeat_interleave(algo.g, 0), tokens], 1)
    with torch.no_grad():
        reward = float(algo.reward_model(ids, (ids != PAD).long()).mean())
    comps = [[t for t, m in zip(r, mr) if m > 0] for r, mr in zip(tokens.tolist(), mask.tolist())]
    acc = sum(verify(p, c) for p, c in zip(prompts.repeat_interleave(algo.g, 0).tolist(), comps)) / len(comps)
    return {"reward": reward, "accuracy": acc}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    rm = RewardModel()
    rm_acc = train_reward_model(rm, rng)
    print(f"reward model: held-out pairwise accuracy {rm_acc:.3f}")
    algo = GRPO(PolicyNetwork(), ValueNetwork(), rm)
    before = evaluate(algo, random.Random(10_000 + args.seed), args.seed)
    algo.generate_and_train(args.steps, 16, rng, args.seed)
    after = evaluate(algo, random.Random(10_000 + args.seed), args.seed)
    print(f"policy: reward {before['reward']:.3f} -> {after['reward']:.3f}, "
          f"accuracy {before['accuracy']:.3f} -> {after['accuracy']:.3f}")
    return {"rm_accuracy": rm_acc, **{f"before/{k}": v for k, v in before.items()},
            **{f"after/{k}": v for k, v in after.items()}}


if __name__ == "__main__":
    main()
