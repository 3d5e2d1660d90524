"""Inverse-CDF sampling of large vocabularies: the same distribution as `torch.multinomial` at every
scale of probability, never a token of probability zero, one uniform per row."""

from __future__ import annotations

import torch

from seqrl.rollout.engine import ICDF_MIN_VOCAB, sample_inverse_cdf, sample_rows


def _frequencies(p: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(p.numel(), dtype=torch.float64)
    for _ in range(n // 10_000):
        counts += torch.bincount(sample_inverse_cdf(p.expand(10_000, -1).contiguous(), g), minlength=p.numel())
    return counts / n


def test_frequencies_match_the_probabilities_head_and_tail():
    torch.manual_seed(0)
    v, n = 2000, 200_000  # not a multiple of the 256-token block
    logits = torch.randn(v) * 3
    logits[::7] = float("-inf")  # filtered tokens, in every block
    p = logits.softmax(-1)
    freq, q = _frequencies(p, n), p.double()
    assert freq[::7].sum() == 0
    big = q > 1e-4
    z = (freq - q)[big] / (q * (1 - q) / n).sqrt()[big]
    assert 0.8 < float((z ** 2).mean()) < 1.2, float((z ** 2).mean())  # chi-square per degree of freedom
    for lo, hi in ((0, 1e-5), (1e-5, 1e-4), (1e-4, 1e-3)):  # the tail's mass, band by band
        m = (q >= lo) & (q < hi)
        mass = float(q[m].sum())
        assert abs(float(freq[m].sum()) - mass) < 4 * (mass * (1 - mass) / n) ** 0.5 + 1e-9, (lo, hi)


def test_edge_rows():
    v = 3 * 256 + 17
    rows = torch.zeros(4, v)
    rows[0, 0] = 1.0  # first token
    rows[1, v - 1] = 1.0  # last token, in the padded block
    rows[2, 300], rows[2, v - 2] = 0.5, 0.5
    rows[3, 255], rows[3, 256] = 1e-30, 1.0  # a block boundary and a denormal-sized neighbour
    g = torch.Generator().manual_seed(3)
    for _ in range(50):
        got = sample_inverse_cdf(rows, g).tolist()
        assert got[0] == 0 and got[1] == v - 1 and got[2] in (300, v - 2) and got[3] == 256


def test_small_vocabularies_keep_multinomial_and_its_stream():
    probs = torch.rand(6, ICDF_MIN_VOCAB - 1).softmax(-1)
    a = sample_rows(probs, torch.Generator().manual_seed(5))
    b = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(5)).squeeze(-1)
    assert a.tolist() == b.tolist()
    big = torch.rand(6, ICDF_MIN_VOCAB).softmax(-1)
    c = sample_rows(big, torch.Generator().manual_seed(5))
    assert c.tolist() == sample_inverse_cdf(big, torch.Generator().manual_seed(5)).tolist()


def test_rows_that_are_not_probabilities_raise_as_multinomial_does():
    import pytest

    bad = torch.full((2, 300), 1 / 300)
    for value in (float("nan"), float("inf"), -0.5):
        rows = bad.clone()
        rows[1, 7] = value
        with pytest.raises(RuntimeError, match="inf, nan or element < 0"):
            sample_inverse_cdf(rows)
    with pytest.raises(RuntimeError, match="inf, nan or element < 0"):
        sample_inverse_cdf(torch.zeros(1, 300))
