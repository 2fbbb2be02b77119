"""Choosing the next token from a row of logits, on the CPU with numpy.

Order of operations (OpenAI-style servers and llama.cpp agree on the first three):

1. logit_bias is added;
2. repetition penalty over the tokens in `history`: positive logits are divided by it, negative ones
   multiplied (CTRL / llama.cpp);
3. presence and frequency penalties, OpenAI's formula: logit -= presence * (count > 0) + frequency * count;
   the reported logprobs are the log-softmax at this point, before temperature, as OpenAI reports them;
4. temperature 0: the argmax (lowest id on ties). Otherwise logits / temperature, then top_k, then top_p
   (smallest set of most likely tokens whose probability reaches top_p), then min_p (drop tokens less
   likely than min_p times the most likely one), then one draw from the renormalised remainder.

Everything touching all V logits is an O(V) numpy pass (argpartition, bincount; never a full sort of the
vocabulary), so a sample over V = 262144 costs a few milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# top_p first sorts only this many best candidates; when they hold too little mass it buckets log-weights.
_TOP_P_FIRST_CANDIDATES = 256
_BUCKETS = 4096
_LOG_WEIGHT_SPAN = 64.0  # log-weights below -64 (weight < 2e-28 of the best) share the last bucket
_DRAW_BLOCK = 1024  # tokens per block when walking the cumulative weight of a draw


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. Defaults sample from the model's distribution unchanged."""

    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    repetition_penalty: float = 1.0  # 1 = off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    seed: int | None = None  # None = a fresh random stream
    top_logprobs: int = 0  # how many most likely alternatives to report per token

    def __post_init__(self) -> None:
        checks = (
            ("temperature", self.temperature >= 0 and math.isfinite(self.temperature), "must be >= 0"),
            ("top_k", self.top_k >= 0, "must be >= 0"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("min_p", 0 <= self.min_p <= 1, "must be in [0, 1]"),
            ("repetition_penalty", self.repetition_penalty > 0 and math.isfinite(self.repetition_penalty),
             "must be > 0"),
            ("presence_penalty", math.isfinite(self.presence_penalty), "must be finite"),
            ("frequency_penalty", math.isfinite(self.frequency_penalty), "must be finite"),
            ("top_logprobs", self.top_logprobs >= 0, "must be >= 0"),
            ("logit_bias", all(t >= 0 and math.isfinite(b) for t, b in self.logit_bias),
             "needs token ids >= 0 and finite values"),
        )
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"{name} {rule}, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class SampledToken:
    """A chosen token, its log-probability and the most likely alternatives (before temperature)."""

    id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)  # (token id, logprob), most likely first


@dataclass(frozen=True)
class Candidates:
    """What the GPU reads back instead of a row of V logits (gpu/ops/sampling.py top_candidates): the k largest
    logits, most likely first (lower id on ties), and the whole row's softmax statistics."""

    ids: np.ndarray  # int64 [k]
    logits: np.ndarray  # float32 [k], descending
    max: float  # max over the row's logits (= logits[0])
    sum: float  # sum over the row of exp(logit - max)


def candidates_can_serve(params: SamplingParams, k: int) -> bool:
    """Whether a row's k best logits (and its softmax statistics) may do instead of all V for these params:
    no logit_bias or penalties (they move tokens from outside into the best k) and a truncation the best k
    can hold (greedy, top_k <= k, top_p or min_p), so that a draw needs only them. sample_candidates still
    returns None where a top_p or min_p reaches past them at a given step."""
    if params.logit_bias or params.repetition_penalty != 1 or params.presence_penalty or params.frequency_penalty:
        return False
    if params.top_logprobs > k or params.top_k > k:
        return False
    return params.temperature == 0 or params.top_k > 0 or params.top_p < 1 or params.min_p > 0


class Sampler:
    """Samples token after token for one sequence; its random stream is seeded once from params.seed."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self._rng = np.random.default_rng(params.seed)
        self._bias_ids = np.array([t for t, _ in params.logit_bias], np.int64)
        self._bias_values = np.array([b for _, b in params.logit_bias], np.float32)

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> SampledToken:
        """Pick the next token from `logits` [V]; `history` holds the tokens the penalties count."""
        x = self._adjusted(logits, history)  # [V] float32, a copy
        top_id = int(np.argmax(x))
        peak = float(x[top_id])
        if not math.isfinite(peak):
            raise ValueError("no token has a finite logit after logit_bias and penalties")
        exp = np.exp(x - peak)  # [V], reused for the draw at temperature 1
        log_z = peak + math.log(float(exp.sum(dtype=np.float64)))

        p = self.params
        chosen = top_id if p.temperature == 0 else self._draw(x, peak, exp)
        top = _top_logprobs(x, log_z, p.top_logprobs) if p.top_logprobs else []
        return SampledToken(chosen, float(x[chosen]) - log_z, top)

    def skip(self, n: int) -> None:
        """Move the random stream on as n draws would: tokens a grammar forced, taken without drawing
        (models/text/batch.py's jump-forward), so that a seeded sequence's later draws are the same either way."""
        if self.params.temperature != 0 and n > 0:
            self._rng.random(n)

    def sample_candidates(self, c: Candidates) -> SampledToken | None:
        """The same choice as sample() over the row's candidates alone (candidates_can_serve(params) must hold),
        or None when this step's top_p or min_p keeps tokens past them: then sample() needs the whole row.

        Exact, not approximate: top_k within the k best is the same set; min_p keeps the same tokens when the
        last candidate falls below it; top_p's nucleus is fixed once the mass outside the candidates is known
        (at temperature 1 it is sum - the candidates' share) or bounded tightly enough (below temperature 1:
        each outside token's weight is at most its temperature-1 weight times w_k^(1/T - 1)). The draw is
        renormalised over the kept tokens, so it needs no more than that. Reported logprobs (temperature 1)
        come from the statistics.
        """
        p = self.params
        x = c.logits.astype(np.float64)
        log_z = c.max + math.log(c.sum)
        top = [(int(i), float(v) - log_z) for i, v in zip(c.ids[:p.top_logprobs], x[:p.top_logprobs], strict=True)]
        if p.temperature == 0:
            return SampledToken(int(c.ids[0]), float(x[0]) - log_z, top)
        weights = np.exp((x - x[0]) / p.temperature)  # relative to the best, as _draw's
        keep = weights.size
        if p.top_k > 0:
            keep = min(p.top_k, keep)
        if p.top_p < 1:
            inside = np.cumsum(weights[:keep])
            if p.top_k > 0:  # the nucleus of the top_k tokens' own mass
                outside_low = outside_high = 0.0
            else:
                outside_1 = max(c.sum - float(np.exp(x - c.max).sum()), 0.0)  # mass past the candidates at T = 1
                if p.temperature == 1:
                    outside_low = outside_high = outside_1
                elif p.temperature < 1:
                    outside_low, outside_high = 0.0, outside_1 * float(weights[-1]) ** (1 - p.temperature)
                else:
                    return None  # above temperature 1 the outside mass is not bounded usefully
            ends = {int(np.searchsorted(inside, p.top_p * (inside[-1] + outside), side="left"))
                    for outside in (outside_low, outside_high)}
            if len(ends) > 1 or max(ends) >= keep:
                return None  # the nucleus reaches past the candidates, or its end depends on the outside mass
            keep = ends.pop() + 1
        kept = np.arange(keep)
        if p.min_p > 0:
            if keep == weights.size and weights[-1] >= p.min_p and p.top_k == 0 and p.top_p == 1:
                return None  # tokens past the candidates may still be at least min_p of the best
            kept = kept[weights[:keep] >= p.min_p]
        chosen = int(kept[_pick(weights[kept].astype(np.float32), self._rng.random())])
        return SampledToken(int(c.ids[chosen]), float(x[chosen]) - log_z, top)

    def _adjusted(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """Logits after logit_bias and the penalties."""
        x = np.array(logits, dtype=np.float32, copy=True).reshape(-1)
        p = self.params
        if self._bias_ids.size:
            if int(self._bias_ids.max()) >= x.size:
                raise ValueError(f"logit_bias names token {int(self._bias_ids.max())}, vocabulary has {x.size}")
            np.add.at(x, self._bias_ids, self._bias_values)  # add.at: repeated ids add up
        penalised = p.repetition_penalty != 1 or p.presence_penalty or p.frequency_penalty
        if penalised and len(history):
            ids, counts = np.unique(np.asarray(history, np.int64), return_counts=True)
            values = x[ids]
            if p.repetition_penalty != 1:
                values = np.where(values > 0, values / p.repetition_penalty, values * p.repetition_penalty)
            values = values - (p.presence_penalty + p.frequency_penalty * counts)
            x[ids] = values
        return x

    def _draw(self, x: np.ndarray, peak: float, exp: np.ndarray) -> int:
        """Temperature, top_k, top_p, min_p, then one draw; `exp` is exp(x - peak)."""
        p = self.params
        weights = exp if p.temperature == 1 else np.exp((x - peak) / p.temperature)  # [V] in [0, 1], best = 1
        ids: np.ndarray | None = None  # candidate ids; None = the whole vocabulary

        if 0 < p.top_k < x.size:
            ids = np.argpartition(x, x.size - p.top_k)[x.size - p.top_k:]
        if p.top_p < 1:
            ids = _nucleus(weights, ids, p.top_p)
        if p.min_p > 0:
            # p_i >= min_p * p_max  <=>  weight_i >= min_p, since the best token has weight 1.
            ids = np.flatnonzero(weights >= p.min_p) if ids is None else ids[weights[ids] >= p.min_p]

        k = _pick(weights if ids is None else weights[ids], self._rng.random())
        return k if ids is None else int(ids[k])


def _nucleus(weights: np.ndarray, ids: np.ndarray | None, top_p: float) -> np.ndarray:
    """The fewest most likely ids (of `ids`, or all) whose share of the weight reaches top_p.

    A language model's mass usually sits in a few hundred tokens, found with
    one argpartition. For a flat distribution, tokens are bucketed by log-weight instead: buckets above
    the one where the cumulative mass crosses top_p are kept whole and only that bucket is sorted.
    """
    pool_w = weights if ids is None else weights[ids]
    target = top_p * float(pool_w.sum(dtype=np.float64))
    n = min(_TOP_P_FIRST_CANDIDATES, pool_w.size)
    best = np.argpartition(pool_w, pool_w.size - n)[pool_w.size - n:] if n < pool_w.size else np.arange(n)
    best = best[np.argsort(-pool_w[best], kind="stable")]
    cumulative = np.cumsum(pool_w[best], dtype=np.float64)
    if cumulative[-1] >= target or n == pool_w.size:
        keep = min(int(np.searchsorted(cumulative, target, side="left")) + 1, n)  # with the one crossing
        chosen = best[:keep]
    else:
        with np.errstate(divide="ignore"):  # weight 0 -> log -inf -> the last bucket
            log_w = np.log(pool_w)
        # Bucket 0 holds the heaviest tokens; everything below exp(-_LOG_WEIGHT_SPAN) shares the last one.
        bucket = np.minimum(-log_w * (_BUCKETS / _LOG_WEIGHT_SPAN), _BUCKETS - 1).astype(np.int64)
        cumulative = np.cumsum(np.bincount(bucket, weights=pool_w, minlength=_BUCKETS))
        b = min(int(np.searchsorted(cumulative, target, side="left")), _BUCKETS - 1)
        inside = np.flatnonzero(bucket == b)
        inside = inside[np.argsort(-pool_w[inside], kind="stable")]
        needed = target - (cumulative[b - 1] if b else 0.0)
        k = min(int(np.searchsorted(np.cumsum(pool_w[inside], dtype=np.float64), needed, side="left")) + 1,
                inside.size)
        chosen = np.concatenate([np.flatnonzero(bucket < b), inside[:k]])
    return chosen if ids is None else ids[chosen]


def _pick(weights: np.ndarray, u: float) -> int:
    """Index i drawn with probability weights[i] / sum(weights), from a uniform u in [0, 1).

    A float64 cumsum over all V weights is the slowest step of a draw, so the walk goes by blocks:
    find the block holding the target mass, then the token inside it.
    """
    n_full = weights.size // _DRAW_BLOCK
    sums = weights[:n_full * _DRAW_BLOCK].reshape(n_full, _DRAW_BLOCK).sum(axis=1, dtype=np.float64)
    if weights.size % _DRAW_BLOCK:
        sums = np.append(sums, weights[n_full * _DRAW_BLOCK:].sum(dtype=np.float64))
    block_ends = np.cumsum(sums)
    # Clamped below the total so that the chosen block, and token, have weight > 0.
    target = min(u * block_ends[-1], np.nextafter(block_ends[-1], 0.0))
    b = int(np.searchsorted(block_ends, target, side="right"))
    start = b * _DRAW_BLOCK
    inside = np.cumsum(weights[start:start + _DRAW_BLOCK], dtype=np.float64)
    rest = min(target - (block_ends[b - 1] if b else 0.0), np.nextafter(inside[-1], 0.0))
    return start + min(int(np.searchsorted(inside, rest, side="right")), inside.size - 1)


def _top_logprobs(x: np.ndarray, log_z: float, n: int) -> list[tuple[int, float]]:
    """The n most likely tokens with their log-probabilities, most likely first (lower id on ties)."""
    n = min(n, x.size)
    best = np.argpartition(x, x.size - n)[x.size - n:] if n < x.size else np.arange(x.size)
    best = best[np.lexsort((best, -x[best]))]
    return [(int(i), float(x[i]) - log_z) for i in best]
