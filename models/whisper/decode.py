"""Transcription as Whisper does it, following faster-whisper 1.2 and CTranslate2's decoding step for step, so
that greedy transcripts match faster-whisper's on the same model.

- 30 s windows slide over the log-mel (padding 160, as faster-whisper): each window's tokens are split into
  segments at pairs of timestamp tokens; the next window starts at the last timestamp (or after the window
  when it ends with a single timestamp).
- The prompt: <|startofprev|> + up to 223 previous text tokens (the `prompt` option, then what was transcribed,
  unless condition_on_previous_text is off or a window needed a temperature above 0.5), then
  <|startoftranscript|> (<|lang|> <|task|> on multilingual models).
- Each step's logits go through CTranslate2's processors: the suppressed tokens (faster-whisper's non-speech
  symbols and task tokens), " " and <|endoftext|> at the first step, and the timestamp rules (timestamps in pairs,
  never decreasing, the first at most 1 s, and a timestamp forced when their total probability beats every text
  token). Greedy takes the argmax of the log-softmax (after its first step from twelve numbers the GPU reduces the
  logits row to: kernels/logit_group_summary.wgsl); beam search is CTranslate2's; temperatures above 0 sample
  best_of = 5 candidates.
- Temperature fallback on compression ratio (> 2.4) and average log-probability (< -1), the no-speech check,
  and word timestamps from the alignment heads (models/whisper/align.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from audio.features import log_mel_spectrogram, pad_or_trim
from models.whisper.align import add_word_timestamps
from models.whisper.net import WhisperNet
from models.whisper.weights import TIME_PRECISION

FRAMES_PER_SECOND = 100  # mel frames per second
N_FRAMES = 3000  # mel frames per window
INPUT_STRIDE = 2  # mel frames per encoder row
MAX_INITIAL_TIMESTAMP = 1.0  # seconds
BEST_OF = 5  # candidates sampled at a temperature above 0
PROMPT_RESET_ON_TEMPERATURE = 0.5
NEG_INF = -np.inf


class UnknownLanguage(ValueError):
    """A language code the model does not know."""


@dataclass(frozen=True)
class TranscribeOptions:
    """What to transcribe and how (faster-whisper's names and defaults, except greedy decoding by default)."""

    task: str = "transcribe"  # or "translate" (multilingual models)
    language: str | None = None  # None: detected on multilingual models, "en" on English-only ones
    prompt: str | None = None  # text of a previous window (faster-whisper's initial_prompt)
    temperature: float | tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    beam_size: int = 1  # 1: greedy
    word_timestamps: bool = False
    condition_on_previous_text: bool = True
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    seed: int | None = None  # sampling at temperatures above 0


@dataclass
class Word:
    start: float
    end: float
    word: str
    probability: float


@dataclass
class Segment:
    id: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[Word] | None = None


@dataclass
class _Result:
    tokens: list[int]  # without <|endoftext|>
    sum_logprob: float  # including <|endoftext|>'s
    no_speech_prob: float
    avg_logprob: float = 0.0
    temperature: float = 0.0
    compression_ratio: float = 0.0


@dataclass
class _Rules:
    """The logits processors of one generation (CTranslate2's order)."""

    suppress: np.ndarray  # token ids disabled at every step
    suppress_begin: np.ndarray  # disabled at the first generated step
    eot: int
    no_timestamps: int
    timestamp_begin: int
    max_initial: int  # last timestamp id allowed first
    timestamps: bool  # the prompt does not end with <|notimestamps|>
    vocab: int = 0  # tokens in the vocabulary

    def apply(self, logits: np.ndarray, generated: list[int]) -> np.ndarray:
        """Processed logits (disabled tokens at -inf) for a hypothesis that generated `generated` so far."""
        x = logits.astype(np.float32, copy=True)
        x[self.suppress] = NEG_INF
        if not generated:
            x[self.suppress_begin] = NEG_INF
        if not self.timestamps:
            return x
        tb = self.timestamp_begin
        x[self.no_timestamps] = NEG_INF
        check = False
        if not generated:
            x[:tb] = NEG_INF
            x[self.max_initial + 1:] = NEG_INF
        else:
            last = generated[-1]
            penultimate = generated[-2] if len(generated) >= 2 else last
            if last >= tb:
                if penultimate >= tb:
                    x[tb:] = NEG_INF
                else:
                    x[:self.eot] = NEG_INF
                    check = True
            else:
                check = True
            for token in reversed(generated):
                if token >= tb:
                    x[tb:token] = NEG_INF
                    break
        if check:
            logprobs = _log_softmax(x)
            timestamp_logprob = _logsumexp(logprobs[tb:])
            if timestamp_logprob > logprobs[:tb].max():
                x[:tb] = NEG_INF
        return x


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def _logsumexp(x: np.ndarray) -> float:
    m = np.max(x)
    return float(m + np.log(np.sum(np.exp(x - m)))) if np.isfinite(m) else float(m)


def compression_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw))


# -- one window ----------------------------------------------------------------------------------------------------
def _prefill(net: WhisperNet, prompt: list[int], slots: int) -> tuple[np.ndarray, float]:
    """Run the prompt in slot 0 (copied to the other slots); (last row's logits, no-speech probability)."""
    tok = net.tokenizer
    sot_index = prompt.index(tok.sot)
    n = len(prompt)
    logits = net.decode(prompt, range(n), [0] * n, [sot_index, n - 1])
    if slots > 1:
        net.reorder_slots([0] * slots, n)
    p = np.exp(_log_softmax(logits[0]))
    return logits[1], float(p[tok.no_speech]) if tok.no_speech is not None else 0.0


def _max_new_tokens(net: WhisperNet, prompt: list[int]) -> int:
    ctx = net.config.n_text_ctx
    return min(ctx // 2, ctx - (len(prompt) - 1))


def _greedy(net: WhisperNet, prompt: list[int], rules: _Rules) -> _Result:
    """Greedy decoding. The first step reads its logits row (the no-speech probability needs it); with timestamps,
    later steps read the twelve numbers of logit_group_summary and replay the rules on them (_choose), so the
    row stays on the GPU."""
    logits, no_speech = _prefill(net, prompt, 1)
    summary = rules.timestamps
    if summary:
        allowed = np.ones(rules.vocab, bool)
        allowed[rules.suppress] = False
        allowed[rules.no_timestamps] = False
        net.set_summary_mask(allowed)
    generated: list[int] = []
    stats = None
    total = 0.0
    position = len(prompt)
    for _ in range(_max_new_tokens(net, prompt)):
        if stats is None:
            logprobs = _log_softmax(rules.apply(logits, generated))
            token = int(np.argmax(logprobs))
            logprob = float(logprobs[token])
        else:
            token, logprob = _choose(stats, generated, rules)
        total += logprob
        if token == rules.eot or position >= net.config.n_text_ctx:
            break
        generated.append(token)
        if summary:
            stamps = [t for t in generated if t >= rules.timestamp_begin]
            ts_lo = stamps[-1] if stamps else rules.timestamp_begin
            stats = net.decode_summary(token, position, 0, ts_lo, rules.vocab - 1)
        else:
            logits = net.decode([token], [position], [0], [0])[0]
        position += 1
    return _Result(generated, total, no_speech)


def _choose(stats: np.ndarray, generated: list[int], rules: _Rules) -> tuple[int, float]:
    """(token, log-probability) of the greedy choice from logit_group_summary's groups (0 text, 1 <|endoftext|>,
    2 other specials, 3 timestamps from the last one on): _Rules.apply's timestamp rules for a hypothesis that has
    generated at least one token, then the argmax and its log-softmax."""
    tb = rules.timestamp_begin
    allowed = {0, 1, 2, 3}
    last = generated[-1]
    penultimate = generated[-2] if len(generated) >= 2 else last
    check = True
    if last >= tb:
        if penultimate >= tb:
            allowed.discard(3)
            check = False
        else:
            allowed.discard(0)
    if check and 3 in allowed:
        others = [stats[g, 0] for g in allowed if g != 3]
        if stats[3, 2] > max(others, default=-np.inf):
            allowed = {3}
    live = [g for g in sorted(allowed) if stats[g, 2] > -3e38]
    if not live:  # no group has a number (NaN logits): end the window, which falls back or is dropped, not a crash
        return rules.eot, float("-inf")
    best = max(live, key=lambda g: (stats[g, 0], -g))
    total = np.logaddexp.reduce([stats[g, 2] for g in live])
    return int(stats[best, 1]), float(stats[best, 0] - total)


def _sample(net: WhisperNet, prompt: list[int], rules: _Rules, temperature: float, rng: np.random.Generator) -> _Result:
    """best_of candidates sampled at `temperature` in parallel slots; the best by average log-probability."""
    n = BEST_OF
    first, no_speech = _prefill(net, prompt, n)
    logits = np.repeat(first[None], n, 0)
    seqs: list[list[int]] = [[] for _ in range(n)]
    scores = [0.0] * n
    done = [False] * n
    position = len(prompt)
    for _ in range(_max_new_tokens(net, prompt)):
        feed = []
        for b in range(n):
            if done[b]:
                continue
            processed = rules.apply(logits[b], seqs[b])
            logprobs = _log_softmax(processed)
            p = np.exp(_log_softmax(processed / temperature))
            token = int(rng.choice(len(p), p=p / p.sum()))
            scores[b] += float(logprobs[token])
            if token == rules.eot or position >= net.config.n_text_ctx:
                done[b] = True
            else:
                seqs[b].append(token)
                feed.append(b)
        if not feed:
            break
        out = net.decode([seqs[b][-1] for b in feed], [position] * len(feed), feed, list(range(len(feed))))
        for row, b in enumerate(feed):
            logits[b] = out[row]
        position += 1
    best = max(range(n), key=lambda b: scores[b] / max(1, len(seqs[b])))
    return _Result(seqs[best], scores[best], no_speech)


def _beam_search(net: WhisperNet, prompt: list[int], rules: _Rules, beam_size: int, patience: float = 1.0) -> _Result:
    """CTranslate2's BeamSearch (length penalty 1): the first step expands the prompt's one beam, later steps take
    the 2 * beam_size best continuations of all beams by cumulative log-probability; a candidate among the first
    beam_size that ends (<|endoftext|>, or the last step) becomes a finished hypothesis and its place goes to the
    next candidate beyond beam_size that does not end; decoding stops once beam_size * patience hypotheses have
    finished, and the best by cumulative log-probability / length wins."""
    first, no_speech = _prefill(net, prompt, beam_size)
    beams: list[tuple[list[int], float]] = [([], 0.0)]
    logits = first[None]
    finished: list[tuple[list[int], float]] = []
    max_finished = round(beam_size * patience)
    n_candidates = 2 * beam_size
    position = len(prompt)
    max_new = _max_new_tokens(net, prompt)
    for step in range(max_new):
        last_step = step + 1 == max_new or position >= net.config.n_text_ctx
        scores = np.stack([score + _log_softmax(rules.apply(logits[b], seq)) for b, (seq, score) in enumerate(beams)])
        flat = scores.reshape(-1)
        top = np.argpartition(-flat, n_candidates)[:n_candidates]
        top = top[np.argsort(-flat[top], kind="stable")]
        candidates = [(int(i) // scores.shape[1], int(i) % scores.shape[1], float(flat[i])) for i in top]
        survivors: list[tuple[list[int], float, int]] = []
        secondary = beam_size
        for k in range(beam_size):
            b, token, score = candidates[k]
            if token == rules.eot or last_step:
                finished.append((beams[b][0] + ([] if token == rules.eot else [token]), score))
                for j in range(secondary, n_candidates):
                    if candidates[j][1] != rules.eot:
                        b, token, score = candidates[j]
                        secondary = j + 1
                        break
            survivors.append((beams[b][0] + [token], score, b))
        if last_step or len(finished) >= max_finished:
            break
        net.reorder_slots([sv[2] for sv in survivors], position)
        beams = [(sv[0], sv[1]) for sv in survivors]
        n = len(beams)
        logits = net.decode([sv[0][-1] for sv in beams], [position] * n, list(range(n)), list(range(n)))
        position += 1
    best = max(finished, key=lambda h: h[1] / max(1, len(h[0])))
    return _Result(best[0], best[1], no_speech)


def _generate_with_fallback(net: WhisperNet, prompt: list[int], options: TranscribeOptions, rules: _Rules,
                            rng: np.random.Generator) -> _Result:
    temperatures = options.temperature if isinstance(options.temperature, (tuple, list)) else (options.temperature,)
    results, below_cr = [], []
    result = None
    for temperature in temperatures:
        if temperature > 0:
            result = _sample(net, prompt, rules, float(temperature), rng)
        elif options.beam_size > 1:
            result = _beam_search(net, prompt, rules, options.beam_size)
        else:
            result = _greedy(net, prompt, rules)
        result.avg_logprob = result.sum_logprob / (len(result.tokens) + 1)
        result.temperature = float(temperature)
        result.compression_ratio = compression_ratio(net.tokenizer.decode(result.tokens).strip())
        results.append(result)
        needs_fallback = False
        if options.compression_ratio_threshold is not None:
            if result.compression_ratio > options.compression_ratio_threshold:
                needs_fallback = True
            else:
                below_cr.append(result)
        if options.log_prob_threshold is not None and result.avg_logprob < options.log_prob_threshold:
            needs_fallback = True
        if (options.no_speech_threshold is not None and result.no_speech_prob > options.no_speech_threshold
                and options.log_prob_threshold is not None and result.avg_logprob < options.log_prob_threshold):
            needs_fallback = False  # silence
        if not needs_fallback:
            return result
    best = max(below_cr or results, key=lambda r: r.avg_logprob)
    best.temperature = float(temperatures[-1])  # for the prompt reset, as faster-whisper passes it
    return best


# -- the language, the rules ---------------------------------------------------------------------------------------
def _language_probs(net: WhisperNet) -> list[tuple[str, float]]:
    """Language probabilities of the encoded window, best first."""
    tok = net.tokenizer
    logits = net.decode([tok.sot], [0], [0], [0])[0]
    codes = list(tok.language_ids)
    scores = logits[[tok.language_ids[c] for c in codes]].astype(np.float64)
    p = np.exp(scores - scores.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    return [(codes[i], float(p[i])) for i in order]


def _features(audio: np.ndarray, n_mels: int) -> np.ndarray:
    """faster-whisper's log-mel (160 zero samples appended); audio too short for one STFT frame (under 25 ms) is
    padded with zeros first, which leaves it no content frames. NaN or infinite samples count as silence: one of
    them would make every feature, and so every logit, NaN."""
    if not np.isfinite(audio).all():
        audio = np.nan_to_num(audio, nan=0.0, posinf=0.0, neginf=0.0)
    if audio.shape[0] + 160 <= 200:
        audio = np.pad(audio, (0, 201 - audio.shape[0]))
    return log_mel_spectrogram(audio, n_mels, padding=160)


def _window_mel(features: np.ndarray, seek: int, size: int) -> np.ndarray:
    return pad_or_trim(features[:, seek:seek + size], N_FRAMES)


def detect_language(net: WhisperNet, audio: np.ndarray) -> tuple[str, float]:
    """(language code, probability) from the first 30 s; English-only models answer ("en", 1.0)."""
    tok = net.tokenizer
    if not tok.multilingual:
        return "en", 1.0
    features = _features(np.asarray(audio, np.float32).reshape(-1)[:N_FRAMES * 160], net.config.n_mels)
    net.encode(_window_mel(features, 0, N_FRAMES))
    return _language_probs(net)[0]


def _rules(net: WhisperNet, timestamps: bool = True) -> _Rules:
    tok = net.tokenizer
    blank = tok.encode(" ")
    return _Rules(
        suppress=np.array(tok.suppressed_tokens(), np.int64),
        suppress_begin=np.array(sorted(set(blank[:1]) | {tok.eot}), np.int64),
        eot=tok.eot, no_timestamps=tok.no_timestamps, timestamp_begin=tok.timestamp_begin,
        max_initial=tok.timestamp_begin + int(round(MAX_INITIAL_TIMESTAMP / TIME_PRECISION)),
        timestamps=timestamps, vocab=net.config.vocab_size)


def check_language(net: WhisperNet, language: str | None) -> None:
    """Raise UnknownLanguage for a code the model cannot take."""
    if language is not None and language not in net.tokenizer.languages:
        raise UnknownLanguage(f"language {language!r} is not one this model knows "
                              f"(it knows {', '.join(net.tokenizer.languages)})")


# -- windows ---------------------------------------------------------------------------------------------------
def _split_by_timestamps(tok: Any, tokens: list[int], time_offset: float, segment_size: int,
                         segment_duration: float, seek: int) -> tuple[list[dict[str, Any]], int, bool]:
    """faster-whisper's _split_segments_by_timestamps."""
    tb = tok.timestamp_begin
    single_ending = len(tokens) >= 2 and tokens[-2] < tb <= tokens[-1]
    consecutive = [i for i in range(1, len(tokens)) if tokens[i] >= tb and tokens[i - 1] >= tb]
    segments = []
    if consecutive:
        slices = consecutive + ([len(tokens)] if single_ending else [])
        last = 0
        for current in slices:
            sliced = tokens[last:current]
            segments.append(dict(seek=seek, start=time_offset + (sliced[0] - tb) * TIME_PRECISION,
                                 end=time_offset + (sliced[-1] - tb) * TIME_PRECISION, tokens=sliced))
            last = current
        if single_ending:
            seek += segment_size
        else:
            seek += (tokens[last - 1] - tb) * INPUT_STRIDE
    else:
        duration = segment_duration
        stamps = [t for t in tokens if t >= tb]
        if stamps and stamps[-1] != tb:
            duration = (stamps[-1] - tb) * TIME_PRECISION
        segments.append(dict(seek=seek, start=time_offset, end=time_offset + duration, tokens=tokens))
        seek += segment_size
    return segments, seek, single_ending


def transcribe(net: WhisperNet, audio: np.ndarray, options: TranscribeOptions) -> Iterator[Segment]:
    """Segments of float32 mono 16 kHz audio, yielded as each window finishes."""
    tok = net.tokenizer
    if options.task not in ("transcribe", "translate"):
        raise ValueError(f"task must be 'transcribe' or 'translate', not {options.task!r}")
    check_language(net, options.language)
    if options.beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, not {options.beam_size}")
    audio = np.asarray(audio, np.float32).reshape(-1)
    features = _features(audio, net.config.n_mels)
    content_frames = (audio.shape[0] + 160) // 160 - 1  # as faster-whisper: frames of (audio + 160 zeros), less one
    language = options.language
    if language is None:
        if tok.multilingual:
            net.encode(_window_mel(features, 0, N_FRAMES))
            language = _language_probs(net)[0][0]
        else:
            language = "en"
    sot_sequence = tok.sot_sequence(language, options.task)
    rules = _rules(net)
    rng = np.random.default_rng(options.seed)
    all_tokens: list[int] = []
    if options.prompt:
        all_tokens.extend(tok.encode(" " + options.prompt.strip()))
    prompt_reset_since = 0
    last_speech_timestamp = 0.0
    seek, idx = 0, 0
    max_prev = net.config.n_text_ctx // 2 - 1
    while seek < content_frames:
        time_offset = seek / FRAMES_PER_SECOND
        segment_size = min(N_FRAMES, content_frames - seek)
        segment_duration = segment_size / FRAMES_PER_SECOND
        net.encode(_window_mel(features, seek, segment_size))
        previous = all_tokens[prompt_reset_since:]
        prompt = ([tok.sot_prev] + previous[-max_prev:] if previous else []) + sot_sequence
        result = _generate_with_fallback(net, prompt, options, rules, rng)
        if options.no_speech_threshold is not None:
            skip = result.no_speech_prob > options.no_speech_threshold
            if options.log_prob_threshold is not None and result.avg_logprob > options.log_prob_threshold:
                skip = False
            if skip:
                seek += segment_size
                continue
        current, seek, single_ending = _split_by_timestamps(tok, result.tokens, time_offset, segment_size,
                                                            segment_duration, seek)
        if options.word_timestamps:
            last_speech_timestamp = add_word_timestamps(net, current, sot_sequence, segment_size, language,
                                                        last_speech_timestamp)
            if not single_ending:
                ends = [w["end"] for s in current for w in s["words"]]
                if ends and ends[-1] > time_offset:
                    seek = round(ends[-1] * FRAMES_PER_SECOND)
        for segment in current:
            text = tok.decode(segment["tokens"])
            if segment["start"] == segment["end"] or not text.strip():
                continue
            all_tokens.extend(segment["tokens"])
            idx += 1
            words = [Word(w["start"], w["end"], w["word"], w["probability"]) for w in segment["words"]] \
                if options.word_timestamps else None
            yield Segment(idx, segment["start"], segment["end"], text, segment["tokens"], result.temperature,
                          result.avg_logprob, result.compression_ratio, result.no_speech_prob, words)
        if not options.condition_on_previous_text or result.temperature > PROMPT_RESET_ON_TEMPERATURE:
            prompt_reset_since = len(all_tokens)
