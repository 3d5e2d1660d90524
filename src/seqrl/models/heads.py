"""Scalar heads on causal-LM backbones: reward models (one score per sequence) and critics (one
value per token).

Both are `AutoModelForSequenceClassification` with ``num_labels=1`` (a linear ``score`` head on the
backbone's last hidden states), so a saved folder loads back with transformers, and any causal LM
folder (a policy checkpoint, a hub model) starts one: the backbone's weights load, the head is new.
Scores are read here from the per-token head output rather than through the class's own pooling:
the sequence score sits at the last *real* token (`seqrl.core.preference.last_token_index`) whatever
the padding side or the pad id (the class finds the last non-pad id, which fails when pad = EOS), and
position ids follow the attention mask, so a left-padded row scores as it does unpadded.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from seqrl.core.preference import last_token_index
from seqrl.models.lm import ModelConfig, build_model, cache_kwarg, dequantised, model_device, pretrained_source
from seqrl.models.tokenizer import build_char_tokenizer
from seqrl.prompts import PromptConfig, render_prompt
from seqrl.types import Problem, RewardResult
from seqrl.utils import hf
from seqrl.utils.checkpoint import verify_if_recorded
from seqrl.utils.dist import bf16_autocast


def load_scalar_model(cfg: ModelConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A one-output sequence-classification model and its tokenizer: from `cfg.path` (a reward-model
    folder, or any causal LM folder whose backbone it reuses) or a fresh preset (torch's RNG)."""
    if cfg.path is None:
        tokenizer = build_char_tokenizer()
        lm = build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
        config = lm.config
        config.num_labels = 1
        config.architectures = None
        model = AutoModelForSequenceClassification.from_config(config, attn_implementation=cfg.attn_implementation)
        del lm
    else:
        path = Path(cfg.path)
        where, extra = pretrained_source(cfg.path)  # a .gguf file: its folder + gguf_file
        if not extra and (path.exists() or cfg.path.startswith((".", "/", "~"))) and not (path / "config.json").is_file():
            raise ValueError(f"model.path {cfg.path!r} is not a model directory (no config.json)")
        if not extra:
            verify_if_recorded(path)  # a seqrl checkpoint: a file changed since its save is named
        try:
            tokenizer = AutoTokenizer.from_pretrained(where, **extra)
            model = hf.from_pretrained(
                AutoModelForSequenceClassification, where, fresh=("score.", "classifier."), num_labels=1,
                dtype=torch.float32, attn_implementation=cfg.attn_implementation, use_kernels=cfg.hub_kernels, **extra)
            model = dequantised(model, cfg.path)
        except OSError as e:
            raise ValueError(f"model.path {cfg.path!r} could not be loaded as a scalar-head model: {e}") from e
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.config.pad_token_id = tokenizer.pad_token_id  # transformers' own pooling needs it
    return model, tokenizer


def head_of(model: PreTrainedModel) -> torch.nn.Module:
    """The model's linear head (``score`` or ``classifier``)."""
    for name in ("score", "classifier"):
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    raise ValueError(f"{type(model).__name__} has no 'score' or 'classifier' head")


def _on_device(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """(device, ids, mask, position ids or None) for a scalar model's forward: position ids count real tokens
    only where a row is left-padded; otherwise the model's own (0..L-1) are already right for every real
    token (per-row positions made the tiny RM's forward + backward 5 % slower)."""
    dev = model_device(model)
    left_padded = bool((attention_mask[:, 0] == 0).any())  # before the copy: no device sync
    ids, attn = input_ids.to(dev), attention_mask.to(dev)
    pos = (attn.long().cumsum(1) - 1).clamp(min=0) if left_padded else None  # (B, L)
    return dev, ids, attn, pos


def token_scores(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 bf16: bool = False) -> torch.Tensor:
    """The head's output at every position: input_ids, attention_mask (B, L) → (B, L) float32.
    Position ids count real tokens only, so padding on either side leaves the real tokens' values
    unchanged."""
    dev, ids, attn, pos = _on_device(model, input_ids, attention_mask)
    with bf16_autocast(dev, bf16):
        hidden = model.base_model(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state  # (B, L, H)
        out = head_of(model)(hidden)  # (B, L, 1)
    return out.squeeze(-1).float()  # (B, L)


def scores_at(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, index: torch.Tensor,
              bf16: bool = False) -> torch.Tensor:
    """The head's output at positions `index` (B, P) of each row: (B, P) float32, `token_scores` read there."""
    scores = token_scores(model, input_ids, attention_mask, bf16)  # (B, L)
    return scores.gather(1, index.to(scores.device))


def sequence_scores(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    bf16: bool = False) -> torch.Tensor:
    """One score per row, the head at its last real token: (B, L) → (B,)."""
    idx = last_token_index(attention_mask)  # (B,)
    return scores_at(model, input_ids, attention_mask, idx[:, None], bf16).squeeze(1)  # (B,)


def shared_prefix_pair_scores(model: PreTrainedModel, chosen: list[list[int]], rejected: list[list[int]],
                              pad_id: int, bf16: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(r_chosen, r_rejected) (m,) each, as `sequence_scores` on the 2m right-padded rows gives them, with
    the tokens a pair's two sides share at their start (the prompt, and any common opening) computed
    once: a prefix forward over each pair's shared tokens (all but the last token of the shorter side at
    most, so each side keeps one), its KV cache indexed to both sides, then one forward over the rest of
    each side at the following positions, the prefix's padding masked. Same scores and gradients as the
    padded forward up to float round-off (tested); falls back to it when some pair shares no token (a
    prefix row of padding alone would fill its cache slots with NaN, which even a masked slot passes on)."""
    m = len(chosen)
    sides = chosen + rejected
    shared = []
    for c, r in zip(chosen, rejected):
        k = 0
        limit = min(len(c), len(r)) - 1
        while k < limit and c[k] == r[k]:
            k += 1
        shared.append(k)
    if min(shared, default=0) == 0:
        ids, attn = pad_sequences(sides, pad_id)  # (2m, L)
        scores = sequence_scores(model, ids, attn, bf16)  # (2m,)
        return scores[:m], scores[m:]
    dev = model_device(model)
    lengths = torch.tensor(shared)  # (m,)
    pre_ids, pre_mask = pad_sequences([c[:k] for c, k in zip(chosen, shared)], pad_id)  # (m, K)
    both = torch.cat([torch.arange(m), torch.arange(m)])  # (2m,) side → its pair
    rest, rest_mask = pad_sequences([s[k:] for s, k in zip(sides, shared + shared)], pad_id)  # (2m, W)
    pos = lengths[both][:, None] + torch.arange(rest.shape[1])[None, :]  # (2m, W)
    with bf16_autocast(dev, bf16):
        pre = model.base_model(input_ids=pre_ids.to(dev), attention_mask=pre_mask.to(dev),
                               position_ids=torch.arange(pre_ids.shape[1])[None, :].expand(m, -1).to(dev),
                               use_cache=True)
        kw = cache_kwarg(model.base_model)
        cache = getattr(pre, kw)
        cache.batch_select_indices(both.to(dev))  # (m, …) → (2m, …): differentiable indexing
        hidden = model.base_model(input_ids=rest.to(dev), attention_mask=torch.cat([pre_mask[both], rest_mask], 1).to(dev),
                                  position_ids=pos.to(dev), use_cache=True, **{kw: cache}).last_hidden_state
        out = head_of(model)(hidden).squeeze(-1).float()  # (2m, W)
    scores = out.gather(1, last_token_index(rest_mask).to(out.device)[:, None]).squeeze(1)  # (2m,)
    return scores[:m], scores[m:]


def pad_positions(positions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row position lists → (index (B, P) long, valid (B, P) bool), P the longest list; a short row's
    extra slots repeat its first position (0 for an empty row), for `scores_at` / `logits_at`."""
    width = max((len(p) for p in positions), default=0) or 1
    index = torch.zeros((len(positions), width), dtype=torch.long)
    valid = torch.zeros((len(positions), width), dtype=torch.bool)
    for i, p in enumerate(positions):
        if p:
            index[i] = p[0]
            index[i, : len(p)] = torch.tensor(p)
            valid[i, : len(p)] = True
    return index, valid


def pad_sequences(seqs: list[list[int]], pad_id: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists → (ids, attention mask) (B, L), padded on `side` ("left" or "right")."""
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("pad_sequences: every sequence needs at least one token")
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # (B, L)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)  # (B, L)
    for i, s in enumerate(seqs):
        sl = slice(0, len(s)) if side == "right" else slice(width - len(s), width)
        ids[i, sl] = torch.tensor(s)
        attn[i, sl] = 1
    return ids, attn


def completion_values(model: PreTrainedModel, prompt_ids: list[list[int]], completion_ids: torch.Tensor,
                      pad_id: int, bf16: bool = False) -> torch.Tensor:
    """A critic's value of each completion token's state: V_t is read at the position that predicts
    completion token t (the last prompt token for t = 0), as the policy's log-prob of token t is.
    prompt_ids: m lists; completion_ids (m, T) → (m, T) on completion_ids' device (positions past a
    completion's end hold the values of padding; mask them)."""
    m, t = completion_ids.shape
    seqs = [list(p) + completion_ids[i].tolist() for i, p in enumerate(prompt_ids)]
    ids, attn = pad_sequences(seqs, pad_id, side="right")  # (m, L)
    scores = token_scores(model, ids, attn, bf16)  # (m, L)
    lengths = torch.tensor([len(p) for p in prompt_ids])  # (m,)
    pos = (lengths[:, None] - 1 + torch.arange(t)[None, :]).to(scores.device)  # (m, T)
    return scores.gather(1, pos).to(completion_ids.device)  # (m, T)


def encode_pair(tokenizer: PreTrainedTokenizerBase, prompt: str, completion: str) -> list[int]:
    """Token ids a reward model scores: the prompt text as the policy received it, the completion,
    then EOS (every completion ends the same way, so a truncated one is not told apart by a missing
    EOS token)."""
    ids = tokenizer.encode(prompt, add_special_tokens=not tokenizer.chat_template) if prompt else []
    ids += tokenizer.encode(completion, add_special_tokens=False)
    return ids + [tokenizer.eos_token_id]


class RewardModelReward:
    """A trained reward-model folder as a reward function ``(problems, completions) -> results``.

    The prompt is rendered as a policy with the default prompt config receives it (`seqrl.prompts`:
    the question in a user turn through the tokenizer's chat template) — the text the preference
    builder writes. Runs in the trainer process (a model forward, no untrusted code), on `device`
    (auto: CUDA when available)."""

    def __init__(self, path: str, device: str = "auto", batch_size: int = 64, prompt: PromptConfig | None = None):
        from seqrl.utils.dist import resolve_device

        self.path, self.batch_size, self.prompt = str(path), batch_size, prompt or PromptConfig()
        self.model, self.tokenizer = load_scalar_model(ModelConfig(path=self.path))
        self.model.to(resolve_device(device)).eval().requires_grad_(False)
        self.__name__ = "rm"

    @torch.no_grad()
    def __call__(self, problems: list[Problem], completions: list[str]) -> list[RewardResult]:
        seqs = [encode_pair(self.tokenizer, render_prompt(self.tokenizer, p, self.prompt), c)
                for p, c in zip(problems, completions)]
        limit = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        out: list[RewardResult] = []
        for i in range(0, len(seqs), self.batch_size):
            chunk = [s[-limit:] if limit else s for s in seqs[i : i + self.batch_size]]
            ids, attn = pad_sequences(chunk, self.tokenizer.pad_token_id)
            out += [RewardResult(float(s), "reward model score") for s in sequence_scores(self.model, ids, attn).tolist()]
        return out


class ValueHead(torch.nn.Module):
    """A linear value head on a policy's last hidden states (PPO's shared-backbone critic):
    hidden (..., H) → (...,)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.score = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.normal_(self.score.weight, std=0.02)
        torch.nn.init.zeros_(self.score.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.score(hidden).squeeze(-1)
