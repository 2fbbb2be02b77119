"""The token loop: prefill the prompt, then sample and decode one token at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from models.sampler import SampledToken, Sampler, SamplingParams
from models.text_model import Session, TextModel


def generate(
    model: TextModel, session: Session, prompt_ids: Sequence[int], sampling: SamplingParams, max_tokens: int,
    stop_ids: frozenset[int] | None = None,
) -> Iterator[SampledToken]:
    """Yield up to max_tokens sampled tokens; an end-of-sequence or stop id ends the loop unyielded.

    The session must be fresh (or reset); the caller closes it. Stopping early (closing the
    generator) leaves the session usable for reset.
    """
    stops = model.tokenizer.eos_ids if stop_ids is None else stop_ids
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
