#!/usr/bin/env bash
# llama.cpp with CUDA (sm_90: H100 and H200) for the GPU benchmarks, the peer of bench/gpu.py and bench/vision.py,
# and llama-server, the peer of bench/serve.py (built without its web UI).
#
# The GPU machine has nvcc, cmake and ninja but no internet, starts bare on every call and takes
# 64 MiB of files per call, so the sources travel as a stripped tarball (2.5 MB) and the build
# travels back as a bundle (about 17 MB) that later calls unpack in seconds instead of rebuilding
# (about 3.5 minutes on a 16-core machine).
#
#   bash bench/llama_cpp_cuda.sh pack-src [SDIST]   # here: SDIST (llama-cpp-python 0.3.36, pip-downloaded
#                                                   #   when omitted) -> .bench/llamacpp/src.tar.xz
#   bash bench/llama_cpp_cuda.sh [install]          # GPU machine: reuse /tmp/llamacpp/bin if a warm machine
#                                                   #   kept it, else unpack .bench/llamacpp/bin.tar.xz[.part*]
#                                                   #   if present, else build from src.tar.xz and write
#                                                   #   the bundle to $OUT as bin.tar.xz (or parts of
#                                                   #   <= 15 MB: bin.tar.xz.part0, .part1, ...)
#
# Copy what comes back from $OUT into .bench/llamacpp/ and later calls skip the build; but the repo's
# tracked files (~41 MiB) plus .whl, .gl, the tokenizer and the bundle pass the 64 MiB a call takes:
# a call that also runs Hearth (carrying .bench whole) needs the bundle kept out of .bench, and builds. A build
# that outlasts BUILD_TIMEOUT leaves its tree in $OUT/partial.tar.xz[.part*]: copied into .bench/llamacpp/, the
# next call resumes it.
#
# The binaries land in $LLAMA_CPP_PREFIX/bin (default /tmp/llamacpp/bin) with the libraries they need
# (libllama, libggml*, ...; RUNPATH $ORIGIN; CUDA's own libraries come from the machine), and the last
# line printed is LLAMA_CPP_BIN=<that dir>. bench/llama_cpp_cuda.py runs them.
# Environment: LLAMA_CPP_PREFIX, LLAMA_CPP_ARCHS (default 90-real), BUILD_TIMEOUT (seconds of compiling,
# default 540), LLAMA_CPP_STORE (default .bench/llamacpp), LLAMA_CPP_CMAKE_ARGS (extra flags, last wins).

set -euo pipefail  # (each $(...) whose pipeline may fail on purpose ends in || true)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STORE="${LLAMA_CPP_STORE:-$ROOT/.bench/llamacpp}"   # src.tar.xz, bin.tar.xz[.part*], partial.tar.xz[.part*]
VERSION="0.3.36"        # llama-cpp-python release whose vendored llama.cpp we build
COMMIT="0c1e57098"      # the llama.cpp commit it vendors (its CHANGELOG)
PREFIX="${LLAMA_CPP_PREFIX:-/tmp/llamacpp}"   # sources, build tree and bin/ go here
DEST="$PREFIX/bin"
# sm_90 machine code only: both cards are sm_90, and PTX for JIT would double the bundle for nothing.
# Kernels go into the library uncompressed (GGML_CUDA_COMPRESSION_MODE=none): xz packs them into a
# smaller bundle than nvcc's own compression does.
ARCHS="${LLAMA_CPP_ARCHS:-90-real}"
TARGETS=(llama-bench llama-batched-bench llama-quantize llama-mtmd-cli llama-server)  # libmtmd comes with mtmd-cli
PART_SIZE=15000000      # files back from $OUT: at most 16 MiB each

pack_src() {
    local sdist="${1:-}" work
    work="$(mktemp -d)"
    if [[ -z "$sdist" ]]; then
        python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
        sdist="$work/llama_cpp_python-$VERSION.tar.gz"
    fi
    tar -xzf "$sdist" -C "$work" --wildcards "*/vendor/llama.cpp/*"
    local src=("$work"/llama_cpp_python-*/vendor/llama.cpp) out="$work/llama.cpp"
    mkdir -p "$out/ggml/src" "$out/tools" "$out/vendor"
    # Allow-list: what the library, llama-common, libmtmd and the five tools need, CPU and CUDA backends only.
    cp -a "$src"/{CMakeLists.txt,LICENSE,cmake,include,src,common,licenses} "$out/"
    mkdir -p "$out/scripts" "$out/tools/server" "$out/tools/ui"
    cp -a "$src"/scripts/ui-assets.cmake "$out/scripts/"   # llama-server's UI table (left empty: no UI is built)
    cp -a "$src"/tools/ui/{CMakeLists.txt,sources.cmake,ui.cpp.in,ui.h.in} "$out/tools/ui/"
    cp -a "$src"/tools/server/{CMakeLists.txt,*.cpp,*.h} "$out/tools/server/"
    cp -a "$src"/ggml/{CMakeLists.txt,cmake,include} "$out/ggml/"
    find "$src/ggml/src" -maxdepth 1 -type f -exec cp -a {} "$out/ggml/src/" \;
    cp -a "$src"/ggml/src/{ggml-cpu,ggml-cuda} "$out/ggml/src/"
    rm -rf "$out/ggml/src/ggml-cpu/spacemit" "$out/ggml/src/ggml-cpu/arch/"{arm,loongarch,powerpc,riscv,s390,wasm}
    cp -a "$src"/tools/{llama-bench,batched-bench,quantize,mtmd} "$out/tools/"
    rm -f "$out"/tools/mtmd/test-*.{jpeg,mp3,mp4}   # its sample media (not built)
    cp -a "$src"/vendor/{cpp-httplib,hash,miniaudio,nlohmann,sheredom,stb} "$out/vendor/"
    cat > "$out/tools/CMakeLists.txt" <<'EOF'
# stripped by bench/llama_cpp_cuda.sh: only the tools the Hearth GPU benchmark runs
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(batched-bench)
add_subdirectory(llama-bench)
add_subdirectory(quantize)
add_subdirectory(mtmd)
add_subdirectory(ui)
add_subdirectory(server)
EOF
    cat > "$out/vendor/CMakeLists.txt" <<'EOF'
# stripped by bench/llama_cpp_cuda.sh: what llama-common and libmtmd link
add_subdirectory(hash)
add_subdirectory(miniaudio)
add_subdirectory(nlohmann)
add_subdirectory(sheredom)
add_subdirectory(stb)
if (LLAMA_BUILD_COMMON)
    add_subdirectory(cpp-httplib)
endif()
EOF
    echo "llama.cpp $COMMIT from llama-cpp-python $VERSION (sdist vendor/llama.cpp), stripped" > "$out/HEARTH_SOURCE"
    mkdir -p "$STORE"
    tar -C "$work" -cf - llama.cpp | xz -9e -T0 > "$STORE/src.tar.xz"
    rm -rf "$work"
    ls -l "$STORE/src.tar.xz"
}

cmake_flags() {
    echo -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
        -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DMTMD_VIDEO=OFF \
        -DLLAMA_BUILD_COMMIT="$COMMIT" -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON -DGGML_CUDA_COMPRESSION_MODE=none \
        ${CUDA_FIXUPS:-} ${LLAMA_CPP_CMAKE_ARGS:-}
}

first_lib() {  # the first of DIR/NAME.so, DIR/NAME.so.* that exists
    { compgen -G "$1/$2.so" || compgen -G "$1/$2.so.*" | head -1; } || true
}

cuda_fixups() {
    # A toolkit assembled from pip wheels may lack cuBLAS and the driver stub that FindCUDAToolkit wants
    # (nvcc, cudart and CCCL only): then point CMake at the cuBLAS wheel PyTorch uses and at the driver's
    # libcuda.so.1. A whole toolkit needs none of this.
    local root inc lib driver
    command -v nvcc > /dev/null || { echo "nvcc not found" >&2; return 1; }
    # nvcc may be a wrapper script: ask it where its toolkit is.
    root="$(nvcc --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1 || true)"
    root="$(readlink -f "${root:-/usr/local/cuda}")"
    CUDA_FIXUPS=""
    if ! compgen -G "$root/include/cublas_v2.h" > /dev/null \
            && ! compgen -G "$root/targets/*/include/cublas_v2.h" > /dev/null; then
        # shellcheck disable=SC2086  # a list of roots
        inc="$(find ${LLAMA_CPP_CUDA_SEARCH:-/usr/local /opt /usr/lib /usr/include} -name cublas_v2.h \
            -path '*include*' 2> /dev/null | head -1 || true)"
        [[ -n "$inc" ]] || { echo "cuBLAS headers not found" >&2; return 1; }
        lib="$(dirname "$(dirname "$inc")")/lib"
        # Only cuBLAS's headers: that folder may hold other CUDA headers of another minor version.
        mkdir -p "$PREFIX/cublas-include"
        ln -sf "$(dirname "$inc")"/cublas*.h "$PREFIX/cublas-include/"
        CUDA_FIXUPS+=" -DCMAKE_CUDA_FLAGS=-I$PREFIX/cublas-include"
        CUDA_FIXUPS+=" -DCUDA_cublas_LIBRARY=$(first_lib "$lib" libcublas)"
        CUDA_FIXUPS+=" -DCUDA_cublasLt_LIBRARY=$(first_lib "$lib" libcublasLt)"
    fi
    if ! compgen -G "$root/lib*/stubs/libcuda.so" > /dev/null && ! compgen -G "$root/lib*/libcuda.so" > /dev/null \
            && ! compgen -G "$root/targets/*/lib/stubs/libcuda.so" > /dev/null; then
        driver="$(ldconfig -p | awk '/libcuda\.so(\.1)? /{print $NF; exit}' || true)"
        if [[ -n "$driver" ]]; then
            CUDA_FIXUPS+=" -DCUDA_cuda_driver_LIBRARY=$driver"
        else  # ggml links the driver only for its virtual-memory pool; without it, cudaMalloc's pool
            CUDA_FIXUPS+=" -DGGML_CUDA_NO_VMM=ON"
        fi
    fi
    [[ -z "$CUDA_FIXUPS" ]] || echo "CUDA toolkit at $root, with:$CUDA_FIXUPS"
}

have() {  # NAME or its split parts NAME.part* are in the store
    [[ -f "$STORE/$1" ]] || compgen -G "$STORE/$1.part*" > /dev/null
}

unsplit() {  # NAME from the store (whole or its parts in order) to stdout
    if [[ -f "$STORE/$1" ]]; then cat "$STORE/$1"; else cat "$STORE/$1".part*; fi
}

to_out() {  # stdin to $OUT/NAME, split into NAME.part0, NAME.part1, ... when larger than PART_SIZE
    cat > "$OUT/$1"
    if (( $(stat -c %s "$OUT/$1") > PART_SIZE )); then
        split -b "$PART_SIZE" -d -a 1 "$OUT/$1" "$OUT/$1.part"
        rm "$OUT/$1"
    fi
    ls -l "$OUT/$1"*
}

build() {
    local t0 t1 t2
    rm -rf "$PREFIX/llama.cpp" "$PREFIX/build"
    mkdir -p "$PREFIX"
    tar -xJf "$STORE/src.tar.xz" -C "$PREFIX"
    if have partial.tar.xz; then  # a build tree an earlier call stopped at its time limit: ninja goes on from it
        unsplit partial.tar.xz | xz -d | tar -xf - -C "$PREFIX"
        echo "resuming the build left in .bench/llamacpp/partial.tar.xz"
    fi
    t0=$(date +%s)
    if [[ ! -f "$PREFIX/build/build.ninja" ]]; then
        cuda_fixups
        # shellcheck disable=SC2046  # each flag is one word
        cmake -S "$PREFIX/llama.cpp" -B "$PREFIX/build" $(cmake_flags) > "$PREFIX/configure.log" 2>&1 \
            || { tail -40 "$PREFIX/configure.log"; return 1; }
    fi
    t1=$(date +%s)
    # ninja itself, not cmake --build, so that timeout's signal reaches the process that owns the compilers.
    if ! timeout -k 10 "${BUILD_TIMEOUT:-540}" ninja -C "$PREFIX/build" -j "$(nproc)" "${TARGETS[@]}" \
            > "$PREFIX/build.log" 2>&1; then
        tail -30 "$PREFIX/build.log"
        echo "llama.cpp build stopped after $(( $(date +%s) - t1 )) s: $(grep -c '^\[' "$PREFIX/build.log") steps done"
        if [[ -n "${OUT:-}" ]]; then
            tar -C "$PREFIX" -cf - build | xz -1 -T0 | to_out partial.tar.xz
            echo "copy \$OUT/partial.tar.xz* into .bench/llamacpp/ and call again (same LLAMA_CPP_PREFIX) to resume"
        fi
        return 1
    fi
    t2=$(date +%s)
    echo "llama.cpp build: configure $((t1 - t0)) s, compile $((t2 - t1)) s, on $(nproc) cores" \
        "($(nvcc --version | tail -1))"
    rm -rf "$DEST"
    mkdir -p "$DEST"
    (cd "$PREFIX/build/bin" && cp -a "${TARGETS[@]}" ./*.so* "$DEST/")
    find "$DEST" -type f -exec strip --strip-unneeded {} + 2> /dev/null || true
    {
        echo "llama.cpp $COMMIT (llama-cpp-python $VERSION vendor), built $(date -u +%FT%TZ)" \
            "in $((t2 - t0)) s on $(nproc) cores"
        echo "nvcc: $(nvcc --version | tail -1)"
        echo "cmake $(cmake_flags)"
    } > "$DEST/BUILD_INFO"
    package
}

package() {
    # Only our own libraries travel: CUDA's (cudart, cublas), the driver and libgomp are on the GPU machine.
    local missing
    missing="$(cd "$DEST" && LD_LIBRARY_PATH="$DEST" ldd "${TARGETS[@]}" ./*.so* | grep "not found" | sort -u || true)"
    [[ -z "$missing" ]] || echo "warning: unresolved libraries: $missing"
    (cd "$DEST" && ls -l && du -sh .)
    [[ -n "${OUT:-}" ]] || return 0
    tar -C "$PREFIX" -cf - bin | xz -6 -T0 | to_out bin.tar.xz
}

complete() {  # every target is in $DEST
    local t
    for t in "${TARGETS[@]}"; do [[ -x "$DEST/$t" ]] || return 1; done
}

install() {
    if complete && grep -q "^llama.cpp $COMMIT " "$DEST/BUILD_INFO" 2> /dev/null; then
        # A warm machine keeps /tmp between calls: the last call's build is still there.
        echo "llama.cpp already in $DEST: $(head -1 "$DEST/BUILD_INFO")"
    elif have bin.tar.xz; then
        local t0=$SECONDS
        rm -rf "$DEST"
        mkdir -p "$PREFIX"
        unsplit bin.tar.xz | xz -d | tar -xf - -C "$PREFIX"
        echo "llama.cpp bundle unpacked in $((SECONDS - t0)) s: $(head -1 "$DEST/BUILD_INFO")"
        complete || { echo "the bundle lacks some of ${TARGETS[*]} (an older one): building"; build; }
    else
        build
    fi
    echo "LLAMA_CPP_BIN=$DEST"
}

case "${1:-install}" in
    pack-src) pack_src "${2:-}" ;;
    install) install ;;
    *) echo "usage: $0 [install | pack-src [SDIST]]" >&2; exit 2 ;;
esac
