"""`STaRConfig` and `hint_words` (which checks its hint template), importable without torch (the command
line checks a config before it loads torch)."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import ClassVar

from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
from seqrl.evaluation import EvalConfig
from seqrl.models.config import ModelConfig
from seqrl.prompts import PromptConfig

__all__ = ["BaseConfig", "STaRConfig", "hint_words"]


@dataclass
class BaseConfig:
    """The base model M_0: an existing model, or a short SFT of `model` trained in the run."""

    path: str | None = None
    """A model directory to start from (e.g. runs/sft_arith_tiny/checkpoint-400); None: train the
    base here with a short SFT of the `model` preset on `examples` + `hinted` worked solutions."""
    examples: int = 32
    """Worked examples of the short SFT (drawn from the train split after the STaR problems)."""
    hinted: int = 8
    """Further worked examples shown with the hint in the prompt, so that the hint format is known."""
    steps: int = 60
    """Optimizer steps of the short SFT (optim settings as the per-iteration fine-tunes)."""
    batch_size: int = 16
    """Sequences per step of the short SFT."""
    lr: float | None = None
    """Learning rate of the short SFT (None: optim.lr); the rest of `optim` applies as to the fine-tunes."""

    def __post_init__(self) -> None:
        if self.path is None:
            for name in ("examples", "steps", "batch_size"):
                if getattr(self, name) < 1:
                    raise ValueError(f"base.{name} must be >= 1 (got {getattr(self, name)})")
            if self.hinted < 0:
                raise ValueError(f"base.hinted must be >= 0 (got {self.hinted})")
        if self.lr is not None and self.lr <= 0:
            raise ValueError(f"base.lr must be > 0 (got {self.lr})")


@dataclass
class STaRConfig:
    RENAMED: ClassVar[dict[str, str]] = {"steps": "finetune_steps"}
    RENAMED_WHY: ClassVar[str] = ("steps means a run's optimizer steps in every trainer; a STaR run's length is "
                                  "iterations, each fine-tune's is finetune_steps")
    run: RunConfig = field(default_factory=lambda: RunConfig(name="star"))
    model: ModelConfig = field(default_factory=ModelConfig)
    base: BaseConfig = field(default_factory=BaseConfig)
    task: TaskConfig = field(default_factory=lambda: TaskConfig(n_train=512, n_test=200))
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3, warmup_steps=5))
    eval: EvalConfig = field(default_factory=EvalConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """How problems are rendered; the same rendering samples, trains and evaluates."""
    iterations: int = 4
    """Outer iterations N (sample, rationalize, fine-tune, evaluate)."""
    samples_per_problem: int = 1
    """Rationales sampled per training problem and iteration (the paper: 1)."""
    temperature: float = 1.0
    """Sampling temperature of rationales and rationalizations (0: greedy)."""
    top_p: float = 1.0
    """Nucleus sampling of rationales."""
    max_new_tokens: int = 64
    """Generation cap of a rationale; a truncated one is never kept."""
    stop: list[str] = field(default_factory=list)
    """Stop strings of sampling (e.g. ["</answer>"]); evaluation uses them when eval.stop is empty."""
    rationalize: bool = True
    """Rationalize failures with the gold answer as a hint (false: rejection sampling only)."""
    hint_template: str = "{question} hint: {answer}"
    """The hinted question; its own words (outside the fields) must not appear in a kept rationale."""
    restart_from_base: bool = True
    """Fine-tune each iteration from the base model (the paper) instead of the previous iteration's."""
    finetune_steps: int = 40
    """Fine-tune (optimizer) steps of iteration 1 (the paper: 40); the run's length is `iterations`."""
    step_growth: float = 1.2
    """Factor on the fine-tune steps per iteration (the paper: +20 %)."""
    batch_size: int = 8
    """Sequences per fine-tune step."""
    pass_k: int = 0
    """Also report held-out eval/pass@k from k samples per problem at eval.temperature (0: greedy only)."""
    sample_batch_size: int = 256
    """Prompts per generation call when sampling rationales."""
    accuracy_by: str = "digits"
    """Problem metadata key that splits held-out greedy accuracy into eval/acc_<key>_<value> (e.g.
    eval/acc_digits_3 with arithmetic's operand digit count); problems without the key are left out
    of the split; empty: no split."""

    def __post_init__(self) -> None:
        for name in ("iterations", "samples_per_problem", "max_new_tokens", "finetune_steps", "batch_size",
                     "sample_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"star.{name} must be >= 1 (got {getattr(self, name)})")
        if self.step_growth < 1.0:
            raise ValueError(f"star.step_growth must be >= 1 (got {self.step_growth})")
        if self.pass_k < 0:
            raise ValueError(f"star.pass_k must be >= 0 (got {self.pass_k})")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"star.stop must be a list of non-empty strings (got {self.stop!r})")
        if self.temperature < 0:  # the checks (and words) of rollout.SamplingParams, which imports torch
            raise ValueError(f"sampling.temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling.top_p must be in (0, 1] (got {self.top_p})")
        hint_words(self.hint_template)

    @property
    def method(self) -> str:
        """star; rft (rejection-sampling fine-tuning: no rationalization, several samples); or
        star-no-rationalization (one sample, no rationalization: the paper's ablation)."""
        if self.rationalize:
            return "star"
        return "rft" if self.samples_per_problem > 1 else "star-no-rationalization"


_WORD_RE = re.compile(r"[A-Za-z]+")


def hint_words(template: str) -> set[str]:
    """The words (runs of letters, lower-cased) of `template`'s own text, outside its fields.

    The template must use exactly the fields {question} and {answer}, and carry at least one word:
    that word marks the hint, so a rationale that quotes the hint can be told from one that merely
    states the answer.

    >>> sorted(hint_words("{question} hint: {answer}"))
    ['hint']
    """
    fields, literal = set(), []
    try:
        for text, name, _, _ in string.Formatter().parse(template):
            literal.append(text)
            if name is not None:
                fields.add(name)
    except ValueError as e:
        raise ValueError(f"star.hint_template {template!r}: {e}") from None
    if fields != {"question", "answer"}:
        raise ValueError(f"star.hint_template must use exactly the fields {{question}} and {{answer}} "
                         f"(got {sorted(fields)} in {template!r})")
    words = {w.lower() for w in _WORD_RE.findall(" ".join(literal))}
    if not words:
        raise ValueError(f"star.hint_template {template!r} needs a word outside its fields (e.g. 'hint') that "
                         f"marks the hint, so that a rationale quoting it can be detected")
    return words
