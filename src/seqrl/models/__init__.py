"""Tiny LM presets, the local tokenizer, loading of any Hugging Face causal LM, and the Decision Transformer.

The names are re-exported lazily (PEP 562): importing the package, or its torch-free `seqrl.models.config`,
does not import torch.
"""

from importlib import import_module

_LAZY = {
    "DecisionTransformer": "seqrl.models.dt",
    "MLPPolicy": "seqrl.models.dt",
    "PRESETS": "seqrl.models.config",
    "ModelConfig": "seqrl.models.config",
    "Policy": "seqrl.models.lm",
    "build_char_tokenizer": "seqrl.models.tokenizer",
    "build_model": "seqrl.models.lm",
    "load_policy": "seqrl.models.lm",
    "load_pretrained": "seqrl.models.lm",
    "num_parameters": "seqrl.models.lm",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'seqrl.models' has no attribute {name!r}")
