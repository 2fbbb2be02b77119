"""What chat and completions share: prompt checks, choice specs, running a job, logprobs on the wire.

Services never touch the GPU: they turn a request into a Job for the model's worker and its events into
OpenAI responses or stream chunks.
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from fastapi import Request

from config.settings import Settings
from models.text.grammar import TokenConstraint
from server.errors import ContextLengthExceeded, HearthError, InvalidRequest
from server.jobs import ChoiceDone, ChoiceSpec, Job, JobHandle, TextDelta, TokenInfo
from server.metrics import meter_job
from server.protocols import ChatHandler
from server.schemas.common import PromptTokensDetails, SamplingRequest, TokenLogprob, TopLogprob, Usage

if TYPE_CHECKING:
    from server.services.audio_inputs import PromptAudio
    from server.services.images import PromptImage

T = TypeVar("T")
SYSTEM_FINGERPRINT = "fp_hearth"
_DISCONNECT_POLL_S = 0.25  # how often a non-streaming request checks that its client is still there


class ClientGone(HearthError):
    """The client closed the connection before the response was ready (nginx's 499); nobody reads this."""

    status = 499
    type = "client_closed_request"


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def now() -> int:
    return int(time.time())


def check_limits(request: SamplingRequest, settings: Settings, vocab_size: int) -> None:
    """Checks that depend on settings or the model, each naming its parameter."""
    limits = settings.limits
    stops = getattr(request, "stop", [])
    if len(stops) > limits.max_stop:
        raise InvalidRequest(f"stop has {len(stops)} strings; at most {limits.max_stop} are allowed.", param="stop")
    top = request.alternatives()
    if top is not None and top > limits.max_top_logprobs:
        param = request.alternatives_param
        raise InvalidRequest(f"{param} is {top}; this server allows at most {limits.max_top_logprobs}.", param=param)
    for key in request.logit_bias or {}:
        if not 0 <= int(key) < vocab_size:
            raise InvalidRequest(f"logit_bias names token {key}, outside this model's vocabulary [0, {vocab_size}).",
                                 param="logit_bias")


def check_choices(prompts: int, n: int, settings: Settings) -> None:
    """n up to limits.max_n, and prompts x n sequences up to limits.max_choices: checked from the body's counts
    alone, before any model loads or prompt is tokenised, so a request of many prompts costs nothing to refuse."""
    if n > settings.limits.max_n:
        raise InvalidRequest(f"n is {n}, more than this server's limit of {settings.limits.max_n} (setting "
                             "limits.max_n, HEARTH_MAX_N).", param="n")
    limit = settings.limits.max_choices
    if prompts * n <= limit:
        return
    if prompts == 1:
        raise InvalidRequest(f"n is {n}, more than this server's limit of {limit} choices per request "
                             "(setting limits.max_choices, HEARTH_MAX_CHOICES).", param="n")
    raise InvalidRequest(f"prompt holds {prompts} prompts and n is {n}: {prompts * n} choices, more than this "
                         f"server's limit of {limit} per request (setting limits.max_choices, HEARTH_MAX_CHOICES). "
                         "Send fewer prompts per request.", param="prompt")


def check_token_ids(ids: list[int], vocab_size: int, param: str) -> None:
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise InvalidRequest(f"token id {bad} is outside this model's vocabulary [0, {vocab_size}).", param=param)


def budget(prompt_tokens: int, max_tokens: int | None, context_length: int, settings: Settings,
           prompt_param: str) -> int:
    """The tokens a choice may generate; 400 context_length_exceeded when prompt and completion do not fit."""
    if max_tokens is None:
        room = context_length - prompt_tokens
        max_tokens = min(room, settings.limits.max_tokens_default or room)
        if max_tokens >= 1:
            return max_tokens
        max_tokens = 1
    if prompt_tokens + max_tokens > context_length:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {context_length} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the {prompt_param}, {max_tokens} in the "
            f"completion). Please reduce the length of the {prompt_param} or completion.",
            param=prompt_param,
        )
    return max_tokens


def make_job(request: SamplingRequest, prompts: list[list[int]], max_tokens: list[int], n: int,
             top_logprobs: int | None, constraint: TokenConstraint | None = None,
             images: Sequence[PromptImage | PromptAudio] = ()) -> Job:
    """One choice per prompt and n; choice index = prompt index * n + i, seeded with seed + i; each choice follows
    its own copy of the constraint. images: the prompt's images and audio clips (one prompt only)."""
    if images and len(prompts) != 1:
        raise ValueError("images go with a single prompt")
    choices = [
        ChoiceSpec(index=p * n + i, prompt_ids=ids, max_tokens=max_tokens[p],
                   sampling=request.sampling_params(choice=i, top_logprobs=top_logprobs or 0),
                   constraint=None if constraint is None else constraint.copy(), images=tuple(images))
        for p, ids in enumerate(prompts) for i in range(n)
    ]
    return Job(choices=choices, stop=tuple(getattr(request, "stop", [])), logprobs=top_logprobs is not None,
               ignore_eos=bool(getattr(request, "ignore_eos", False)))


# Called with each job submitted in the current context, before it is queued: a dialect whose replies carry
# timings (Ollama's durations) wraps the job's emit there to read the worker's token times.
job_observers: contextvars.ContextVar[tuple[Callable[[Job], None], ...]] = contextvars.ContextVar(
    "hearth_job_observers", default=())


def submit(worker: ChatHandler, job: Job, settings: Settings) -> JobHandle:
    """Queue a job; its tokens, time to first token and tokens/s go to the metrics (the one place for both)."""
    meter_job(job, worker.name)
    for observe in job_observers.get():
        observe(job)
    return worker.submit(job, settings.limits.retry_after_s)


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await work, cancelling it if the client disconnects first (then ClientGone)."""
    task = asyncio.ensure_future(work)
    while True:
        try:
            done, _ = await asyncio.wait({task}, timeout=_DISCONNECT_POLL_S)
        except asyncio.CancelledError:  # the request itself was cancelled (a timeout, shutdown): so is the work
            task.cancel()
            raise
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the client is gone; nothing to report
                pass
            raise ClientGone("The client closed the connection.")


@dataclass
class ChoiceResult:
    """A finished choice, gathered from its events."""

    text: str = ""
    tokens: list[TokenInfo] = field(default_factory=list)
    finish_reason: str = "length"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stop_sequence: str | None = None  # the stop string that ended it, if one did
    cached_tokens: int = 0  # prompt tokens found in the prefix cache


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> Usage:
    """A response's usage; cached_tokens: the prompt tokens served from the prefix cache, as OpenAI reports them."""
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                 total_tokens=prompt_tokens + completion_tokens,
                 prompt_tokens_details=PromptTokensDetails(cached_tokens=cached_tokens))


def cached_tokens(cached: dict[int, int], n: int) -> int:
    """The prompt tokens served from the cache, each prompt counted once as usage counts it: the cached tokens of
    each prompt's first choice (choices index prompt-major, n to a prompt), from choice index -> cached tokens."""
    return sum(tokens for index, tokens in cached.items() if index % n == 0)


async def collect(handle: JobHandle, n_choices: int) -> list[ChoiceResult]:
    """Run a job to the end and gather each choice's text, tokens and finish reason."""
    results = [ChoiceResult() for _ in range(n_choices)]
    async with handle:
        async for event in handle.events():
            result = results[event.index]
            if isinstance(event, TextDelta):
                result.text += event.text
                result.tokens += event.tokens
            elif isinstance(event, ChoiceDone):
                result.finish_reason = event.finish_reason
                result.prompt_tokens = event.prompt_tokens
                result.completion_tokens = event.completion_tokens
                result.stop_sequence = event.stop_sequence
                result.cached_tokens = event.cached_tokens
    return results


async def events(handle: JobHandle) -> AsyncIterator[TextDelta | ChoiceDone]:
    """A job's events; closing this iterator (a client gone) cancels the job."""
    async with handle:
        async for event in handle.events():
            yield event


def chat_logprobs(tokens: list[TokenInfo]) -> list[TokenLogprob]:
    """Chat's `logprobs.content` entries."""
    return [
        TokenLogprob(token=t.text, logprob=t.logprob, bytes=t.bytes,
                     top_logprobs=[TopLogprob(token=text, logprob=lp, bytes=raw) for text, raw, lp in t.top])
        for t in tokens
    ]
