"""Process and outcome reward models: a causal-LM backbone with a head read at the last token of each step.

The input of a solution with steps s_1..s_T to question q is the templated question followed by the
solution in the house format, tokenised piece by piece (`step_pieces`; TRL's PRM layout with our
markers)::

    prompt_ids(q) + ids("<think>" + s_1 + STEP_SEP) + … + ids(s_{T-1} + "</think>") + ids("<answer>a</answer>")

and step t's score is read at the last token of its piece (the separator or closing tag after it),
so one forward pass scores every step of a solution (a per-step-prefix scorer needs T passes), and a
policy checkpoint used as the backbone reads text in the format it was trained on. A PRM is trained on
a label at every step end; an ORM on one label, at the last step's end.

The model is `AutoModelForTokenClassification` of the backbone's architecture (Llama, Qwen2, any
HF causal LM with a token-classification class): the backbone's weights plus a linear head with
2 outputs (``head="2class"``, score = softmax probability of class 1) or 1 output
(``head="scalar"``, score = sigmoid of the logit). Kind and head are kept in ``config.json``
(``seqrl_prm``), so a checkpoint folder loads back as one object with `ProcessRewardModel.load`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from seqrl.data.stepwise import split_steps, step_pieces
from seqrl.models import heads
from seqrl.models.lm import ModelConfig, Policy, dequantised, load_policy, model_device, pretrained_source
from seqrl.types import Problem
from seqrl.utils import hf
from seqrl.utils.checkpoint import apply_user_mode, verify_if_recorded

KINDS = ("prm", "orm")
HEADS = ("2class", "scalar")


class StepsTooLongError(ValueError):
    """A solution whose steps do not fit the reward model's context."""


@dataclass
class Encoded:
    """One solution laid out for the reward model."""

    ids: list[int]
    """Prompt tokens, then each step's tokens followed by the separator's."""
    ends: list[int]
    """Index in `ids` of the last token of each step's piece (where its score is read)."""


def _check(kind: str, head: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"prm.kind must be one of {KINDS} (got {kind!r})")
    if head not in HEADS:
        raise ValueError(f"prm.head must be one of {HEADS} (got {head!r})")


class ProcessRewardModel:
    """A PRM or ORM: token-classification model + tokenizer + kind and head.

    `score(problems, solutions)` returns per-solution lists of scores in [0, 1]: one per step for a
    PRM, one (the last step's) for an ORM. `tokens_scored` counts every token run through the model.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, kind: str = "prm",
                 head: str = "2class"):
        _check(kind, head)
        want = 2 if head == "2class" else 1
        if model.config.num_labels != want:
            raise ValueError(f"a {head} head needs num_labels={want} (the model has {model.config.num_labels})")
        self.model, self.tokenizer, self.kind, self.head = model, tokenizer, kind, head
        model.config.seqrl_prm = {"kind": kind, "head": head}
        self.tokens_scored = 0

    # ---------------------------------------------------------------------------------- build / io
    @classmethod
    def build(cls, backbone: ModelConfig, kind: str = "prm", head: str = "2class",
              device: str | torch.device | None = None) -> ProcessRewardModel:
        """A fresh head on a backbone: a preset (fresh weights) or any causal-LM folder (its weights)."""
        _check(kind, head)
        num_labels = 2 if head == "2class" else 1
        if backbone.path is None:
            policy = load_policy(backbone)  # fresh preset weights from torch's RNG
            config = policy.model.config
            config.num_labels, config.classifier_dropout = num_labels, 0.0
            model = AutoModelForTokenClassification.from_config(config, attn_implementation=backbone.attn_implementation)
            model.model.load_state_dict(policy.model.model.state_dict())
            tokenizer = policy.tokenizer
        else:
            where, extra = pretrained_source(backbone.path)  # a .gguf file: its folder + gguf_file
            config = AutoConfig.from_pretrained(where, **extra)
            config.num_labels, config.classifier_dropout = num_labels, 0.0
            model = hf.from_pretrained(
                AutoModelForTokenClassification, where, fresh=("score.", "classifier."), config=config, dtype=torch.float32, attn_implementation=backbone.attn_implementation,
                use_kernels=backbone.hub_kernels, **extra)
            model = dequantised(model, backbone.path)
            tokenizer = _load_tokenizer(where, **extra)
        if device is not None:
            model.to(device)
        return cls(model, tokenizer, kind, head)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device | None = None) -> ProcessRewardModel:
        """A checkpoint folder written by `save` (or by `seqrl train prm|orm`)."""
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ValueError(f"{path}: not a reward-model folder (no config.json)")
        verify_if_recorded(path)  # a seqrl checkpoint: a file changed since its save is named
        model = hf.from_pretrained(AutoModelForTokenClassification, path, dtype=torch.float32, use_kernels=False)
        info = getattr(model.config, "seqrl_prm", None)
        if not isinstance(info, dict) or "kind" not in info or "head" not in info:
            raise ValueError(f"{path}: config.json has no seqrl_prm entry (kind, head): not a PRM/ORM checkpoint")
        if device is not None:
            model.to(device)
        return cls(model.eval(), _load_tokenizer(path), info["kind"], info["head"])

    def save(self, path: str | Path) -> None:
        with hf.quiet():
            self.model.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
        apply_user_mode(path)

    @property
    def max_seq_len(self) -> int:
        return int(self.model.config.max_position_embeddings)

    # ---------------------------------------------------------------------------------- layout
    def prompt_ids(self, question: str) -> list[int]:
        return Policy(self.model, self.tokenizer).encode_prompts([question])[0]

    def encode(self, question: str, steps: Sequence[str], prompt: list[int] | None = None) -> Encoded:
        """The token layout of one solution (see the module docstring); no length check."""
        ids = list(self.prompt_ids(question) if prompt is None else prompt)
        ends = []
        for piece in step_pieces(steps):
            ids += self.tokenizer.encode(piece, add_special_tokens=False)
            ends.append(len(ids) - 1)
        return Encoded(ids, ends)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, L, C) head outputs at every position (right-padded batches)."""
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, L, C)

    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """(B, P, C) head outputs at positions `index` (B, P) (right-padded batches): `logits` read there."""
        logits = self.logits(input_ids, attention_mask)  # (B, L, C)
        return logits.gather(1, index[..., None].expand(-1, -1, logits.shape[-1]))  # (B, P, C)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(…,) score in [0, 1] from (…, C) logits."""
        if self.head == "2class":
            return logits.float().softmax(-1)[..., 1]
        return logits.float()[..., 0].sigmoid()

    # ---------------------------------------------------------------------------------- scoring
    @torch.no_grad()
    def score(self, problems: Sequence[Problem | str], solutions: Sequence[str | Sequence[str]],
              batch_size: int = 32) -> list[list[float]]:
        """Step scores of each solution (problem i goes with solution i): one forward pass per solution
        for all its steps, `batch_size` solutions per pass. A solution is a list of steps or a
        house-format completion (split with `split_steps`); one with no steps scores ``[]``.
        A solution longer than the context is `StepsTooLongError` naming it."""
        if len(problems) != len(solutions):
            raise ValueError(f"score: {len(problems)} problems for {len(solutions)} solutions")
        questions = [p.prompt if isinstance(p, Problem) else p for p in problems]
        steps = [split_steps(s) if isinstance(s, str) else list(s) for s in solutions]
        prompt_cache: dict[str, list[int]] = {}
        encoded = []
        for i, (q, st) in enumerate(zip(questions, steps)):
            if q not in prompt_cache:
                prompt_cache[q] = self.prompt_ids(q)
            enc = self.encode(q, st, prompt_cache[q])
            if len(enc.ids) > self.max_seq_len:
                raise StepsTooLongError(f"solution {i} has {len(enc.ids)} tokens with its {len(st)} steps, more than "
                                        f"the reward model's context of {self.max_seq_len}")
            encoded.append(enc)
        out: list[list[float]] = [[] for _ in encoded]
        todo = [i for i, e in enumerate(encoded) if e.ends]
        todo.sort(key=lambda i: len(encoded[i].ids))  # similar lengths share a batch: less padding
        dev = model_device(self.model)
        was_training = self.model.training
        self.model.eval()
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        for start in range(0, len(todo), batch_size):
            chunk = [encoded[i] for i in todo[start:start + batch_size]]
            ids, mask = pad_right([e.ids for e in chunk], pad)
            ends = [e.ends if self.kind == "prm" else e.ends[-1:] for e in chunk]
            index, _ = heads.pad_positions(ends)  # (b, P)
            p = self.probs(self.logits_at(ids.to(dev), mask.to(dev), index.to(dev))).cpu()  # (b, P)
            self.tokens_scored += int(mask.sum())
            for i, e, row in zip(todo[start:start + batch_size], ends, p):
                out[i] = row[: len(e)].tolist()
        if was_training:
            self.model.train()
        return out

    def score_steps(self, question: str, steps: Sequence[str]) -> list[float]:
        """Scores of one solution's steps (one per step for a PRM, one for an ORM)."""
        return self.score([question], [list(steps)])[0]


def pad_right(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) right-padded ids and attention mask (causal attention: padding after a row never
    changes its earlier positions)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # (B, L)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)  # (B, L)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def _load_tokenizer(path: str | Path, **extra) -> PreTrainedTokenizerBase:
    tok = AutoTokenizer.from_pretrained(path, **extra)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok
