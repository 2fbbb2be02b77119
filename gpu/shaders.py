"""WGSL source assembly: includes and specialisation constants, the one mechanism for variants.

A kernel file declares what may be specialised as `override NAME: TYPE = DEFAULT;` at the
top level. The host compiles a variant by giving values for some of them; each such line
becomes `const NAME: TYPE = VALUE;` (a const can size workgroup arrays, an override cannot
everywhere). String-valued constants are substituted where the source writes `${NAME}`,
which is how a kernel includes the block decoder of its weight type:
`#include "quant/${WEIGHT_TYPE}.wgsl"`. Each file is included once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

KERNEL_DIR = Path(__file__).parent / "kernels"

_INCLUDE = re.compile(r'^\s*#include\s+"([^"]+)"\s*$', re.MULTILINE)
_OVERRIDE = re.compile(r"^override\s+(\w+)\s*:\s*(\w+)\s*=\s*([^;]+);", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


class ShaderSourceError(ValueError):
    """A kernel was asked for with constants it does not declare, or a file is missing."""


def _format_value(value: Any, wgsl_type: str) -> str:
    if wgsl_type == "bool":
        return "true" if value else "false"
    if wgsl_type == "u32":
        return f"{int(value)}u"
    if wgsl_type == "i32":
        return f"{int(value)}i"
    if wgsl_type == "f32":
        return f"{float(value)!r}f".replace("inf", "3.4028235e38")
    raise ShaderSourceError(f"unsupported override type {wgsl_type}")


def _fill(text: str, strings: Mapping[str, str], kernel: str) -> str:
    def value(match: re.Match[str]) -> str:
        if match.group(1) not in strings:
            raise ShaderSourceError(f"{kernel}: string constant {match.group(1)} not given")
        return strings[match.group(1)]

    return _PLACEHOLDER.sub(value, text)


def _expand(path: str, strings: Mapping[str, str], seen: set[str]) -> str:
    path = _fill(path, strings, path)
    if path in seen:
        return ""
    seen.add(path)
    file = KERNEL_DIR / path
    if not file.is_file():
        raise ShaderSourceError(f"kernel source {path} not found under {KERNEL_DIR}")
    text = file.read_text()
    return _INCLUDE.sub(lambda m: _expand(m.group(1), strings, seen), text)


def compile_source(kernel: str, constants: Mapping[str, Any], features: Iterable[str] = ()) -> str:
    """The WGSL text of kernel (a path under kernels/ without .wgsl) specialised by constants."""
    strings = {k: v for k, v in constants.items() if isinstance(v, str)}
    source = _fill(_expand(f"{kernel}.wgsl", strings, set()), strings, kernel)
    numeric = {k: v for k, v in constants.items() if not isinstance(v, str)}
    declared: set[str] = set()

    def specialise(match: re.Match[str]) -> str:
        name, wgsl_type, default = match.groups()
        declared.add(name)
        value = _format_value(numeric[name], wgsl_type) if name in numeric else default.strip()
        return f"const {name}: {wgsl_type} = {value};"

    source = _OVERRIDE.sub(specialise, source)
    unknown = set(numeric) - declared
    if unknown:
        raise ShaderSourceError(f"{kernel}: constants {sorted(unknown)} are not declared in the kernel")
    if "enable f16;" in source:
        # Only one `enable` may lead the module: hoist it, and refuse where the adapter lacks it.
        if "shader-f16" not in set(features):
            raise ShaderSourceError(f"{kernel} needs shader-f16, which this adapter lacks")
        source = "enable f16;\n" + source.replace("enable f16;", "")
    return source

