"""The VLA model: shapes, FiLM and cross-attention masks, decoder causality, frozen MiniLM, exact save/load."""

from __future__ import annotations

import pytest
import torch

from seqrl.core.losses import action_loss
from seqrl.models.vla import CrossAttentionBlock, FiLMBlock, MissionVocab, VLAModel, VLAModelConfig

FUSIONS = ("film", "cross_attention")


def _inputs(B: int = 3, K: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    image = torch.stack([torch.randint(0, 11, (B, K, 7, 7)), torch.randint(0, 6, (B, K, 7, 7)),
                         torch.randint(0, 3, (B, K, 7, 7))], dim=-1)  # (B, K, 7, 7, 3)
    prev = torch.randint(0, 8, (B, K), generator=g)
    direction = torch.randint(0, 4, (B, K), generator=g)
    return image, prev, direction


def _model(fusion: str, language: str = "gru", **kw) -> VLAModel:
    torch.manual_seed(0)
    return VLAModel(None, 7, 7, fusion=fusion, language=language, **kw).eval()


def test_seed_constructor_and_forward_keep_working():
    m = VLAModel(40, 7, 7).eval()  # VLAModel(vocab_size, image_size, action_dim)
    image, prev, _ = _inputs(B=2, K=1)
    text = m.encode_missions(["go to the red ball", "pick up the blue key"])
    assert m(image[:, 0], text, prev[:, 0]).shape == (2, 7)  # forward(image, text, previous_actions)
    assert m(image, text, prev).shape == (2, 1, 7)
    with pytest.raises(ValueError, match="vocab_size"):
        VLAModel(5, 7, 7)


@pytest.mark.parametrize("fusion", FUSIONS)
def test_decoder_is_causal(fusion):
    # changing step j (its image, previous action, direction) leaves every prediction at steps < j unchanged
    m = _model(fusion)
    image, prev, direction = _inputs()
    text = m.encode_missions(["go to the red ball", "pick up a key", "open the door on your left"])
    base = m(image, text, prev, direction)
    for j in range(4):
        img2, prev2, dir2 = image.clone(), prev.clone(), direction.clone()
        img2[:, j] = (img2[:, j] + 1) % 6
        prev2[:, j] = (prev2[:, j] + 1) % 8
        dir2[:, j] = (dir2[:, j] + 1) % 4
        out = m(img2, text, prev2, dir2)
        torch.testing.assert_close(out[:, :j], base[:, :j], rtol=0, atol=0)
        assert not torch.allclose(out[:, j], base[:, j])


@pytest.mark.parametrize("fusion", FUSIONS)
def test_left_padding_is_ignored_and_mission_matters(fusion):
    m = _model(fusion)
    image, prev, direction = _inputs()
    text = m.encode_missions(["go to the red ball"] * 3)
    mask = torch.tensor([[0, 0, 1, 1]] * 3)
    base = m(image, text, prev, direction, mask)
    img2, prev2 = image.clone(), prev.clone()
    img2[:, :2] = 0
    prev2[:, :2] = 5
    torch.testing.assert_close(m(img2, text, prev2, direction, mask)[:, 2:], base[:, 2:], rtol=0, atol=0)
    other = m(image, m.encode_missions(["pick up the purple box"] * 3), prev, direction, mask)
    assert not torch.allclose(other[:, 2:], base[:, 2:])


@pytest.mark.parametrize("fusion", FUSIONS)
def test_encoding_only_real_steps_matches_encoding_every_step(fusion):
    # parity of the padded-step skip: logits at real steps and every gradient as when all B·K images are
    # encoded (skip_padding False, also the path under torch.compile); rows with 1, 2 and 4 real steps
    m = _model(fusion)
    m.train(False)
    image, prev, direction = _inputs()
    text = m.encode_missions(["go to the red ball", "pick up a key", "open the door on your left"])
    mask = torch.tensor([[0, 0, 0, 1], [0, 0, 1, 1], [1, 1, 1, 1]])
    target = torch.randint(0, 7, (3, 4), generator=torch.Generator().manual_seed(5))

    def run():
        m.zero_grad()
        logits = m(image, text, prev, direction, mask)
        action_loss(logits, target, mask, discrete=True).backward()
        return logits.detach(), {k: p.grad.clone() for k, p in m.named_parameters() if p.grad is not None}

    logits, grads = run()
    m.skip_padding = False
    ref_logits, ref_grads = run()
    real = mask.bool()
    torch.testing.assert_close(logits[real], ref_logits[real], rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for k in grads:
        torch.testing.assert_close(grads[k], ref_grads[k], rtol=1e-4, atol=1e-6, msg=k)


def test_film_block_shapes_and_identity_at_zero_modulation():
    block = FiLMBlock(8)
    x, cond = torch.randn(5, 8, 7, 7), torch.randn(5, 8)
    assert block(x, cond).shape == (5, 8, 7, 7)
    torch.nn.init.zeros_(block.film.weight)
    torch.nn.init.zeros_(block.film.bias)  # γ = β = 0: x + ReLU(0 · conv(x) + 0) = x
    torch.testing.assert_close(block(x, cond), x, rtol=0, atol=0)


def test_cross_attention_never_attends_to_padding():
    torch.manual_seed(0)
    block = CrossAttentionBlock(8, 2, 0.0).eval()
    cells, tokens = torch.randn(2, 49, 8), torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    out, weights = block(cells, tokens, mask, need_weights=True)
    assert out.shape == (2, 49, 8) and weights.shape == (2, 49, 5)
    assert weights[0, :, 3:].abs().max() == 0 and torch.allclose(weights.sum(-1), torch.ones(2, 49))
    tokens2 = tokens.clone()
    tokens2[0, 3:] = 100.0  # garbage in padded slots changes nothing
    torch.testing.assert_close(block(cells, tokens2, mask), block(cells, tokens, mask), rtol=0, atol=0)


@pytest.mark.parametrize("fusion", FUSIONS)
def test_save_load_is_exact(tmp_path, fusion):
    from seqrl.utils.checkpoint import load_checkpoint, save_checkpoint

    m = _model(fusion)
    image, prev, direction = _inputs()
    text = m.encode_missions(["go to the red ball", "pick up a key", "open the door"])
    path = save_checkpoint(tmp_path, 1, m, state={"policy": {"model": m.kwargs}})
    torch.manual_seed(123)
    m2 = VLAModel(**m.kwargs).eval()
    assert not torch.equal(m2(image, text, prev, direction), m(image, text, prev, direction))
    load_checkpoint(path, m2, restore_rng=False)
    torch.testing.assert_close(m2(image, text, prev, direction), m(image, text, prev, direction), rtol=0, atol=0)


def test_frozen_minilm_is_not_trained_not_saved_and_cached():
    m = _model("cross_attention", language="minilm")
    backbone = m.language.backbone
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    assert not any(k.startswith("language.backbone") for k in m.state_dict())
    image, prev, direction = _inputs()
    text = m.encode_missions(["go to the red ball", "pick up a key", "go to the red ball"])
    proj_before = m.language.proj_tokens.weight.clone()
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    m.train()
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(m(image, text, prev, direction).reshape(-1, 7), prev.clamp(max=6).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(torch.equal(before[k], v) for k, v in backbone.state_dict().items())
    assert not any(p.requires_grad for p in backbone.parameters())
    assert not torch.equal(proj_before, m.language.proj_tokens.weight)  # the projection does learn
    assert len(m.language._cache) == 2  # one entry per distinct mission


def test_minilm_sentence_embedding_matches_sentence_transformers():
    # parity: the cached sentence embedding is all-MiniLM-L6-v2's own (mean pooling, L2-normalised)
    from sentence_transformers import SentenceTransformer

    from seqrl.models.vla import minilm_path

    m = _model("film", language="minilm")
    key = tuple(m.encode_missions(["pick up the blue key"])[0].tolist()[:5])
    _, sentence = m.language._encode(key)
    ref = SentenceTransformer(str(minilm_path()), device="cpu").encode(["pick up the blue key"], convert_to_tensor=True)
    torch.testing.assert_close(sentence, ref[0].float(), rtol=0, atol=1e-5)


def test_bad_inputs_are_named():
    m = _model("film")
    image, prev, _ = _inputs()
    text = m.encode_missions(["go to the red ball"] * 3)
    with pytest.raises(ValueError, match="image values"):
        m(image + 20, text, prev)
    with pytest.raises(ValueError, match="previous_actions"):
        m(image, text, prev[:, :2])
    with pytest.raises(ValueError, match="exceed the context"):
        m(torch.cat([image, image], 1), text, torch.cat([prev, prev], 1))
    with pytest.raises(ValueError, match="model.fusion"):
        VLAModelConfig(fusion="concat")
    with pytest.raises(ValueError, match="divisible"):
        VLAModelConfig(hidden_size=10, n_head=3)
    assert MissionVocab().encode(["go to the zebra"], 5)[0, 3] == MissionVocab.UNK


def test_get_action_is_greedy_at_zero_temperature_and_samples_the_softmax_above():
    m = _model("film", hidden_size=8, n_layer=1, n_fusion=1)
    image, prev, direction = _inputs(B=1, K=2)
    text = m.encode_missions(["go to the red ball"])
    with torch.no_grad():  # a window of 2 < K = 4 steps: get_action left-pads it
        padded = m(torch.cat([image.new_zeros(1, 2, 7, 7, 3), image], 1), text,
                   torch.cat([prev.new_zeros(1, 2), prev], 1), torch.cat([direction.new_zeros(1, 2), direction], 1),
                   torch.tensor([[0, 0, 1, 1]]))[:, -1]
    assert m.get_action(image, text, prev, direction).item() == padded.argmax(-1).item()
    n = 3000
    rows = lambda t: t.expand(n, *t.shape[1:])  # noqa: E731 — the same window n times
    for T in (1.0, 2.0):
        draws = m.get_action(rows(image), rows(text), rows(prev), rows(direction), temperature=T,
                             generator=torch.Generator().manual_seed(1))
        freq = torch.bincount(draws, minlength=7).double() / n
        want = torch.softmax(padded[0].double() / T, -1)
        assert (freq - want).abs().max() < 0.035, (T, freq, want)  # 3000 draws: std ≤ 0.0092
        again = m.get_action(rows(image), rows(text), rows(prev), rows(direction), temperature=T,
                             generator=torch.Generator().manual_seed(1))
        assert torch.equal(draws, again)
    with pytest.raises(ValueError, match="temperature"):
        m.get_action(image, text, prev, direction, temperature=-1.0)
