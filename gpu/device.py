"""The wgpu device: adapter choice, limits, features, buffers and the pipeline cache.

A real GPU adapter is preferred over a software one (lavapipe); `HEARTH_ADAPTER` picks an
adapter by a substring of its name. The device asks for the adapter's maximum limits and
for the optional features Hearth's kernels can use.

Several GPUs: `list_adapters` numbers the machine's adapters (one per physical device, on its best
backend), and `resolve_adapters` turns a setting ("0,1", "H200", "all") into the adapters a model's
replicas run on (server/replicas.py), one device each.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import wgpu

from gpu.errors import DeviceLost, GPUFailure, gpu_stage

try:  # wgpu-native's C API under wgpu-py: submission indices (see Device.submit)
    from wgpu.backends.wgpu_native import _api as _native
except ImportError:  # another backend: waits are wgpu-py's own
    _native = None  # type: ignore[assignment]
from gpu.shaders import compile_source
from gpu.turns import turns_for

log = logging.getLogger("hearth.gpu")


_map_callback: Any = None
MAP_TIMEOUT_S = 10.0  # a read-back's map, once its submission has run, resolves in microseconds


def _on_mapped() -> Any:
    """The C callback of Device.read_staging's maps: it stores the map's status where its userdata points."""
    global _map_callback
    if _map_callback is None:
        @_native.ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")
        def on_mapped(status: int, message: Any, status_out: Any, _unused: Any) -> None:
            _native.ffi.cast("int *", status_out)[0] = status

        _map_callback = on_mapped
    return _map_callback


def native_api() -> Any:
    """wgpu-py's wgpu-native module (its `lib`, `libf` and `ffi`), or None on another backend."""
    return _native

OPTIONAL_FEATURES = ("shader-f16", "subgroup", "timestamp-query")
STORAGE_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
# Adapter types in order of preference: a GPU beats a CPU rasteriser.
_ADAPTER_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4}
# Vulkan first: the OpenGL backend lacks compute features that lavapipe has.
_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 2}
# Streaming multiprocessors of NVIDIA GPUs (NVIDIA's specifications), by a substring of the adapter name the driver
# reports, first match wins: WebGPU does not tell how many workgroups run at once, and the prompt matmuls size
# their k splits to whole rounds of workgroups where they know it (gpu/ops/matmul_plan.py, whole_waves_split;
# measured on an H100 only).
_NVIDIA_SMS = (("H200", 132), ("H100 PCIe", 114), ("H100", 132), ("A100", 108), ("L40", 142), ("L4", 58),
               ("A10G", 80), ("A10", 72), ("RTX 4090", 128), ("RTX 4080", 76), ("RTX 3090", 82))


def streaming_multiprocessors(adapter_name: str) -> int | None:
    """The SM count of an NVIDIA adapter of _NVIDIA_SMS by its name, else None (unknown)."""
    if "NVIDIA" not in adapter_name:
        return None
    return next((sms for model, sms in _NVIDIA_SMS if model in adapter_name), None)


@dataclass(frozen=True)
class DeviceLimits:
    """The limits Hearth plans around, in bytes unless named otherwise."""

    max_binding_bytes: int
    max_buffer_bytes: int
    workgroup_storage_bytes: int
    max_invocations: int
    max_storage_buffers: int
    min_offset_alignment: int


class Device:
    """One wgpu device with its queue, a pipeline cache and buffer helpers."""

    def __init__(self, adapter: Any, slot: int = 0) -> None:
        """slot: which of several adapters with the same description this is (two GPUs of one model), so each
        has turns of its own; 0 for the first (AdapterSlot.slot)."""
        self.adapter = adapter
        info = adapter.info
        self.name: str = info["device"]
        self.backend: str = info["backend_type"]
        self.adapter_type: str = info["adapter_type"]
        self.sms: int | None = streaming_multiprocessors(self.name)  # None: not an NVIDIA GPU of _NVIDIA_SMS
        self.features = frozenset(f for f in OPTIONAL_FEATURES if f in adapter.features)
        with gpu_stage("requesting device", self.name):
            self.device = adapter.request_device_sync(
                required_features=sorted(self.features), required_limits=dict(adapter.limits)
            )
        lim = self.device.limits
        self.limits = DeviceLimits(
            max_binding_bytes=int(lim["max-storage-buffer-binding-size"]),
            max_buffer_bytes=int(lim["max-buffer-size"]),
            workgroup_storage_bytes=int(lim["max-compute-workgroup-storage-size"]),
            max_invocations=int(lim["max-compute-invocations-per-workgroup"]),
            max_storage_buffers=int(lim["max-storage-buffers-per-shader-stage"]),
            min_offset_alignment=int(lim["min-storage-buffer-offset-alignment"]),
        )
        self.queue = self.device.queue
        # Every device on this adapter shares one Turns: models take the adapter's work in turn (gpu/turns.py).
        self.turns = turns_for(f"{_identity(info)}#{slot}")
        self._pipelines: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        # compute pipelines created on this device so far: tests and the server's warm-up tell by it whether a
        # request still compiles (a shader compile mid-request costs it milliseconds to seconds)
        self.pipelines_compiled = 0
        # ids of the pipelines Executor.dispatch_pipelines has dispatched (so that their driver has compiled them)
        self.pipelines_dispatched: set[int] = set()
        log.info(
            "GPU adapter %r (%s, %s); features %s; max binding %d MiB, max buffer %d MiB, "
            "workgroup storage %d KiB",
            self.name, self.adapter_type, self.backend, sorted(self.features) or "none",
            self.limits.max_binding_bytes >> 20, self.limits.max_buffer_bytes >> 20,
            self.limits.workgroup_storage_bytes >> 10,
        )

    @property
    def is_software(self) -> bool:
        """True on a CPU rasteriser (lavapipe, llvmpipe)."""
        return self.adapter_type == "CPU"

    def pauses_between_steps(self) -> bool:
        """Whether a long run of work (a synthesis, an encoder pass) should wait for each of its steps and give the
        adapter's turn back in between: always on a CPU rasteriser, where a step runs for seconds and a cancel or
        another model must get in; on a GPU only while another model waits for its turn (waits cost idle time)."""
        return self.is_software or self.turns.waiting > 0

    def has(self, feature: str) -> bool:
        return feature in self.features

    def reduction(self, subgroups: bool | None = None) -> str:
        """The variant of a kernel's reductions (the REDUCE constant: kernels/*/..._subgroup.wgsl or
        ..._workgroup.wgsl): "subgroup" where the adapter has the feature, unless subgroups is False;
        asking for subgroups on an adapter without them is an error."""
        if subgroups is None:
            subgroups = self.has("subgroup")
        elif subgroups and not self.has("subgroup"):
            raise ValueError("subgroup reductions asked for, but the adapter lacks the feature")
        return "subgroup" if subgroups else "workgroup"

    # -- buffers ---------------------------------------------------------------------
    def create_buffer(self, nbytes: int, label: str, usage: int = STORAGE_USAGE) -> Any:
        """A zero-filled buffer of at least nbytes, rounded up to 4 bytes."""
        size = max(4, (nbytes + 3) & ~3)
        with gpu_stage("creating buffer", f"{label} ({size} bytes)"):
            return self.device.create_buffer(size=size, usage=usage, label=label)

    def upload(self, data: np.ndarray | bytes | memoryview, label: str) -> Any:
        """A storage buffer holding data (padded with zeros to a multiple of 4 bytes)."""
        raw = memoryview(np.ascontiguousarray(data)).cast("B") if isinstance(data, np.ndarray) else memoryview(data)
        buffer = self.create_buffer(raw.nbytes, label)
        self.write(buffer, raw, label)
        return buffer

    def write(self, buffer: Any, data: np.ndarray | bytes | memoryview, label: str, offset: int = 0) -> None:
        raw = memoryview(np.ascontiguousarray(data)).cast("B") if isinstance(data, np.ndarray) else memoryview(data)
        usable = raw.nbytes & ~3
        with gpu_stage("writing buffer", label):
            if usable:
                self.queue.write_buffer(buffer, offset, raw[:usable])
            if usable != raw.nbytes:  # queue writes must be 4-byte multiples
                tail = bytes(raw[usable:]) + b"\0" * (4 - (raw.nbytes - usable))
                self.queue.write_buffer(buffer, offset + usable, tail)

    def submit(self, command_buffer: Any) -> int | None:
        """Submit a command buffer; its submission index where wgpu-native tells it (else None).

        With the index, wait_for() can wait for this submission alone: wgpu-py's own waits (a
        buffer map) poll the device until everything submitted so far has run, which would make
        the host wait for the submission queued after this one and leave the GPU idle while it
        records the next (the H200's 2.6 ms per 270M decode token looked like encode + GPU time).
        """
        if _native is None:
            self.queue.submit([command_buffer])
            return None
        commands = _native.ffi.new("WGPUCommandBuffer[]", [command_buffer._internal])
        return int(_native.libf.wgpuQueueSubmitForIndex(self.queue._internal, 1, commands))

    def wait_for(self, index: int | None) -> None:
        """Block until submission `index` has run (later submissions may still be running)."""
        if _native is not None and index is not None:
            c_index = _native.ffi.new("WGPUSubmissionIndex *", index)
            _native.libf.wgpuDevicePoll(self.device._internal, True, c_index)

    def read_staging(self, staging: Any, nbytes: int, index: int | None) -> bytes:
        """The first nbytes of a MAP_READ buffer once submission `index` (which copies into it) has run.

        wgpu-py's map_sync waits for a callback from its polling thread: a thread hand-off on every read,
        which a constrained decode step (whose next step waits for its token) pays in full. On wgpu-native the
        buffer is mapped in this thread's wait for the submission instead."""
        if _native is None or index is None:
            self.wait_for(index)
            staging.map_sync(wgpu.MapMode.READ, 0, nbytes)
            try:
                return bytes(staging.read_mapped(0, nbytes, copy=True))
            finally:
                staging.unmap()
        ffi, lib, libf = _native.ffi, _native.lib, _native.libf
        status = ffi.new("int *", -1)
        info = ffi.new("WGPUBufferMapCallbackInfo *")
        info.mode = lib.WGPUCallbackMode_AllowProcessEvents
        info.callback = _on_mapped()
        info.userdata1 = status
        libf.wgpuBufferMapAsync(staging._internal, lib.WGPUMapMode_Read, 0, nbytes, info[0])
        self.wait_for(index)
        deadline = time.monotonic() + MAP_TIMEOUT_S
        while status[0] < 0:  # the map resolves in a poll after its submission has run
            libf.wgpuDevicePoll(self.device._internal, False, ffi.NULL)
            if time.monotonic() > deadline:  # a lost device may never call back: fail rather than spin
                raise DeviceLost("reading back", "a staging buffer", TimeoutError(
                    f"a read-back buffer did not map within {MAP_TIMEOUT_S} s of its submission: the device is lost"))
        if status[0] != lib.WGPUMapAsyncStatus_Success:
            raise RuntimeError(f"could not map a read-back buffer (status {status[0]})")
        try:
            return bytes(ffi.buffer(libf.wgpuBufferGetConstMappedRange(staging._internal, 0, nbytes), nbytes))
        finally:
            libf.wgpuBufferUnmap(staging._internal)

    def read(self, buffer: Any, nbytes: int, label: str, offset: int = 0) -> bytes:
        """Copy nbytes back from a storage buffer (slow path for tests and tools)."""
        with gpu_stage("reading buffer", label):
            return bytes(self.queue.read_buffer(buffer, offset, (nbytes + 3) & ~3))[:nbytes]

    # -- pipelines -------------------------------------------------------------------
    def pipeline(self, kernel: str, constants: dict[str, Any] | None = None) -> Any:
        """The compute pipeline of kernels/<kernel>.wgsl specialised by constants, compiled once."""
        key = (kernel, tuple(sorted((constants or {}).items())))
        with self._lock:
            cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        source = compile_source(kernel, constants or {}, self.features)
        with gpu_stage("compiling shader", kernel):
            module = self.device.create_shader_module(code=source, label=kernel)
            pipeline = self.device.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": "main"}, label=kernel
            )
        with self._lock:
            self._pipelines[key] = pipeline
            self.pipelines_compiled += 1
        return pipeline


def _rank(adapter: Any) -> tuple[int, int]:
    info = adapter.info
    return (_ADAPTER_RANK.get(info["adapter_type"], 3), _BACKEND_RANK.get(info["backend_type"], 1))


def choose_adapter(name: str | None = None) -> Any:
    """The best adapter, or the first whose name contains `name` (case-insensitive)."""
    adapters = list(wgpu.gpu.enumerate_adapters_sync())
    if not adapters:
        raise GPUFailure("finding an adapter", "device", "no WebGPU adapter; install a Vulkan driver "
                         "(on a machine without a GPU: apt-get install mesa-vulkan-drivers libvulkan1)")
    if name:
        wanted = [a for a in adapters if name.lower() in f"{a.info['device']} {a.info['vendor']}".lower()]
        if not wanted:
            names = ", ".join(repr(a.info["device"]) for a in adapters)
            raise GPUFailure("finding an adapter", "device", f"HEARTH_ADAPTER={name!r} matches none of {names}")
        adapters = wanted
    return min(adapters, key=_rank)


def _identity(info: Any) -> str:
    """What tells adapters apart, short of a bus address WebGPU does not give (two GPUs of one model share it)."""
    return f"{info['backend_type']}:{info['device']}:{info.get('vendor_id', '')}:{info.get('device_id', '')}"


@dataclass(frozen=True)
class AdapterSlot:
    """One of the machine's adapters as `list_adapters` numbers them."""

    index: int  # its place in list_adapters()
    name: str  # the adapter's device name
    adapter_type: str  # "DiscreteGPU", "CPU", ...
    slot: int  # among adapters of the same description, which one (Device's slot)
    adapter: Any = field(default=None, compare=False)  # the wgpu adapter

    def device(self) -> Device:
        """A device of its own on this adapter."""
        return Device(self.adapter, self.slot)


_enumerated: list[Any] = []  # every adapter list_adapters saw, kept for the process's life
_listed: list[AdapterSlot] | None = None
_listed_lock = threading.Lock()


def list_adapters() -> list[AdapterSlot]:
    """The machine's adapters, best first (GPUs before CPU rasterisers), each physical device once: only those of
    the best backend present count (Vulkan's, not the OpenGL ones that name the same GPUs otherwise, as "NVIDIA
    H200/PCIe/SSE2", and lack compute features). Equal adapters keep the driver's order, so index 0 and 1 are the
    same GPUs on every call.

    Enumerated once per process, and never released: replicas' threads enumerating and dropping adapters at once
    aborted the process on the H200 machine (a panic in wgpuAdapterRelease). Each replica makes its own device
    from the listed adapter (an adapter gives any number of devices)."""
    global _listed
    with _listed_lock:
        if _listed is None:
            _listed = _enumerate_adapters()
        return list(_listed)


def _enumerate_adapters() -> list[AdapterSlot]:
    adapters = list(wgpu.gpu.enumerate_adapters_sync())
    _enumerated.extend(adapters)
    best_backend = min((_rank(a)[1] for a in adapters), default=0)
    kept = [a for a in adapters if _rank(a)[1] == best_backend]
    kept.sort(key=_rank)  # stable: the driver's order among equals
    slots: dict[str, int] = {}
    listed = []
    for index, adapter in enumerate(kept):
        identity = _identity(adapter.info)
        slot = slots.get(identity, 0)
        slots[identity] = slot + 1
        listed.append(AdapterSlot(index, adapter.info["device"], adapter.info["adapter_type"], slot, adapter))
    return listed


def resolve_adapters(spec: tuple[str, ...] | list[str], available: list[AdapterSlot] | None = None,
                     ) -> list[AdapterSlot]:
    """The adapters named by a setting, one replica each: "all" (every adapter of the best kind: all the GPUs,
    or the CPU rasteriser where there is none), an index of list_adapters(), or a substring of a name (each
    such name takes the next adapter it matches that is not taken yet). An index may repeat: replicas then share
    one adapter (their rounds take its turns), which serves tests on a machine of one adapter."""
    available = list_adapters() if available is None else available
    if not available:
        raise GPUFailure("finding an adapter", "device", "no WebGPU adapter; install a Vulkan driver")
    if list(spec) == ["all"]:
        best = _ADAPTER_RANK.get(available[0].adapter_type, 3)
        return [a for a in available if _ADAPTER_RANK.get(a.adapter_type, 3) == best]
    chosen: list[AdapterSlot] = []
    names = ", ".join(f"{a.index}: {a.name!r}" for a in available)
    for item in spec:
        item = item.strip()
        if item.isdigit():
            if int(item) >= len(available):
                raise ValueError(f"adapter {item} does not exist; the adapters are {names}")
            chosen.append(available[int(item)])
            continue
        matches = [a for a in available if item.lower() in a.name.lower()]
        free = [a for a in matches if a not in chosen]
        if not matches:
            raise ValueError(f"no adapter's name contains {item!r}; the adapters are {names}")
        chosen.append(free[0] if free else matches[0])
    return chosen


_default: Device | None = None
_default_lock = threading.Lock()


def default_device() -> Device:
    """The process-wide device on the adapter chosen by HEARTH_ADAPTER or by preference."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Device(choose_adapter(os.environ.get("HEARTH_ADAPTER")))
        return _default
