"""What the server needs of a loaded model and of the worker that holds it, one protocol per model kind.

The model manager knows every worker as a `Worker`; each service asks it for the kind it serves and gets that
kind's handler (`ChatHandler`, `EmbeddingHandler`, `SpeechHandler`, `TranscriptionHandler`, `RerankHandler`), whose
`model` is the loaded model seen through its own protocol. Models never import these: any class with the members
fits, so the models in models/ and the tests' fakes satisfy them alike.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import numpy as np

if TYPE_CHECKING:
    from config.settings import Settings
    from gpu.turns import Turns
    from models.registry import ModelEntry
    from models.text.batch import Event
    from models.text.chat_template import ChatTemplate
    from models.text.grammar import TokenConstraint
    from models.text.sampler import SamplingParams
    from server.jobs import Job, JobHandle
    from server.text_stream import StreamDecoder
    from server.transcription_worker import Language, TranscribeParams

T = TypeVar("T")
# A loader: (source, *, progress, device options...) -> the loaded model.
Loader = Callable[..., object]
WorkerState = Literal["loading", "ready", "failed", "stopped"]


# -- models ------------------------------------------------------------------------------------------------
class TextTokenizer(Protocol):
    """Text <-> ids of a chat model (models/text/tokenizer.py's Tokenizer)."""

    @property
    def bos_id(self) -> int: ...  # -1 when the vocabulary has none

    @property
    def eos_id(self) -> int: ...  # the file's end-of-sequence id; -1 when it names none

    @property
    def eos_ids(self) -> frozenset[int]: ...  # every id that ends generation

    @property
    def vocab_size(self) -> int: ...

    @property
    def chat_template(self) -> str | None: ...

    def encode(self, text: str, add_bos: bool = True) -> list[int]: ...

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str: ...

    def stream_decoder(self) -> StreamDecoder: ...

    def id_to_piece(self, token_id: int) -> str: ...


class TextSession(Protocol):
    """One sequence's KV cache (the warm-up's prefill and decode)."""

    def prefill(self, ids: list[int]) -> np.ndarray: ...

    def decode(self, token: int) -> np.ndarray: ...

    def close(self) -> None: ...


class BatchGenerator(Protocol):
    """Continuous batching over a model (models/text/batch.py's BatchGenerator), driven by the chat worker's thread."""

    @property
    def busy(self) -> bool: ...

    def can_admit(self, prompt: Sequence[int], max_tokens: int, n_sequences: int = 1) -> bool: ...

    def add(self, key: tuple[int, int], prompt_ids: list[int], sampling: SamplingParams, max_tokens: int,
            logprobs: bool = False, stop_ids: frozenset[int] | None = None,
            constraint: TokenConstraint | None = None) -> None: ...

    def cancel(self, key: tuple[int, int]) -> None: ...

    def cached(self, key: tuple[int, int]) -> int: ...  # prompt tokens a running sequence found in the prefix cache

    def step(self) -> Sequence[Event]: ...


class ChatModel(Protocol):
    """A loaded text model (models/text/engine.py's TextModel): chat, completions and `hearth generate`."""

    @property
    def tokenizer(self) -> TextTokenizer: ...

    @property
    def context_length(self) -> int: ...  # tokens

    @property
    def vocab_size(self) -> int: ...

    def new_session(self) -> TextSession: ...

    def generator(self, jump_forward: bool = True) -> BatchGenerator: ...


class EmbeddingModel(Protocol):
    """A loaded embedding model (models/embeddings/engine.py)."""

    @property
    def dimensions(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...  # per input

    @property
    def vocab_size(self) -> int: ...

    @property
    def matryoshka(self) -> bool: ...  # trained so that a vector's head is a shorter embedding

    def tokenize(self, text: str, truncate: bool = False) -> list[int]: ...

    def embed(self, inputs: Sequence[Sequence[int]]) -> np.ndarray: ...


class RerankModel(Protocol):
    """A loaded cross-encoder (models/embeddings/engine.py's EmbeddingModel over a BERT sequence classifier)."""

    @property
    def max_tokens(self) -> int: ...  # per (query, document) pair, special tokens included

    @property
    def reranker(self) -> bool: ...

    def tokenize_pair(self, query: str, document: str, truncate: bool = False) -> tuple[list[int], list[int]]:
        """(ids, token types) of `[CLS] query [SEP] document [SEP]`."""
        ...

    def score(self, batch: Sequence[Sequence[int]], token_types: Sequence[Sequence[int]]) -> np.ndarray:
        """float32 [len(batch)]: each pair's relevance logit."""
        ...


class SpeechModel(Protocol):
    """A loaded speech model (models/kokoro.py)."""

    @property
    def sample_rate(self) -> int: ...  # Hz

    @property
    def vocab(self) -> dict[str, int]: ...  # phoneme -> id

    @property
    def max_phonemes(self) -> int: ...  # per chunk

    @property
    def voices(self) -> dict[str, np.ndarray]: ...  # voice id -> voicepack

    def style(self, pack: np.ndarray, n_phonemes: int) -> np.ndarray: ...

    def synthesize(self, ids: list[int], style: np.ndarray, speed: float, seed: int | None = None, *,
                   should_stop: Callable[[], bool] | None = None) -> SynthesisOutput:
        """One chunk's audio; asks should_stop between its steps and raises concurrent.futures.CancelledError
        when it says so."""
        ...


class SynthesisOutput(Protocol):
    """What SpeechModel.synthesize gives for one chunk."""

    @property
    def audio(self) -> np.ndarray: ...  # float32 samples at the model's sample_rate

    @property
    def durations(self) -> np.ndarray: ...  # predicted frames per phoneme


class TranscribedWord(Protocol):
    """A word with its timing (word_timestamps)."""

    @property
    def word(self) -> str: ...

    @property
    def start(self) -> float: ...  # seconds

    @property
    def end(self) -> float: ...  # seconds


class TranscribedSegment(Protocol):
    """A segment as the model gives it (models/whisper/decode.py's Segment)."""

    @property
    def start(self) -> float: ...  # seconds

    @property
    def end(self) -> float: ...  # seconds

    @property
    def text(self) -> str: ...

    @property
    def tokens(self) -> Sequence[int]: ...

    @property
    def temperature(self) -> float: ...

    @property
    def avg_logprob(self) -> float: ...

    @property
    def compression_ratio(self) -> float: ...

    @property
    def no_speech_prob(self) -> float: ...

    @property
    def words(self) -> Sequence[TranscribedWord] | None: ...


class TranscriptionModel(Protocol):
    """A loaded speech recognition model (models/whisper.py)."""

    @property
    def name(self) -> str: ...

    @property
    def multilingual(self) -> bool: ...

    @property
    def languages(self) -> Sequence[str]: ...

    @property
    def n_mels(self) -> int: ...  # 0: the model reads raw audio

    @property
    def word_timestamps(self) -> bool: ...  # whether it can time words (timestamp_granularities[] word)

    @property
    def beam_search(self) -> bool: ...  # whether beam_size > 1 is offered

    def detect_language(self, audio: np.ndarray) -> tuple[str, float]:
        """(code, probability) of the language spoken in float32 mono 16 kHz audio."""
        ...

    def transcribe(self, audio: np.ndarray, options: Any,
                   should_stop: Callable[[], bool] | None = None) -> Iterator[TranscribedSegment]:
        """Segments as their windows finish. options: the model package's own TranscribeOptions, a type the
        server reaches only at run time (transcription_worker.model_type), so it stays untyped here. should_stop is
        asked between steps; when it says so the model raises concurrent.futures.CancelledError."""
        ...


def adapter_turns(model: object) -> Turns | None:
    """The turns of the adapter a loaded model runs on (gpu/turns.py), through its executor's device as the models
    of models/ hold it; None for a model without one (the tests' fakes), which then takes no turn."""
    device = getattr(getattr(model, "executor", None), "device", None)
    return getattr(device, "turns", None)


# -- workers -----------------------------------------------------------------------------------------------
class Worker(Protocol):
    """What the model manager and /health, /metrics read of any worker: its load and its queue."""

    kind: str  # the ModelEntry kind it serves: "text", "embedding", "speech", "transcription" or "rerank"
    name: str
    source: str
    state: WorkerState
    error: str | None
    progress: float  # of loading, 0 to 1
    running: int  # requests being served
    last_used: float  # time.monotonic() of the last request's end

    @property
    def queued(self) -> int: ...

    @property
    def idle(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self, timeout: float | None = 10.0) -> None: ...

    async def wait_ready(self) -> None: ...


class WorkerClass(Protocol):
    """A worker class of server/model_manager.py's WORKER_KINDS: it builds the worker for a registry entry."""

    def for_entry(self, entry: ModelEntry, loader: Loader, settings: Settings, *, max_queue: int,
                  warm_up: bool) -> Worker: ...


class ChatHandler(Worker, Protocol):
    """A chat model's worker: jobs of choices run in its continuous batch."""

    model: ChatModel
    chat_template: ChatTemplate | None  # set once the model has loaded

    def submit(self, job: Job, retry_after_s: int) -> JobHandle: ...

    def cancel(self, job: Job) -> None: ...


class EmbeddingHandler(Worker, Protocol):
    """An embedding model's worker: concurrent requests share its GPU passes."""

    model: EmbeddingModel

    async def embed(self, inputs: Sequence[Sequence[int]], retry_after_s: int) -> np.ndarray: ...


class RerankHandler(Worker, Protocol):
    """A cross-encoder's worker: concurrent requests' pairs share its GPU passes."""

    model: RerankModel

    async def score(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], retry_after_s: int) -> np.ndarray: ...


class SpeechHandler(Worker, Protocol):
    """A speech model's worker: synthesis jobs stream their chunks' audio as they are made."""

    model: SpeechModel

    def voices(self, extra: tuple[str, ...] = ()) -> dict[str, np.ndarray]: ...

    def stream(self, fn: Callable[[SpeechModel], Iterator[T]], retry_after_s: int) -> AsyncGenerator[T, None]: ...

    def should_stop(self) -> bool: ...  # on the worker thread: the running job's request has gone


class TranscriptionHandler(Worker, Protocol):
    """A speech recognition model's worker: one transcription at a time, segments as their windows finish."""

    model: TranscriptionModel

    def transcribe(self, audio: np.ndarray, params: TranscribeParams,
                   retry_after_s: int) -> AsyncGenerator[Language | TranscribedSegment, None]: ...
