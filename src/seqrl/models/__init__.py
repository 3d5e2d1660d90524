"""Tiny LM presets, the local tokenizer, and loading of any Hugging Face causal LM."""

from seqrl.models.lm import PRESETS, ModelConfig, Policy, build_model, load_policy, load_pretrained, num_parameters
from seqrl.models.tokenizer import build_char_tokenizer

__all__ = [
    "PRESETS",
    "ModelConfig",
    "Policy",
    "build_char_tokenizer",
    "build_model",
    "load_policy",
    "load_pretrained",
    "num_parameters",
]
