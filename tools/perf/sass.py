"""The machine code (SASS) NVIDIA's Vulkan driver compiled Hearth's shaders to, read from its shader disk cache.

wgpu gives no access to a pipeline's compiled code or register count, but NVIDIA's driver caches what it
compiles: run Hearth with

    __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=/tmp/nvcache __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1

(the directory must exist), then

    python tools/perf/sass.py /tmp/nvcache OUT_DIR [--arch SM90]

writes OUT_DIR/kNN.sass for each cached compute pipeline and prints its instruction count, highest register
and commonest instructions (one `IDP.4A` per dot4I8Packed, `FFMA` per f32 fma, `LDS` per workgroup load).
Names are not kept: tell the pipelines apart by their mix (a profile run compiles the kernels it lists).

The cache layout is not documented; what this reads holds for NVIDIA's driver 580.159.04: the
.bin file is a run of zstd frames; a frame holding a pipeline starts "NVDANVVM", and the little-endian u32
words 19 and 20 of its header are the code's size and its offset less 8. Needs the `zstd` command and CUDA's
`nvdisasm` (the GPU machine has nvdisasm but not always zstd: carry Debian's zstd and libzstd1 packages, fetched with
`apt-get download`, and unpack them there with `dpkg -x DEB /tmp/zz`, PATH and LD_LIBRARY_PATH pointing into it); a
driver that stores the cache otherwise makes this print nothing.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PIPELINE_MAGIC = b"NVDANVVM"
INSTRUCTION = re.compile(r"\*/\s+(?:@!?U?PT?\d*\s+)?([A-Z][A-Z0-9_.]*)")
REGISTER = re.compile(r"\bR(\d+)\b")


def pipeline_codes(cache: Path) -> list[bytes]:
    """The raw code of every pipeline in the cache's .bin files."""
    codes = []
    for path in sorted(cache.rglob("*.bin")):
        data = path.read_bytes()
        starts = [m.start() for m in re.finditer(re.escape(ZSTD_MAGIC), data)] + [len(data)]
        for begin, end in itertools.pairwise(starts):
            # a magic inside a frame's data splits it wrongly: such pieces fail to decompress and are skipped
            frame = subprocess.run(["zstd", "-d", "-c", "-q"], input=data[begin:end], capture_output=True,
                                   check=False).stdout
            if frame.startswith(PIPELINE_MAGIC):
                words = struct.unpack_from("<21I", frame)
                offset, size = words[20] + 8, words[19]
                codes.append(frame[offset:offset + size])
    return codes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cache", type=Path, help="__GL_SHADER_DISK_CACHE_PATH of the run")
    parser.add_argument("out", type=Path, help="directory for the .sass files")
    parser.add_argument("--arch", default="SM90", help="nvdisasm's -b (SM90: H100 and H200)")
    args = parser.parse_args()
    for tool in ("zstd", "nvdisasm"):
        if shutil.which(tool) is None:
            sys.exit(f"tools/perf/sass.py needs `{tool}` on the PATH")
    args.out.mkdir(parents=True, exist_ok=True)
    for i, code in enumerate(pipeline_codes(args.cache)):
        raw = args.out / f"k{i:02d}.code"
        raw.write_bytes(code)
        sass = subprocess.run(["nvdisasm", "-b", args.arch, str(raw)], capture_output=True, text=True,
                              check=True).stdout
        raw.with_suffix(".sass").write_text(sass)
        ops = collections.Counter(INSTRUCTION.findall(sass))
        registers = [int(r) for r in REGISTER.findall(sass)]
        common = " ".join(f"{op}:{count}" for op, count in ops.most_common(12))
        print(f"k{i:02d}: {sum(ops.values())} instructions, R0..R{max(registers, default=-1)}; {common}")


if __name__ == "__main__":
    main()
