"""LoRA adapters (Hu et al. 2021) through `peft`: the base weights stay frozen, low-rank A·B updates train.

With LoRA the policy is a `peft.PeftModel`; its frozen base *is* the reference policy of a KL
penalty (the adapter switched off), so no second copy of the weights is kept. A LoRA checkpoint
folder holds the adapter (``adapter_model.safetensors`` + ``adapter_config.json``, naming the base
model's path) and the tokenizer: `AutoModelForCausalLM.from_pretrained(folder)` and
`seqrl.models.load_policy` load base + adapter from it, as for any PEFT adapter folder.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from seqrl.models.config import LoRAConfig

__all__ = ["LoRAConfig", "adapter_disabled", "apply_lora", "is_lora"]


def apply_lora(model: torch.nn.Module, cfg: LoRAConfig) -> torch.nn.Module:
    """Wrap `model` with fresh adapters (B = 0, so the wrapped model computes exactly what `model` did).

    A target name that matches no module of the model is an error naming it.
    """
    from peft import LoraConfig, get_peft_model

    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in cfg.target_modules if t not in names]
    if missing:
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ValueError(f"lora.target_modules {missing} match no module of the model; its linear layers: {linear}")
    base = getattr(model, "name_or_path", "") or ""
    if base and Path(base).is_dir():
        base = str(Path(base).resolve())  # the adapter folder names its base; absolute, so it loads from anywhere
    config = LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                        target_modules=list(cfg.target_modules), task_type="CAUSAL_LM")
    wrapped = get_peft_model(model, config)
    wrapped.peft_config["default"].base_model_name_or_path = base or None
    return wrapped


def is_lora(model: torch.nn.Module) -> bool:
    """True for a `peft.PeftModel` (a model with adapters)."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


def adapter_disabled(model: torch.nn.Module):
    """A context in which a PEFT model computes its frozen base (the reference policy); a no-op otherwise."""
    return model.disable_adapter() if is_lora(model) else contextlib.nullcontext()
