"""models/text/sampler.py: greedy, seeding, filters, penalties, bias, logprobs, the sampled distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.text.sampler import Candidates, SampledToken, Sampler, SamplingParams, candidates_can_serve

V = 262144  # Gemma 3's vocabulary


def _logits(seed: int = 0, v: int = V, scale: float = 3.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(v) * scale).astype(np.float32)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def test_greedy_is_argmax() -> None:
    x = _logits(1)
    assert Sampler(SamplingParams(temperature=0)).sample(x).id == int(np.argmax(x))


def test_greedy_ties_take_lowest_id() -> None:
    x = np.zeros(10, np.float32)
    x[[3, 7]] = 5
    assert Sampler(SamplingParams(temperature=0)).sample(x).id == 3


def test_same_seed_same_tokens_and_none_differs() -> None:
    rows = [_logits(s, v=5000, scale=1.0) for s in range(40)]

    def run(seed: int | None) -> list[int]:
        sampler = Sampler(SamplingParams(temperature=1.0, seed=seed))
        return [sampler.sample(r).id for r in rows]

    assert run(123) == run(123)
    assert run(123) != run(124)
    assert run(None) != run(None)  # 40 draws over a flat-ish 5000-way distribution: a tie has p ~ 0


def test_top_k_one_is_greedy() -> None:
    x = _logits(2)
    sampler = Sampler(SamplingParams(temperature=1.5, top_k=1, seed=0))
    assert all(sampler.sample(x).id == int(np.argmax(x)) for _ in range(20))


def test_top_k_keeps_only_k_best() -> None:
    x = _logits(3, v=1000, scale=0.1)  # flat: without the filter, draws would spread over all 1000
    best5 = set(np.argsort(-x)[:5].tolist())
    sampler = Sampler(SamplingParams(temperature=1.0, top_k=5, seed=1))
    draws = {sampler.sample(x).id for _ in range(300)}
    assert draws == best5


def test_small_top_p_keeps_only_the_top_token() -> None:
    x = _logits(4)
    sampler = Sampler(SamplingParams(temperature=1.0, top_p=1e-6, seed=2))
    assert all(sampler.sample(x).id == int(np.argmax(x)) for _ in range(20))


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    x = np.log(probs).astype(np.float32)
    # 0.5 < 0.7 <= 0.5 + 0.3: tokens 0 and 1 stay.
    sampler = Sampler(SamplingParams(temperature=1.0, top_p=0.7, seed=3))
    assert {sampler.sample(x).id for _ in range(400)} == {0, 1}
    # top_p needing more than the first candidate batch widens it (flat distribution over V).
    flat = np.zeros(V, np.float32)
    sampler = Sampler(SamplingParams(temperature=1.0, top_p=0.5, seed=4))
    ids = [sampler.sample(flat).id for _ in range(200)]
    assert len(set(ids)) > 150 and max(ids) < V


def test_min_p_drops_unlikely_tokens() -> None:
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    x = np.log(probs).astype(np.float32)
    # min_p 0.6: keep p >= 0.24 -> tokens 0 and 1.
    sampler = Sampler(SamplingParams(temperature=1.0, min_p=0.6, seed=5))
    assert {sampler.sample(x).id for _ in range(400)} == {0, 1}


def test_repetition_penalty_divides_positive_and_multiplies_negative() -> None:
    x = np.array([2.0, 1.9, -1.0, -1.1], np.float32)
    greedy = SamplingParams(temperature=0, repetition_penalty=2.0, top_logprobs=4)
    out = Sampler(greedy).sample(x, history=[0, 2])
    assert out.id == 1  # 2.0 / 2 = 1.0 < 1.9
    # -1.0 * 2 = -2.0 is now below -1.1: check through the reported logprobs (before temperature).
    adjusted = np.array([1.0, 1.9, -2.0, -1.1])
    expected = _log_softmax(adjusted)
    assert [t for t, _ in out.top] == [1, 0, 3, 2]
    # float32 logits against a float64 reference: agreement to 1e-5 in log-probability.
    np.testing.assert_allclose([lp for _, lp in out.top], expected[[1, 0, 3, 2]], atol=1e-5)


def test_presence_and_frequency_penalties_follow_openai() -> None:
    x = np.array([3.0, 2.5, 1.95], np.float32)
    history = [0, 0, 0, 1]
    params = SamplingParams(temperature=0, presence_penalty=0.2, frequency_penalty=0.3, top_logprobs=3)
    out = Sampler(params).sample(x, history)
    # token 0: 3.0 - 0.2 - 3 * 0.3 = 1.9; token 1: 2.5 - 0.2 - 0.3 = 2.0; token 2 untouched: 1.95
    assert out.id == 1
    expected = _log_softmax(np.array([1.9, 2.0, 1.95]))
    assert dict(out.top) == pytest.approx({0: expected[0], 1: expected[1], 2: expected[2]}, abs=1e-5)
    # Without history nothing changes.
    assert Sampler(params).sample(x, []).id == 0


def test_logit_bias_forces_and_bans() -> None:
    x = _logits(6)
    forced = Sampler(SamplingParams(temperature=1.0, logit_bias=((12345, 100.0),), seed=7))
    assert all(forced.sample(x).id == 12345 for _ in range(10))
    best = int(np.argmax(x))
    banned = Sampler(SamplingParams(temperature=0, logit_bias=((best, -100.0),)))
    assert banned.sample(x).id != best
    with pytest.raises(ValueError, match="logit_bias"):
        Sampler(SamplingParams(logit_bias=((V, 1.0),))).sample(x)


def test_logprobs_are_normalised_and_before_temperature() -> None:
    x = _logits(8, v=2000, scale=2.0)
    expected = _log_softmax(x)
    for temperature in (0.0, 0.3, 2.0):
        out = Sampler(SamplingParams(temperature=temperature, top_logprobs=2000, seed=9)).sample(x)
        assert isinstance(out, SampledToken)
        lps = np.array([lp for _, lp in out.top])
        # Summation over 2000 float32 exps: total probability within 1e-4 of 1.
        assert math.isclose(np.exp(lps).sum(), 1.0, abs_tol=1e-4)
        assert out.logprob == pytest.approx(expected[out.id], abs=1e-4)
        assert [t for t, _ in out.top[:5]] == np.argsort(-x)[:5].tolist()
        assert all(a[1] >= b[1] for a, b in zip(out.top, out.top[1:]))


def test_top_logprobs_count() -> None:
    out = Sampler(SamplingParams(temperature=0, top_logprobs=5)).sample(_logits(10))
    assert len(out.top) == 5
    assert out.top[0][0] == out.id
    assert Sampler(SamplingParams(temperature=0)).sample(_logits(10)).top == []


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_distribution_matches_softmax(temperature: float) -> None:
    x = np.array([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0, -np.inf], np.float32)
    p = np.exp(_log_softmax(x.astype(np.float64) / temperature))
    sampler = Sampler(SamplingParams(temperature=temperature, seed=11))
    n = 20000
    counts = np.bincount([sampler.sample(x).id for _ in range(n)], minlength=x.size)
    assert counts[-1] == 0  # probability 0 is never drawn
    expected = n * p[:-1]
    chi2 = float(((counts[:-1] - expected) ** 2 / expected).sum())
    # 6 degrees of freedom: P(chi2 > 22.46) = 0.001; with a fixed seed the test is deterministic anyway.
    assert chi2 < 22.46, (counts, expected)


def test_params_are_checked() -> None:
    for bad in (dict(temperature=-1), dict(top_p=0.0), dict(top_p=1.5), dict(min_p=2), dict(top_k=-1),
                dict(repetition_penalty=0), dict(top_logprobs=-1)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)


def test_all_masked_is_an_error() -> None:
    x = np.full(4, -np.inf, np.float32)
    with pytest.raises(ValueError, match="finite"):
        Sampler(SamplingParams(temperature=0)).sample(x)


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.999])
def test_nucleus_equals_sorting_everything(top_p: float) -> None:
    from models.text.sampler import _nucleus

    for seed, scale in ((0, 0.5), (1, 3.0), (2, 8.0)):
        x = _logits(seed, v=50000, scale=scale)
        scaled = x - x.max()
        weights = np.exp(scaled)
        order = np.argsort(-weights, kind="stable")
        cumulative = np.cumsum(weights[order], dtype=np.float64) / weights.sum(dtype=np.float64)
        expected = set(order[: int(np.searchsorted(cumulative, top_p)) + 1].tolist())
        got = _nucleus(weights, None, top_p)
        # Sums taken in another order can move the crossing by one token at most.
        assert len(set(got.tolist()) ^ expected) <= 1, (seed, len(got), len(expected))
        assert len(got) == len(set(got.tolist()))
        pool = np.arange(0, 50000, 7)
        sub = _nucleus(weights, pool, top_p)
        order = pool[np.argsort(-weights[pool], kind="stable")]
        cumulative = np.cumsum(weights[order], dtype=np.float64) / weights[pool].sum(dtype=np.float64)
        expected = set(order[: int(np.searchsorted(cumulative, top_p)) + 1].tolist())
        assert len(set(sub.tolist()) ^ expected) <= 1


# -- sampling from the GPU's candidates (models.text.sampler.sample_candidates) ----------------------------------
K = 64  # candidates per row, as models/text/step_io.py CANDIDATES


def candidates_of(logits: np.ndarray, k: int = K) -> Candidates:
    """What gpu/ops/sampling.py top_candidates reads back: the k best (lower id first on ties) and the stats."""
    order = np.lexsort((np.arange(logits.size), -logits))[:k]
    peak = float(logits.max())
    return Candidates(order, logits[order].astype(np.float32), peak,
                      float(np.exp(logits.astype(np.float64) - peak).sum()))


def kept_probabilities(params: SamplingParams, logits: np.ndarray, draws: int, candidates: bool) -> np.ndarray:
    """Empirical distribution of `draws` tokens from either path (a fresh seed per path and params)."""
    counts = np.zeros(logits.size)
    sampler = Sampler(SamplingParams(**{**params.__dict__, "seed": 11}))
    c = candidates_of(logits)
    for _ in range(draws):
        token = sampler.sample_candidates(c) if candidates else sampler.sample(logits)
        assert token is not None
        counts[token.id] += 1
    return counts / draws


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.7, top_k=10),
    SamplingParams(temperature=1.0, top_p=0.9),
    SamplingParams(temperature=0.5, top_p=0.95),
    SamplingParams(temperature=1.0, min_p=0.05),
    SamplingParams(temperature=1.3, top_k=40, top_p=0.8, min_p=0.01),
], ids=["top_k", "top_p", "top_p-cold", "min_p", "all-three"])
def test_candidates_draw_from_the_same_distribution(params: SamplingParams) -> None:
    """A peaked row (as a language model's): the candidates path keeps the same tokens as the full one, with the
    same weights. 4000 draws each: every token's frequency within 0.035 of the other path's (about 4.5 standard
    errors at p = 0.5), and no token drawn by one path that the other can never draw."""
    logits = (np.random.default_rng(5).standard_normal(3000) * 4).astype(np.float32)  # top_p 0.9: 50 tokens
    assert candidates_can_serve(params, K)
    got, want = (kept_probabilities(params, logits, 4000, path) for path in (True, False))
    assert np.abs(got - want).max() < 0.035
    support = np.flatnonzero(want > 0.002)
    assert set(np.flatnonzero(got)) <= set(np.flatnonzero(want)) | set(support)


def test_candidates_greedy_logprobs_equal_the_full_row() -> None:
    logits = (np.random.default_rng(6).standard_normal(5000) * 3).astype(np.float32)
    params = SamplingParams(temperature=0, top_logprobs=5)
    got = Sampler(params).sample_candidates(candidates_of(logits))
    want = Sampler(params).sample(logits)
    assert got is not None and got.id == want.id
    assert got.logprob == pytest.approx(want.logprob, abs=1e-5)
    assert [i for i, _ in got.top] == [i for i, _ in want.top]
    assert np.allclose([v for _, v in got.top], [v for _, v in want.top], atol=1e-5)


def test_candidates_decline_a_nucleus_past_them() -> None:
    """A flat row: top_p 0.9 needs ~90% of 3000 tokens, far past 64 candidates; min_p with every candidate above
    it likewise. The full row must be read then (None)."""
    flat = np.random.default_rng(7).uniform(-0.01, 0.01, 3000).astype(np.float32)
    assert Sampler(SamplingParams(top_p=0.9)).sample_candidates(candidates_of(flat)) is None
    assert Sampler(SamplingParams(temperature=0.5, top_p=0.9)).sample_candidates(candidates_of(flat)) is None
    assert Sampler(SamplingParams(min_p=0.5)).sample_candidates(candidates_of(flat)) is None
    assert Sampler(SamplingParams(top_k=8)).sample_candidates(candidates_of(flat)) is not None


def test_what_candidates_cannot_serve() -> None:
    assert not candidates_can_serve(SamplingParams(top_p=0.9, repetition_penalty=1.1), K)
    assert not candidates_can_serve(SamplingParams(top_p=0.9, logit_bias=((3, 5.0),)), K)
    assert not candidates_can_serve(SamplingParams(top_k=100), K)
    assert not candidates_can_serve(SamplingParams(temperature=0.8), K)  # no truncation: the GPU's Gumbel draw
    assert candidates_can_serve(SamplingParams(temperature=0, top_logprobs=20), K)
