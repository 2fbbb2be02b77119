"""The shared decoder's registry and config helpers (models/text/decoder.py); the step it records is checked against
the tree before the redesign in test_step_dispatches.py and against transformers in the parity tests."""

from __future__ import annotations

import pytest

from models.text.decoder import FAMILIES, Decoder, DecoderConfig, family


@pytest.mark.parametrize("architecture", sorted(FAMILIES))
def test_families_are_found_by_their_gguf_architecture(architecture: str) -> None:
    cls = family(architecture)
    assert issubclass(cls, Decoder) and cls.architecture == architecture


def test_kv_shared_layers_read_the_last_unshared_layer_of_their_kind() -> None:
    sliding = (True, True, False, True, True, False)
    c = DecoderConfig(n_layers=6, d_model=64, n_heads=2, head_dims=(32, 32, 64, 32, 32, 64), kv_heads=(1,) * 6,
                      d_ffn=(128,) * 6, sliding=sliding, eps=1e-6, window=16, rope_base_full=1e6,
                      rope_base_swa=1e4, rope_scale_full=1.0, query_scale=1.0, embed_scale=8.0, n_ctx_train=128,
                      vocab_size=256, n_shared_kv=2)
    assert [c.shared(i) for i in range(6)] == [False] * 4 + [True] * 2
    assert [c.cache_layer(i) for i in range(6)] == [0, 1, 2, 3, 3, 2]
    assert (c.q_width(2), c.kv_width(2), c.kv_width(0)) == (128, 64, 32)
