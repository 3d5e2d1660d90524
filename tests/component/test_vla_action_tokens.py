"""Continuous actions as OpenVLA-style bin tokens: the tokenizer by hand, the VLA's binned head (shapes,
causality, decoding, save/load) and a tiny regression it learns (no continuous language task is at hand)."""

from __future__ import annotations

import json

import pytest
import torch

from seqrl.core.losses import action_loss
from seqrl.models.action_tokens import ActionTokenizer
from seqrl.models.vla import VLAModel


def test_tokenizer_bins_by_hand_and_round_trip_within_half_a_bin():
    t = ActionTokenizer(low=[0.0], high=[1.0], bins=256)
    a = torch.tensor([[0.0], [1 / 256], [0.5], [0.999], [1.0], [-3.0], [7.0]], dtype=torch.float64)
    assert t.encode(a)[:, 0].tolist() == [0, 1, 128, 255, 255, 0, 255]  # ends clip into the end bins
    assert t.decode(torch.tensor([[0], [255]]))[:, 0].tolist() == pytest.approx([0.5 / 256, 255.5 / 256])
    x = torch.rand(10_000, 3, generator=torch.Generator().manual_seed(0)) * 4 - 2  # in [-2, 2)
    t3 = ActionTokenizer([-2.0] * 3, [2.0] * 3, bins=256)
    err = (t3.decode(t3.encode(x)) - x).abs()
    assert err.max() <= 4 / 256 / 2 + 1e-6  # half a bin width
    assert t3.encode(x).max() == 255 and t3.encode(x).min() == 0


def test_tokenizer_fit_uses_the_1st_and_99th_percentiles_and_keeps_constant_dimensions():
    a = torch.stack([torch.arange(101.0), torch.full((101,), 0.25)], dim=1)  # (101, 2)
    a[0, 0] = -1e6  # an outlier below the 1st percentile does not widen the bins
    t = ActionTokenizer.fit(a, bins=4)
    # torch.quantile (linear): 1st percentile of [-1e6, 1, 2, …, 100] is the value at rank 1 = 1, the 99th 99
    assert t.low.tolist() == [1.0, 0.25] and t.high.tolist() == [99.0, 0.25]
    assert t.encode(torch.tensor([[1.0, 0.25], [50.0, 9.0], [-1e6, -9.0]])).tolist() == [[0, 0], [2, 0], [0, 0]]
    assert t.decode(torch.tensor([[3, 0], [3, 3]])).tolist() == [[86.75, 0.25], [86.75, 0.25]]
    assert ActionTokenizer(**t.to_dict()).to_dict() == t.to_dict()


def test_tokenizer_bad_inputs_are_named():
    with pytest.raises(ValueError, match="bins must be"):
        ActionTokenizer([0.0], [1.0], bins=1)
    with pytest.raises(ValueError, match="high < low in dimension 1"):
        ActionTokenizer([0.0, 0.0], [1.0, -1.0])
    with pytest.raises(ValueError, match="finite"):
        ActionTokenizer([0.0], [float("inf")])
    t = ActionTokenizer([0.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="end in 2 dimensions"):
        t.encode(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="NaN"):
        t.encode(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 256\)"):
        t.decode(torch.tensor([[0, 256]]))
    with pytest.raises(ValueError, match="quantiles"):
        ActionTokenizer.fit(torch.zeros(4, 2), quantiles=(0.9, 0.1))


def _inputs(B: int = 3, K: int = 4, D: int = 2, bins: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    image = torch.stack([torch.randint(0, 11, (B, K, 7, 7), generator=g), torch.randint(0, 6, (B, K, 7, 7), generator=g),
                         torch.randint(0, 3, (B, K, 7, 7), generator=g)], dim=-1)  # (B, K, 7, 7, 3)
    prev = torch.randint(0, bins + 1, (B, K, D), generator=g)  # bins = 'no previous action'
    direction = torch.randint(0, 4, (B, K), generator=g)
    return image, prev, direction


def _binned(bins: int = 16, D: int = 2, **kw) -> VLAModel:
    torch.manual_seed(0)
    return VLAModel(None, 7, D, hidden_size=16, n_head=2, action_bins=bins, action_low=[-1.0, 0.0][:D],
                    action_high=[1.0, 2.0][:D], **kw).eval()


def test_binned_head_shapes_causality_and_previous_action_tokens():
    m = _binned()
    image, prev, direction = _inputs()
    text = m.encode_missions(["pick up the red key", "go to a box", "open the door"])
    base = m(image, text, prev, direction)
    assert base.shape == (3, 4, 2, 16) and not m.discrete
    assert m(image[:, 0], text, prev[:, 0], direction[:, 0]).shape == (3, 2, 16)
    for j in range(4):  # a change at step j leaves every earlier step's logits as they were
        prev2 = prev.clone()
        prev2[:, j, 1] = (prev2[:, j, 1] + 1) % 17
        out = m(image, text, prev2, direction)
        torch.testing.assert_close(out[:, :j], base[:, :j], rtol=0, atol=0)
        assert not torch.allclose(out[:, j], base[:, j])  # each dimension's token is an input
    with pytest.raises(ValueError, match=r"previous_actions must be \(3, 4, 2\)"):
        m(image, text, prev[..., 0], direction)
    with pytest.raises(ValueError, match=r"previous_actions must lie in \[0, 16\]"):
        m(image, text, prev + 17, direction)


def test_binned_get_action_decodes_bin_centres_and_samples_per_dimension():
    m = _binned()
    image, prev, direction = _inputs(B=2, K=3)
    text = m.encode_missions(["go to the red ball", "go to a key"])
    tokens = m.get_action(image, text, prev, direction, tokens=True)
    assert tokens.shape == (2, 2) and tokens.dtype == torch.long
    values = m.get_action(image, text, prev, direction)
    torch.testing.assert_close(values, m.action_tokens.decode(tokens))  # bin centres of the greedy tokens
    assert bool((values[:, 0].abs() < 1).all() and (values[:, 1] > 0).all() and (values[:, 1] < 2).all())
    draws = m.get_action(image, text, prev, direction, temperature=1.0, generator=torch.Generator().manual_seed(3))
    again = m.get_action(image, text, prev, direction, temperature=1.0, generator=torch.Generator().manual_seed(3))
    assert draws.shape == (2, 2) and torch.equal(draws, again)


def test_binned_model_saves_and_loads_exactly_through_its_kwargs(tmp_path):
    from seqrl.models.loading import load_policy_checkpoint
    from seqrl.utils.checkpoint import save_checkpoint

    m = _binned(bins=256)
    assert m.kwargs["action_bins"] == 256 and m.kwargs["action_high"] == [1.0, 2.0]
    assert "action_bins" not in VLAModel(None, 7, 7).kwargs  # discrete checkpoints are as before
    path = save_checkpoint(tmp_path, 1, m, state={"policy": {"method": "vla", "model": json.loads(json.dumps(m.kwargs))}})
    loaded, _ = load_policy_checkpoint(path, methods=("vla",))
    image, prev, direction = _inputs(bins=256)
    text = m.encode_missions(["go to the red ball"] * 3)
    torch.testing.assert_close(loaded(image, text, prev, direction), m(image, text, prev, direction), rtol=0, atol=0)
    assert loaded.action_tokens.to_dict() == m.action_tokens.to_dict()


def test_binned_constructor_errors_are_named():
    with pytest.raises(ValueError, match="action_bins must be 0"):
        VLAModel(None, 7, 2, action_bins=1)
    with pytest.raises(ValueError, match="need action_dim = 2 values"):
        VLAModel(None, 7, 2, action_bins=8, action_low=[0.0], action_high=[1.0])
    with pytest.raises(ValueError, match="VLAModel: ActionTokenizer: high < low"):
        VLAModel(None, 7, 2, action_bins=8, action_low=[0.0, 0.0], action_high=[1.0, -1.0])
    with pytest.raises(ValueError, match="need action_bins > 0"):
        VLAModel(None, 7, 7, action_low=[0.0] * 7)


def test_binned_vla_learns_a_continuous_action_from_image_and_mission():
    # target (2 dims): dim 0 = the id (1..10) of the one kind of object in a view of that object and empty cells,
    # scaled to [−1, 1];
    # dim 1 = 0.5 for "go" missions, 1.5 for "pick" — one needs the image, the other the mission
    torch.manual_seed(0)
    bins = 32
    m = VLAModel(None, 7, 2, hidden_size=32, n_head=2, n_layer=1, context_len=2, dropout=0.0, action_bins=bins,
                 action_low=[-1.0, 0.0], action_high=[1.0, 2.0])
    g = torch.Generator().manual_seed(1)

    def batch(n: int):
        obj = torch.randint(1, 11, (n, 2), generator=g)
        image = torch.zeros(n, 2, 7, 7, 3, dtype=torch.long)
        image[..., 0] = obj[:, :, None, None] * (torch.rand(n, 2, 7, 7, generator=g) < 0.3)  # (n, 2, 7, 7)
        direction = torch.randint(0, 4, (n, 2), generator=g)
        go = torch.rand(n, generator=g) < 0.5
        target = torch.stack([(obj.double() - 1) / 9 * 2 - 1,
                              torch.where(go, 0.5, 1.5)[:, None].expand(n, 2).double()], dim=-1)  # (n, 2, 2)
        text = m.encode_missions(["go to the red ball" if x else "pick up the red ball" for x in go.tolist()])
        prev = torch.cat([torch.full((n, 1, 2), bins), m.action_tokens.encode(target[:, :1])], dim=1)  # (n, 2, 2)
        return image, text, prev, direction, target

    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    mask = torch.ones(64, 2)
    losses = []
    for _ in range(150):
        image, text, prev, direction, target = batch(64)
        loss = action_loss(m(image, text, prev, direction), m.action_tokens.encode(target), mask, discrete=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    m.eval()
    image, text, prev, direction, target = batch(256)
    pred = m.get_action(image, text, prev, direction)  # (256, 2) decoded values for the last step
    err = (pred.double() - target[:, -1]).abs().mean(0)
    assert sum(losses[-10:]) / 10 < 0.3 * sum(losses[:10]) / 10, losses[::15]
    # chance: dim 0 ≈ 0.5 mean error (uniform over 11 object ids), dim 1 0.5; a bin is 1/16 and 1/16 wide
    assert err[0] < 0.1 and err[1] < 0.05, err
