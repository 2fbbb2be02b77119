"""The token loop of one sequence: prefill the prompt, then decode token after token.

Two paths, the same tokens for the same choice of sampler:
- on the GPU (greedy, or plain temperature sampling, no logprobs): the GPU samples each token and
  feeds it to the next step itself, several decode steps go in one submission, and the next
  submission is recorded while the GPU runs the current one; only token ids come back.
- on the CPU (penalties, logit_bias, top_k / top_p / min_p, logprobs): models.text.sampler picks the
  token from what comes back each step: the row's 64 best logits and softmax statistics where those
  serve the sampler exactly (top_k / top_p / min_p / greedy logprobs without bias or penalties), the
  whole row of logits otherwise (and at the steps where a top_p or min_p reaches past the 64).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from models.text.sampler import SampledToken, Sampler, SamplingParams, candidates_can_serve
from models.text.step_io import CANDIDATES, PREFILL_BUCKETS, DecodeRow, GpuSampling, PendingStep

if TYPE_CHECKING:  # annotations only: the engine builds on this module
    from models.text.engine import Session, TextModel

STEPS_PER_SUBMIT = 8  # a model's decode steps a submission by default on a GPU (tokens then come eight at a time)
# ... and on a software adapter (lavapipe), whose steps are slow beside a submission's host cost: tokens then come
# one at a time, the first after one step rather than eight
SOFTWARE_STEPS_PER_SUBMIT = 1


def gpu_sampling(params: SamplingParams, logprobs: bool = False) -> GpuSampling | None:
    """The GPU sampler that does exactly what params ask, or None when only the CPU's can: greedy,
    or a draw at a temperature with no truncation, penalty, bias or logprobs."""
    if logprobs or params.top_logprobs or params.logit_bias:
        return None
    if params.repetition_penalty != 1 or params.presence_penalty or params.frequency_penalty:
        return None
    if params.temperature == 0:
        return GpuSampling(0.0, 0)
    if params.top_k or params.top_p < 1 or params.min_p:
        return None
    seed = params.seed if params.seed is not None else secrets.randbits(32)
    return GpuSampling(params.temperature, seed & 0xFFFFFFFF)


def generate(
    model: TextModel, session: Session, prompt_ids: Sequence[int], sampling: SamplingParams, max_tokens: int,
    stop_ids: frozenset[int] | None = None, logprobs: bool = False,
) -> Iterator[SampledToken]:
    """Yield up to max_tokens sampled tokens; an end-of-sequence or stop id ends the loop unyielded.

    logprobs: the tokens must carry their log-probabilities (the CPU path); on the GPU path a
    token's logprob is NaN. The session must be fresh (or reset); the caller closes it.
    """
    stops = model.tokenizer.eos_ids if stop_ids is None else stop_ids
    on_gpu = gpu_sampling(sampling, logprobs)
    if on_gpu is None and candidates_can_serve(sampling, CANDIDATES):
        yield from _generate_from_candidates(session, prompt_ids, sampling, max_tokens, stops)
    elif on_gpu is None:
        yield from _generate_on_cpu(session, prompt_ids, sampling, max_tokens, stops)
    else:
        yield from _generate_on_gpu(session, prompt_ids, on_gpu, max_tokens, stops)


def _generate_on_cpu(session: Session, prompt_ids: Sequence[int], sampling: SamplingParams, max_tokens: int,
                     stops: frozenset[int]) -> Iterator[SampledToken]:
    sampler = Sampler(sampling)
    history = list(prompt_ids)
    logits = session.prefill(list(prompt_ids))
    for produced in range(max_tokens):
        token = sampler.sample(logits, history)
        if token.id in stops:
            return
        yield token
        history.append(token.id)
        if produced + 1 < max_tokens:
            logits = session.decode(token.id)


def _generate_from_candidates(session: Session, prompt_ids: Sequence[int], sampling: SamplingParams,
                              max_tokens: int, stops: frozenset[int]) -> Iterator[SampledToken]:
    if max_tokens <= 0:
        return
    sampler = Sampler(sampling)
    ids = list(prompt_ids)
    session._check_ids(ids)
    engine = session.engine
    chunk = PREFILL_BUCKETS[-1]
    for start in range(0, len(ids), chunk):
        last = start + chunk >= len(ids)
        pending = engine.submit_prefill(session, ids[start:start + chunk], last=last, read_candidates=last)
    for produced in range(max_tokens):
        pending.wait()
        token = sampler.sample_candidates(pending.candidates[0]) or sampler.sample(engine.row_logits(session))
        if token.id in stops:
            return
        yield token
        if produced + 1 < max_tokens:
            pending = engine.submit_decode([DecodeRow(session, token.id, read_candidates=True)])


def _generate_on_gpu(session: Session, prompt_ids: Sequence[int], on_gpu: GpuSampling, max_tokens: int,
                     stops: frozenset[int]) -> Iterator[SampledToken]:
    if max_tokens <= 0:
        return
    ids = list(prompt_ids)
    session._check_ids(ids)
    engine = session.engine
    chunk = PREFILL_BUCKETS[-1]
    for start in range(0, len(ids), chunk):  # the chunks queue up; only the last one's token is read
        pending = engine.submit_prefill(session, ids[start:start + chunk], sampling=on_gpu,
                                        last=start + chunk >= len(ids))
    first = int(pending.wait()[0][0, 0])
    if first in stops:
        return
    yield SampledToken(first, math.nan)
    left = max_tokens - 1  # tokens still wanted, each one decode step

    def submit(n_wanted: int) -> PendingStep | None:
        room = engine.pool.n_ctx - session.n_past
        # the model's steps a submission (8 on a GPU, 1 on a software adapter); past the room, _reserve raises the
        # context error
        n = min(engine.model.steps_per_submit, n_wanted, max(room, 1))
        return engine.submit_decode([DecodeRow(session, sampling=on_gpu)], n) if n_wanted > 0 else None

    current, following = submit(left), None
    try:
        while current is not None:
            # recorded and queued while the GPU runs `current`
            following = submit(left - current.n_steps)
            tokens, _ = current.wait()
            for token in tokens[:, 0].tolist():
                if token in stops:
                    return
                yield SampledToken(token, math.nan)
            left -= current.n_steps
            current, following = following, None
    finally:  # a submission left behind by a stop still gives its read-back buffer back
        for pending in (current, following):
            if pending is not None:
                pending.wait()
