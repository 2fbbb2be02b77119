r"""Golden logits for Gemma 4 prompts holding image and audio rows (issue 42): the decoder's side of a multimodal
prompt checked end to end against transformers, masks included.

The text models are scripts/make_gemma4_fixtures.py's F32 fixtures (numpy weights, written to GGUF by its
write_gguf, so tests rebuild the files): "e2b" (PLE, KV sharing; use_bidirectional_attention unset, so image rows
are causal) and "moe" (the 26B-A4B's features, no PLE; use_bidirectional_attention "vision", so an image's rows
see each other both ways on sliding layers and causally on full ones). Each prompt places rows of soft tokens
whose input embeddings are seeded random vectors of the scaled token embeddings' size, standing in for the image
and audio towers' output (tests/golden/vision and tests/golden/gemma4_audio check the towers against
transformers): one image, one audio clip, or both, or one image of more rows than the sliding window.

transformers' side is Gemma4Model.forward's own composition, minus the towers: the soft rows' ids become the pad
id for the per-layer inputs, the embeddings are spliced in, and the mask mapping comes from
create_masks_for_vision_model on get_block_sequence_ids_for_mask(mm_token_type_ids) (images 1, audio 3) where
use_bidirectional_attention is "vision", else the causal masks. Every step is a full forward without a cache.

Outputs in --out (tests/golden/gemma4_mm): golden.npz with, per kind k and prompt p (image, audio, both, wide):
<k>/<p>/ids int32 [T], <k>/<p>/spans int32 [n, 3] (start, rows, 1 for audio), <k>/<p>/embeddings float32 [rows, D]
(every span's rows in order), <k>/<p>/logits float32 [V] (after the prompt), <k>/<p>/greedy int32 [32];
meta.json with the versions, seed and the sha256 of each fixture GGUF.

Run (about a minute; torch CPU, transformers 5.24; from the repository root):

    /work/refvenv/bin/python scripts/make_gemma4_multimodal_fixtures.py --out tests/golden/gemma4_mm
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from scripts.make_gemma4_fixtures import (  # noqa: E402
    FIRST_TEXT_ID,
    FIXTURES,
    N_GREEDY,
    VOCAB,
    dequantized_weights,
    file_sha256,
    write_gguf,
)

SEED = 4242
PAD = 0
KINDS = {"e2b": None, "moe": "vision"}  # fixture -> its use_bidirectional_attention
IMAGE, AUDIO = 1, 3  # mm_token_type_ids of an image's and an audio clip's soft tokens
IMAGE_ROWS, AUDIO_ROWS, WIDE_ROWS = 9, 7, 24
# (kind of span, first row, rows) per prompt; 30 tokens in all, the later spans past the 16-token window; "wide": an
# image of more rows than the window, so on the moe kind's sliding layers its first rows see later rows that their
# later rows' windows have left behind
PROMPTS = {"image": [(IMAGE, 5, IMAGE_ROWS)], "audio": [(AUDIO, 6, AUDIO_ROWS)],
           "both": [(IMAGE, 3, IMAGE_ROWS), (AUDIO, 18, AUDIO_ROWS)], "wide": [(IMAGE, 3, WIDE_ROWS)]}
PROMPT_TOKENS = 30


def prompt(kind: str, name: str, embed_rms: float) -> dict[str, np.ndarray]:
    """A prompt's ids (BOS, ordinary pieces, a placeholder id at soft rows), its spans and their embeddings."""
    rng = np.random.default_rng([SEED, list(KINDS).index(kind), list(PROMPTS).index(name)])
    ids = [2] + rng.integers(FIRST_TEXT_ID, len(VOCAB), PROMPT_TOKENS - 1).tolist()
    spans, rows = [], []
    for source, start, n in PROMPTS[name]:
        ids[start:start + n] = [PAD] * n  # any id: neither side looks soft rows up
        spans.append((start, n, int(source == AUDIO)))
        rows.append(rng.normal(0, embed_rms, (n, FIXTURES[kind].hidden_size)))
    return {"ids": np.array(ids, np.int32), "spans": np.array(spans, np.int32),
            "embeddings": np.concatenate(rows).astype(np.float32)}


def reference(kind: str) -> dict[str, np.ndarray]:
    """transformers' last-position logits and greedy tokens for each prompt of a kind."""
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig
    from transformers.masking_utils import create_masks_for_generate
    from transformers.models.gemma4.modeling_gemma4 import (
        create_masks_for_vision_model,
        get_block_sequence_ids_for_mask,
    )

    fx = FIXTURES[kind]
    config = Gemma4TextConfig(**fx.hf_config(), attn_implementation="eager",
                              use_bidirectional_attention=KINDS[kind])
    model = Gemma4ForCausalLM(config).eval()
    state = {k: torch.from_numpy(v.copy()) for k, v in dequantized_weights(fx, "f32").items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    text = model.model
    with torch.no_grad():
        table = text.embed_tokens(torch.arange(FIRST_TEXT_ID, len(VOCAB)))  # scaled, as the model embeds
        embed_rms = float(table.pow(2).mean().sqrt())
    out: dict[str, np.ndarray] = {}
    for name in PROMPTS:
        p = prompt(kind, name, embed_rms)
        seq, greedy, last = [int(i) for i in p["ids"]], [], None
        types = [0] * len(seq)
        for start, n, audio in p["spans"]:
            types[start:start + n] = [AUDIO if audio else IMAGE] * n
        with torch.no_grad():
            for _ in range(N_GREEDY + 1):
                ids = torch.tensor([seq])
                embeds = text.embed_tokens(ids)
                at = 0
                for start, n, _audio in p["spans"]:
                    embeds[0, start:start + n] = torch.from_numpy(p["embeddings"][at:at + n])
                    at += n
                per_layer = text.get_per_layer_inputs(ids, embeds) if fx.hidden_size_per_layer_input else None
                mask_args = {"config": config, "inputs_embeds": embeds, "attention_mask": None, "cache": None,
                             "position_ids": torch.arange(len(seq))[None]}
                if config.use_bidirectional_attention == "vision":  # Gemma4Model.forward's choice
                    blocks = get_block_sequence_ids_for_mask(torch.tensor([types]), embeds.device)
                    masks = create_masks_for_vision_model(block_sequence_ids=blocks, **mask_args)
                else:
                    masks = create_masks_for_generate(**mask_args)
                hidden = text(inputs_embeds=embeds, per_layer_inputs=per_layer, attention_mask=masks,
                              use_cache=False).last_hidden_state
                logits = model.lm_head(hidden[0, -1])
                cap = config.final_logit_softcapping
                logits = (torch.tanh(logits / cap) * cap).float().numpy()
                last = logits if last is None else last
                greedy.append(int(logits.argmax()))
                seq.append(greedy[-1])
                types.append(0)
        out.update({f"{kind}/{name}/{k}": v for k, v in p.items()})
        out[f"{kind}/{name}/logits"] = last.astype(np.float32)
        out[f"{kind}/{name}/greedy"] = np.array(greedy[:N_GREEDY], np.int32)
    return out


def main() -> None:
    import torch
    import transformers

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("tests/golden/gemma4_mm"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    golden: dict[str, np.ndarray] = {}
    files = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            path = write_gguf(FIXTURES[kind], Path(tmp) / f"gemma4_{kind}_f32.gguf", "f32", "llamacpp")
            files[path.name] = file_sha256(path)
            golden.update(reference(kind))
            print(f"{kind}: done", flush=True)
    np.savez_compressed(args.out / "golden.npz", **golden)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "seed": SEED, "kinds": KINDS,
            "files": files}
    (args.out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
