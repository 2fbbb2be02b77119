"""Each sequence's logits decoded as one batch and decoded alone, for the tests that compare the GPU's batched-
decode kernels with its one-sequence kernels (test_engine.py on the 270M, test_gemma4_synthetic.py)."""

from __future__ import annotations

import numpy as np

from models.text.engine import DecodeRow, TextModel


def greedy_tokens(model: TextModel, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens of prompt decoded alone, the logits read back after every step."""
    session = model.new_session()
    try:
        logits = session.prefill(prompt)
        tokens = []
        for _ in range(n):
            tokens.append(int(np.argmax(logits)))
            logits = session.decode(tokens[-1])
        return tokens
    finally:
        session.close()


def batched_and_alone(model: TextModel, prompts: list[list[int]], n_steps: int,
                      ) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    """(batched, alone): [sequence][step] logits of each prompt's decode steps fed its own greedy tokens, once with
    every sequence in one batch (the engine's single-step submissions, all rows read back) and once alone."""
    forced = [greedy_tokens(model, p, n_steps) for p in prompts]
    alone = []
    for prompt, tokens in zip(prompts, forced, strict=True):
        session = model.new_session()
        try:
            session.prefill(prompt)
            alone.append([session.decode(t) for t in tokens])
        finally:
            session.close()
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
