"""Word timestamps from the alignment heads' cross-attention, as CTranslate2's Whisper `align` and faster-whisper's
`find_alignment` / `add_word_timestamps` compute them.

The decoder reads <|sot...|> <|notimestamps|> text <|endoftext|> once (models/whisper/net.py keeps its cross-attention
queries); for each alignment head (layer, head) the scores q.k / sqrt(dh) over the window's content frames
(num_frames / 2 encoder rows) are softmaxed over frames, standardised over tokens (population std), median
filtered along time (width 7, reflect padding) and averaged over heads; dynamic time warping on the negated
matrix gives a monotonic path of (token, frame) pairs, and the frame where each word's first token begins is
its start time (50 frames a second).
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np

TOKENS_PER_SECOND = 50  # encoder rows per second of audio
MEDIAN_FILTER_WIDTH = 7
PREPEND_PUNCTUATIONS = "\"'“¿([{-"  # faster-whisper's defaults: attached to the next word
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"  # ... and to the previous one


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over a sliding window along the last axis, reflect-padded (openai-whisper's median_filter)."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.median(windows, axis=-1).astype(x.dtype)


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(text indices, time indices) of the cheapest monotonic path through cost [N, M] (openai-whisper's dtw_cpu)."""
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf, np.float32)
    trace = -np.ones((n + 1, m + 1), np.int8)
    total[0, 0] = 0
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
            if c0 < c1 and c0 < c2:
                best, t = c0, 0
            elif c1 < c0 and c1 < c2:
                best, t = c1, 1
            else:
                best, t = c2, 2
            total[i, j] = cost[i - 1, j - 1] + best
            trace[i, j] = t
    i, j = n, m
    trace[0, :] = 2
    trace[:, 0] = 1
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        t = trace[i, j]
        if t == 0:
            i, j = i - 1, j - 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    path_arr = np.array(path[::-1])
    return path_arr[:, 0], path_arr[:, 1]


def alignment_matrix(queries: np.ndarray, keys: dict[int, np.ndarray], heads: tuple[tuple[int, int], ...],
                     head_dim: int, offset: int, num_frames: int) -> np.ndarray:
    """The averaged, filtered attention [rows - offset - 1, frames] of the rows from `offset` on (the
    <|notimestamps|> row and the text rows; the <|endoftext|> row is left out).

    queries: [rows, L, D] cross-attention queries; keys: layer -> [1500, D]; num_frames: mel frames of content."""
    frames = max(1, num_frames // 2)
    weights = []
    for layer, head in heads:
        cols = slice(head * head_dim, (head + 1) * head_dim)
        scores = queries[:, layer, cols].astype(np.float64) @ keys[layer][:frames, cols].T.astype(np.float64)
        scores /= np.sqrt(head_dim)
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        weights.append(probs)
    w = np.stack(weights)  # [heads, rows, frames]
    mean = w.mean(axis=-2, keepdims=True)
    std = w.std(axis=-2, keepdims=True)
    w = (w - mean) / std
    w = median_filter(w.astype(np.float32), MEDIAN_FILTER_WIDTH)
    matrix = w.mean(axis=0)
    return matrix[offset:-1]


def split_to_word_tokens(tokenizer: Any, tokens: list[int], language: str) -> tuple[list[str], list[list[int]]]:
    """faster-whisper's split_to_word_tokens: on unicode boundaries, then words on spaces (except for languages
    written without spaces)."""
    subwords, subword_tokens = _split_on_unicode(tokenizer, tokens)
    if language in {"zh", "ja", "th", "lo", "my", "yue"}:
        return subwords, subword_tokens
    words: list[str] = []
    word_tokens: list[list[int]] = []
    for subword, toks in zip(subwords, subword_tokens):
        special = toks[0] >= tokenizer.eot
        if special or subword.startswith(" ") or subword.strip() in string.punctuation or not words:
            words.append(subword)
            word_tokens.append(list(toks))
        else:
            words[-1] += subword
            word_tokens[-1].extend(toks)
    return words, word_tokens


def _split_on_unicode(tokenizer: Any, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
    decoded_full = tokenizer.decode_with_timestamps(tokens)
    replacement = "\ufffd"
    words, word_tokens, current = [], [], []
    unicode_offset = 0
    for token in tokens:
        current.append(token)
        decoded = tokenizer.decode_with_timestamps(current)
        index = decoded.find(replacement)
        if index < 0 or (index + unicode_offset < len(decoded_full)
                         and decoded_full[index + unicode_offset] == replacement):
            words.append(decoded)
            word_tokens.append(current)
            current = []
            unicode_offset += len(decoded)
    return words, word_tokens


def find_alignment(tokenizer: Any, text_tokens: list[int], matrix: np.ndarray, token_probs: np.ndarray,
                   language: str) -> list[dict[str, Any]]:
    """Words of text_tokens with start/end (seconds from the window start) and mean token probability."""
    if not text_tokens:
        return []
    text_indices, time_indices = dtw(-matrix.astype(np.float64))
    words, word_tokens = split_to_word_tokens(tokenizer, text_tokens + [tokenizer.eot], language)
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / TOKENS_PER_SECOND
    starts = jump_times[boundaries[:-1]]
    ends = jump_times[boundaries[1:]]
    probs = [float(np.mean(token_probs[i:j])) for i, j in zip(boundaries[:-1], boundaries[1:])]
    return [dict(word=w, tokens=t, start=float(s), end=float(e), probability=p)
            for w, t, s, e, p in zip(words, word_tokens, starts, ends, probs)]


def merge_punctuations(alignment: list[dict[str, Any]], prepended: str, appended: str) -> None:
    """Attach leading punctuation to the following word and trailing punctuation to the previous one."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        previous, following = alignment[i], alignment[j]
        if previous["word"].startswith(" ") and previous["word"].strip() in prepended:
            following["word"] = previous["word"] + following["word"]
            following["tokens"] = previous["tokens"] + following["tokens"]
            previous["word"], previous["tokens"] = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        previous, following = alignment[i], alignment[j]
        if not previous["word"].endswith(" ") and following["word"] in appended:
            previous["word"] = previous["word"] + following["word"]
            previous["tokens"] = previous["tokens"] + following["tokens"]
            following["word"], following["tokens"] = "", []
        else:
            i = j
        j += 1


def add_word_timestamps(net: Any, segments: list[dict[str, Any]], sot_sequence: list[int], num_frames: int,
                        language: str, last_speech_timestamp: float) -> float:
    """Give each segment of one window its words (faster-whisper's add_word_timestamps, one window); the encoder
    output of that window must still be on the GPU. Returns the new last speech timestamp."""
    tok = net.tokenizer
    per_segment = [[t for t in s["tokens"] if t < tok.eot] for s in segments]
    text_tokens = [t for tokens in per_segment for t in tokens]
    alignment: list[dict[str, Any]] = []
    if text_tokens:
        alignment = _align(net, sot_sequence, text_tokens, num_frames, language)
    durations = np.array([w["end"] - w["start"] for w in alignment])
    durations = durations[durations.nonzero()]
    median_duration = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    max_duration = median_duration * 2
    if len(durations):
        marks = ".。!！?？"
        for i in range(1, len(alignment)):
            if alignment[i]["end"] - alignment[i]["start"] > max_duration:
                if alignment[i]["word"] in marks:
                    alignment[i]["end"] = alignment[i]["start"] + max_duration
                elif alignment[i - 1]["word"] in marks:
                    alignment[i]["start"] = alignment[i]["end"] - max_duration
    merge_punctuations(alignment, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS)
    word_index = 0
    for segment, tokens in zip(segments, per_segment):
        time_offset = segment["seek"] / 100
        saved, words = 0, []
        while word_index < len(alignment) and saved < len(tokens):
            timing = alignment[word_index]
            if timing["word"]:
                words.append(dict(word=timing["word"], start=round(time_offset + timing["start"], 2),
                                  end=round(time_offset + timing["end"], 2), probability=timing["probability"]))
            saved += len(timing["tokens"])
            word_index += 1
        if words:
            if words[0]["end"] - last_speech_timestamp > median_duration * 4 and (
                    words[0]["end"] - words[0]["start"] > max_duration
                    or (len(words) > 1 and words[1]["end"] - words[0]["start"] > max_duration * 2)):
                if len(words) > 1 and words[1]["end"] - words[1]["start"] > max_duration:
                    boundary = max(words[1]["end"] / 2, words[1]["end"] - max_duration)
                    words[0]["end"] = words[1]["start"] = boundary
                words[0]["start"] = max(0, words[0]["end"] - max_duration)
            if segment["start"] < words[0]["end"] and segment["start"] - 0.5 > words[0]["start"]:
                words[0]["start"] = max(0, min(words[0]["end"] - median_duration, segment["start"]))
            else:
                segment["start"] = words[0]["start"]
            if segment["end"] > words[-1]["start"] and segment["end"] + 0.5 < words[-1]["end"]:
                words[-1]["end"] = max(words[-1]["start"] + median_duration, segment["end"])
            else:
                segment["end"] = words[-1]["end"]
            last_speech_timestamp = segment["end"]
        segment["words"] = words
    return last_speech_timestamp


def _align(net: Any, sot_sequence: list[int], text_tokens: list[int], num_frames: int,
           language: str) -> list[dict[str, Any]]:
    """One decoder pass over sot_sequence <|notimestamps|> text <|endoftext|>, then find_alignment."""
    tok = net.tokenizer
    c = net.config
    inputs = list(sot_sequence) + [tok.no_timestamps] + text_tokens + [tok.eot]
    n = len(inputs)
    net.decode(inputs, range(n), [0] * n, [n - 1], keep=True)
    queries, hidden = net.saved_alignment_inputs(n)
    offset = len(sot_sequence)
    # Probability of each text token where it was predicted (softmax over the text vocabulary, below <|endoftext|>).
    rows = hidden[offset:offset + len(text_tokens)].astype(np.float32)
    logits = rows @ net.embed[:tok.eot].T
    logits -= logits.max(axis=-1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=-1, keepdims=True)
    token_probs = probs[np.arange(len(text_tokens)), text_tokens]
    keys = {layer: net.cross_keys(layer) for layer in {layer for layer, _ in net.alignment_heads}}
    matrix = alignment_matrix(queries, keys, net.alignment_heads, c.head_dim, offset, num_frames)
    return find_alignment(tok, text_tokens, matrix, token_probs, language)
