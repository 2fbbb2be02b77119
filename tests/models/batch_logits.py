"""Each sequence's logits decoded as one batch and decoded alone, for the tests that compare the GPU's batched-
decode kernels with its one-sequence kernels (test_engine.py on the 270M, test_gemma4_synthetic.py)."""

from __future__ import annotations

import weakref

import numpy as np

from models.text.engine import DecodeRow, TextModel

# model -> prompt -> (greedy tokens, the logits after each of them): one sequence decoded alone, the reference of
# several tests on the same model; kept so that each costs its decode steps once (most of a second each on lavapipe)
_alone: weakref.WeakKeyDictionary[TextModel, dict[tuple[int, ...], tuple[list[int], list[np.ndarray]]]] = (
    weakref.WeakKeyDictionary())


def decode_alone(model: TextModel, prompt: list[int], n: int) -> tuple[list[int], list[np.ndarray]]:
    """n greedy tokens of prompt decoded alone and the logits of the n decode steps fed them (read back after
    every step); computed once per model and prompt, and again from the start when more steps are asked for."""
    runs = _alone.setdefault(model, {})
    tokens, logits = runs.get(tuple(prompt), ([], []))
    if len(tokens) < n:
        session = model.new_session()
        try:
            step_logits = session.prefill(prompt)
            tokens, logits = [], []
            for _ in range(n):
                tokens.append(int(np.argmax(step_logits)))
                step_logits = session.decode(tokens[-1])
                logits.append(step_logits)
        finally:
            session.close()
        runs[tuple(prompt)] = (tokens, logits)
    return tokens[:n], logits[:n]


def greedy_tokens(model: TextModel, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens of prompt decoded alone, the logits read back after every step."""
    return decode_alone(model, prompt, n)[0]


def batched_and_alone(model: TextModel, prompts: list[list[int]], n_steps: int,
                      ) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    """(batched, alone): [sequence][step] logits of each prompt's decode steps fed its own greedy tokens, once with
    every sequence in one batch (the engine's single-step submissions, all rows read back) and once alone."""
    runs = [decode_alone(model, p, n_steps) for p in prompts]
    forced = [tokens for tokens, _ in runs]
    alone = [logits for _, logits in runs]
    engine = model.engine()
    sessions = [model.new_session() for _ in prompts]
    batched: list[list[np.ndarray]] = [[] for _ in prompts]
    try:
        for session, prompt in zip(sessions, prompts, strict=True):
            engine.submit_prefill(session, prompt).wait()
        for step in range(n_steps):
            rows = [DecodeRow(s, token=tokens[step], read_logits=True) for s, tokens in zip(sessions, forced,
                                                                                           strict=True)]
            _, logits = engine.submit_decode(rows).wait()
            for i in range(len(prompts)):
                batched[i].append(logits[i])
    finally:
        for session in sessions:
            session.close()
    return batched, alone


def assert_agree(batched: list[list[np.ndarray]], alone: list[list[np.ndarray]], min_cosine: float) -> None:
    """Every step's logits within min_cosine of each other, with the same greedy token."""
    for i, (got_rows, want_rows) in enumerate(zip(batched, alone, strict=True)):
        for step, (got, want) in enumerate(zip(got_rows, want_rows, strict=True)):
            cosine = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
            assert cosine >= min_cosine, f"sequence {i} step {step}: cosine {cosine}"
            assert int(np.argmax(got)) == int(np.argmax(want)), f"sequence {i} step {step}"
