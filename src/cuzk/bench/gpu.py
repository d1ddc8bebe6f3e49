"""The daemon's GPUs along the timeline: utilization, VRAM and SM clock, read through NVML at each tick.

Which GPU is the daemon's CUDA device N? CUDA numbers only the GPUs its ``CUDA_VISIBLE_DEVICES``
leaves visible, in that list's order; NVML numbers every GPU of the machine in PCI bus order and
ignores the variable. So the sampler reads the variable as the daemon's engine has it (from
/proc, the bench's own where that cannot be read) and resolves each entry as CUDA does: an
index, or a GPU UUID (or a unique prefix of one) matched against NVML's UUIDs. An index means
PCI bus order to NVML; CUDA counts the same way with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and in
practice when all GPUs are one model (its default, fastest first, leaves ties in bus order); for
GPUs of several models otherwise, and for MIG instances, the sampler says it cannot tell rather
than guess.

Utilization: ``nvmlDeviceGetUtilizationRates`` is the share of the driver's last sampling
period (1/6 s to 1 s, by product) in which a kernel ran. Read once a tick it sees one period a
tick and nothing between: a third of the time at the default 0.25 s tick and a 1/6 s period,
most of it at a 2 s tick. The driver also keeps a buffer of those per-period figures, and
``nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES, since)`` returns every one since the last
read, so their mean covers the whole time between two ticks. The sampler reads the buffer, and
the instantaneous rate only on a GPU that has no buffer.

``pynvml`` (the ``nvidia-ml-py`` package, in the ``cuda12``/``cuda13`` extras) is optional:
without it, a driver, a local daemon or a GPU worker, the sampler reads nothing and says why.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import normalize_address

UTILIZATION_BUFFER = "NVML sample buffer"  # the mean of the driver's per-period figures since the last tick
UTILIZATION_RATE = "NVML utilization rate"  # the driver's last period only, at each tick
VISIBLE = "CUDA_VISIBLE_DEVICES"
ORDER = "CUDA_DEVICE_ORDER"


@dataclass(frozen=True)
class NvmlGpu:
    """One GPU as NVML lists it: plain data, so the CUDA → NVML mapping is testable without NVML."""

    index: int
    uuid: str
    name: str


@dataclass(frozen=True)
class GpuDevice:
    """One of the daemon's GPUs, as the sampler found it."""

    ordinal: int  # the CUDA ordinal the daemon's workers report
    nvml_index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_bytes: int
    utilization_source: str  # UTILIZATION_BUFFER or UTILIZATION_RATE


@dataclass(frozen=True)
class GpuReading:
    """One device at one tick; None where NVML did not answer."""

    utilization_percent: float | None  # share of the time since the previous tick a kernel ran
    memory_used_bytes: int | None  # the whole device's, every process's (as nvidia-smi shows it)
    memory_total_bytes: int | None
    sm_clock_mhz: int | None


@dataclass(frozen=True)
class GpuSetup:
    """What the sampler read: the devices, or why none."""

    devices: tuple[GpuDevice, ...] = ()
    off_reason: str | None = "not sampled"
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES as the daemon has it (None: unset)
    environment_source: str | None = None  # where that was read


class DeviceMappingError(ValueError):
    """NVML cannot tell which GPU a CUDA ordinal is."""


def visible_nvml_indices(visible: str | None, gpus: Sequence[NvmlGpu], device_order: str | None = None) -> list[int]:
    """The NVML index of each CUDA ordinal (position in the list = ordinal), reading ``CUDA_VISIBLE_DEVICES`` as CUDA does.

    Unset, every GPU is visible. Entries are indices or ``GPU-`` UUIDs (a unique prefix is enough);
    CUDA drops everything from the first entry it cannot resolve on (``-1``, an index out of
    range, an unknown UUID, a repeat), so an empty or ``-1`` list leaves no GPU.
    """
    tokens = [str(g.index) for g in sorted(gpus, key=lambda g: g.index)] if visible is None else visible.split(",")
    indices = {g.index for g in gpus}
    out: list[int] = []
    by_position = False
    for token in (t.strip() for t in tokens):
        if token.upper().startswith("MIG-"):
            raise DeviceMappingError(f"{VISIBLE} names a MIG instance ({token}): NVML has no utilization per MIG instance")
        if token.upper().startswith("GPU-"):
            matches = [g.index for g in gpus if g.uuid.lower().startswith(token.lower())]
            found = matches[0] if len(matches) == 1 else None
        else:
            found = int(token) if token.isdigit() and int(token) in indices else None
            by_position = by_position or found is not None
        if found is None or found in out:
            break
        out.append(found)
    if by_position and len({g.name for g in gpus}) > 1 and device_order != "PCI_BUS_ID":
        raise DeviceMappingError(f"GPUs of several models and {ORDER} is not PCI_BUS_ID: CUDA then counts them fastest "
                                 f"first, NVML by PCI bus, so which GPU is which CUDA device is not certain "
                                 f"(run the daemon with {ORDER}=PCI_BUS_ID)")
    return out


def daemon_cuda_environment(pid: int) -> tuple[dict[str, str], str]:
    """The CUDA variables of the engine's environment, and where they were read (the bench's own where /proc says no)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        env = dict(item.partition("=")[::2] for item in raw.split("\0") if "=" in item)
        source = f"the engine's environment (pid {pid})"
    except OSError as exc:
        env, source = dict(os.environ), f"the bench's environment (the engine's: {exc.strerror})"
    return {k: env[k] for k in (VISIBLE, ORDER) if k in env}, source


def on_this_machine(address: str) -> bool:
    """A unix socket or a loopback address: NVML here sees the daemon's GPUs."""
    address = normalize_address(address)
    if address.startswith("unix:"):
        return True
    host = address.rpartition(":")[0].strip("[]")
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _text(value: str | bytes) -> str:
    """NVML strings: str from newer pynvml, bytes from older ones and from its structs' char arrays."""
    return value.decode() if isinstance(value, bytes) else value


def _mig_enabled(nvml, handle) -> bool:
    try:
        return nvml.nvmlDeviceGetMigMode(handle)[0] == nvml.NVML_DEVICE_MIG_ENABLE
    except nvml.NVMLError:  # NotSupported: a GPU without MIG
        return False


class _DeviceReader:
    """One GPU's handle, and where its utilization buffer was last read."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle
        self.percent: float | None = None  # the latest figure: it stands until the driver ends another period
        self.since_us = 0
        self.source = UTILIZATION_BUFFER
        try:
            _, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
            self.since_us = max((s.timeStamp for s in samples), default=0)  # what is buffered from before the run stays out
        except nvml.NVMLError_NotFound:  # nothing buffered yet
            pass
        except nvml.NVMLError:
            self.source = UTILIZATION_RATE

    def utilization(self) -> float | None:
        nvml = self.nvml
        if self.source == UTILIZATION_RATE:
            return float(nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        try:
            _, samples = nvml.nvmlDeviceGetSamples(self.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, self.since_us)
        except nvml.NVMLError_NotFound:  # no period ended since the last tick
            return self.percent
        fresh = [s for s in samples if s.timeStamp > self.since_us]
        if fresh:
            self.since_us = max(s.timeStamp for s in fresh)
            self.percent = sum(s.sampleValue.uiVal for s in fresh) / len(fresh)
        return self.percent

    def read(self) -> GpuReading:
        nvml, handle = self.nvml, self.handle

        def answer(read):
            try:
                return read()
            except nvml.NVMLError:
                return None

        memory = answer(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        return GpuReading(utilization_percent=answer(self.utilization),
                          memory_used_bytes=None if memory is None else int(memory.used),
                          memory_total_bytes=None if memory is None else int(memory.total),
                          sm_clock_mhz=answer(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)))


class GpuSampler:
    """Reads the daemon's GPUs at each tick. NVML is opened once, at the first status that names the daemon's provers."""

    def __init__(self, daemon_address: str):
        self.off_reason: str | None = None
        if not on_this_machine(daemon_address):
            self.off_reason = (f"the daemon at {daemon_address} is not on a unix socket or loopback address: NVML here "
                               "sees only this machine's GPUs")
        self.devices: list[GpuDevice] = []
        self.environment: dict[str, str] = {}
        self.environment_source: str | None = None
        self._readers: dict[int, _DeviceReader] = {}
        self._nvml = None

    def read(self, status: dict[str, Any] | None) -> dict[int, GpuReading]:
        """Each device's reading by CUDA ordinal (also while the engine is down, once the devices are known)."""
        if not self._readers and self.off_reason is None and status is not None:
            self._open(status)
        return {ordinal: reader.read() for ordinal, reader in self._readers.items()}

    def _open(self, status: dict[str, Any]) -> None:
        provers = [w for w in status.get("workers") or [] if w.get("kind") == "proving"]
        if not provers:
            return  # an engine still starting: ask again at the next tick
        ordinals = sorted({w["device"] for w in provers if w.get("device") is not None})
        if not ordinals:
            self.off_reason = "the daemon proves on the CPU"
            return
        try:
            import pynvml
        except ImportError:
            self.off_reason = "pynvml is not installed: the cuda12 or cuda13 extra of cuzk brings it (nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.off_reason = f"NVML did not start: {exc}"
            return
        self._nvml = pynvml
        try:
            self._map(pynvml, ordinals, status["server"]["pid"])
        except (pynvml.NVMLError, DeviceMappingError) as exc:
            self.off_reason = str(exc) if isinstance(exc, DeviceMappingError) else f"NVML could not list the GPUs: {exc}"
            self.devices = []
            self.close()

    def _map(self, nvml, ordinals: list[int], engine_pid: int) -> None:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        gpus = [NvmlGpu(i, _text(nvml.nvmlDeviceGetUUID(h)), _text(nvml.nvmlDeviceGetName(h))) for i, h in enumerate(handles)]
        self.environment, self.environment_source = daemon_cuda_environment(engine_pid)
        indices = visible_nvml_indices(self.environment.get(VISIBLE), gpus, self.environment.get(ORDER))
        missing = [d for d in ordinals if d >= len(indices)]
        if missing:
            raise DeviceMappingError(f"CUDA device(s) {missing} are not among the {len(indices)} that "
                                     f"{VISIBLE}={self.environment.get(VISIBLE)!r} leaves visible")
        for ordinal in ordinals:
            gpu, handle = gpus[indices[ordinal]], handles[indices[ordinal]]
            if _mig_enabled(nvml, handle):
                raise DeviceMappingError(f"NVML's GPU {gpu.index} is split into MIG instances, and NVML has no "
                                         "utilization per MIG instance")
            reader = self._readers[ordinal] = _DeviceReader(nvml, handle)
            self.devices.append(GpuDevice(
                ordinal=ordinal, nvml_index=gpu.index, uuid=gpu.uuid, name=gpu.name,
                pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
                memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total), utilization_source=reader.source))

    def close(self) -> None:
        """Shut NVML down; what was read stays in ``setup()``."""
        self._readers = {}
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None

    def setup(self) -> GpuSetup:
        reason = self.off_reason or (None if self.devices else "no status from the daemon named its provers")
        return GpuSetup(devices=tuple(self.devices), off_reason=reason, visible_devices=self.environment.get(VISIBLE),
                        environment_source=self.environment_source)
