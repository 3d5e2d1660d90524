"""Tiny LM presets, the local tokenizer, loading of any Hugging Face causal LM, and the Decision Transformer."""

from seqrl.models.dt import DecisionTransformer, MLPPolicy
from seqrl.models.lm import PRESETS, ModelConfig, Policy, build_model, load_policy, load_pretrained, num_parameters
from seqrl.models.tokenizer import build_char_tokenizer

__all__ = [
    "DecisionTransformer",
    "MLPPolicy",
    "PRESETS",
    "ModelConfig",
    "Policy",
    "build_char_tokenizer",
    "build_model",
    "load_policy",
    "load_pretrained",
    "num_parameters",
]
