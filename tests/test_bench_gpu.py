"""`cuzk bench`'s GPU figures: which NVML device each CUDA ordinal is, the sampler without NVML (it says why),
and the busy fraction, table, CSV, results.json and plot from a ``BenchResult`` with GPU readings made by hand.
The ``gpu`` test reads a real GPU through the real NVML while CuPy keeps it busy."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from rich.console import Console

from cuzk.bench.gpu import (UTILIZATION_BUFFER, DeviceMappingError, GpuDevice, GpuReading, GpuSampler, GpuSetup, NvmlGpu,
                            daemon_cuda_environment, on_this_machine, visible_nvml_indices)
from cuzk.bench.plot import plot_timeline
from cuzk.bench.report import build_report, busy_fraction, render
from cuzk.bench.timeline import write_csv
from cuzk.memory.units import GiB
from test_bench_report import PNG_MAGIC, good_run  # noqa: F401 (a fixture)

H200 = "NVIDIA H200"
UUIDS = ["GPU-aa11b2c3-0000-0000-0000-000000000000", "GPU-aa22b2c3-0000-0000-0000-000000000001",
         "GPU-cc33b2c3-0000-0000-0000-000000000002", "GPU-dd44b2c3-0000-0000-0000-000000000003"]
FOUR = [NvmlGpu(i, uuid, H200) for i, uuid in enumerate(UUIDS)]


# -- which GPU is CUDA device N ---------------------------------------------------------------------

@pytest.mark.parametrize("visible, expect", [
    (None, [0, 1, 2, 3]),  # unset: every GPU, in NVML's (PCI bus) order
    ("2,0", [2, 0]),  # CUDA ordinal 0 is NVML's GPU 2
    (" 3 , 1 ", [3, 1]),
    (UUIDS[3], [3]),
    ("GPU-cc,1", [2, 1]),  # a unique prefix of a UUID is enough, and entries mix
    ("GPU-aa", []),  # a prefix of two UUIDs names neither: CUDA stops there
    ("1,-1,2", [1]),  # -1 hides everything after it
    ("0,4,1", [0]),  # an index out of range: the same
    ("2,2,3", [2]),  # a repeat: the same
    ("", []),
])
def test_cuda_visible_devices_maps_each_cuda_ordinal_to_its_nvml_index(visible, expect):
    assert visible_nvml_indices(visible, FOUR) == expect


def test_gpus_of_several_models_are_mapped_by_index_only_in_pci_bus_order():
    mixed = [NvmlGpu(0, UUIDS[0], "NVIDIA A100"), NvmlGpu(1, UUIDS[1], H200)]
    with pytest.raises(DeviceMappingError, match="CUDA_DEVICE_ORDER is not PCI_BUS_ID"):
        visible_nvml_indices(None, mixed)  # CUDA counts fastest first: the H200 may be CUDA device 0
    assert visible_nvml_indices("1,0", mixed, "PCI_BUS_ID") == [1, 0]
    assert visible_nvml_indices(f"{UUIDS[1]},{UUIDS[0]}", mixed) == [1, 0]  # UUIDs say which GPU whatever the order
    with pytest.raises(DeviceMappingError, match="MIG instance"):
        visible_nvml_indices("MIG-5c89852c-d268-c3f3-1b07-005d5ae1dc3f", FOUR)


def test_the_cuda_variables_are_read_from_the_engine_s_own_environment():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "3,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('running', flush=True); sys.stdin.read()"], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"running\n"  # past exec: /proc shows its own environment, not ours
        variables, source = daemon_cuda_environment(child.pid)
    finally:
        child.communicate(b"")
    assert variables == {"CUDA_VISIBLE_DEVICES": "3,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert source == f"the engine's environment (pid {child.pid})"
    variables, source = daemon_cuda_environment(child.pid)  # gone: the bench's own environment stands in
    assert source.startswith("the bench's environment") and variables.get("CUDA_VISIBLE_DEVICES") == os.environ.get(
        "CUDA_VISIBLE_DEVICES")


@pytest.mark.parametrize("address, local", [("unix:/run/cuzk.sock", True), ("/run/cuzk.sock", True),
                                            ("127.0.0.1:50051", True), ("localhost:50051", True), ("[::1]:50051", True),
                                            ("10.1.2.3:50051", False), ("gpu-host:50051", False)])
def test_only_a_daemon_on_this_machine_has_its_gpus_read_here(address, local):
    assert on_this_machine(address) is local


# -- the sampler without NVML ------------------------------------------------------------------------

def _status(*devices: int | None, pid: int = 4242) -> dict:
    workers = [{"name": "synth-0", "kind": "synthesis", "device": None}]
    workers += [{"name": f"prove-{i}", "kind": "proving", "device": d} for i, d in enumerate(devices)]
    return {"server": {"pid": pid}, "workers": workers}


def test_without_pynvml_the_sampler_reads_nothing_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError, as where it is not installed
    sampler = GpuSampler("unix:/run/cuzk.sock")
    assert sampler.read(None) == {} and sampler.read({"server": {"pid": 1}, "workers": []}) == {}  # not decided yet
    assert sampler.setup().off_reason == "no status from the daemon named its provers"
    assert sampler.read(_status(0, 1)) == {}
    setup = sampler.setup()
    assert setup.devices == () and setup.off_reason.startswith("pynvml is not installed")
    assert sampler.read(_status(0, 1)) == {} and sampler.setup() == setup  # decided once
    sampler.close()


def test_a_cpu_daemon_or_a_remote_one_is_not_sampled_and_the_reason_says_which(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    cpu = GpuSampler("unix:/run/cuzk.sock")
    assert cpu.read(_status(None)) == {} and cpu.setup().off_reason == "the daemon proves on the CPU"
    remote = GpuSampler("10.1.2.3:50051")
    assert remote.read(_status(0)) == {}
    assert "10.1.2.3:50051 is not on a unix socket or loopback address" in remote.setup().off_reason


def test_without_a_driver_nvml_says_why():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML starts here: there is a driver")
    sampler = GpuSampler("unix:/run/cuzk.sock")
    assert sampler.read(_status(0)) == {} and sampler.setup().off_reason.startswith("NVML did not start: ")


# -- the figures from a result made by hand -------------------------------------------------------

DEVICES = (GpuDevice(0, 3, UUIDS[3], H200, "00000000:9A:00.0", 141 * GiB, UTILIZATION_BUFFER),
           GpuDevice(1, 1, UUIDS[1], H200, "00000000:1B:00.0", 141 * GiB, UTILIZATION_BUFFER))
# Ticks 0..14 s; the measured window of good_run is 10.0 .. 12.6 s. Each reading covers the time since the tick before.
TICKS = [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 10.5, 11.0, 12.0, 13.0, 14.0]
GPU0 = [None, 100, 100, 100, 100, 100, 0, 50, 100, 80, 0]  # busy through the warm-up, uneven while measured
GPU0_USED = [1, 2, 9, 9, 9, 9, 10, 12, 11, 11, 2]  # GiB
GPU1 = [None, 40, 40, 40, 40, 40, 40, None, 40, 40, 40]  # NVML did not answer once
# GPU 0 over 10..12.6: 0 % for 0.5 s, 50 % for 0.5 s, 100 % for 1 s, 80 % for 0.6 s (of the tick ending at 13).
GPU0_BUSY = (0 * 0.5 + 0.5 * 0.5 + 1.0 * 1.0 + 0.8 * 0.6) / 2.6


def _gpu_run(result):
    """``result`` with GPU readings at TICKS (the first tick before NVML was open: no reading)."""
    base = result.samples[-1]
    samples = []
    for i, t in enumerate(TICKS):
        gpus = {} if i == 0 else {
            0: GpuReading(GPU0[i], GPU0_USED[i] * GiB, 141 * GiB, 1980),
            1: GpuReading(GPU1[i], 3 * GiB if i == 5 else 2 * GiB, 141 * GiB, None)}
        samples.append(dataclasses.replace(base, t_s=t, unix_time=base.unix_time - base.t_s + t, gpus=gpus))
    return dataclasses.replace(result, samples=samples,
                               gpu=GpuSetup(DEVICES, None, "3,1", "the engine's environment (pid 101)"))


def test_busy_fraction_is_time_weighted_and_limited_to_the_window():
    readings = [(0.0, None), (1.0, 0.0), (2.0, 50.0), (4.0, 100.0), (5.0, None)]
    # Over 0.5..3: 0 % for 0.5 s, 50 % for 1 s, 100 % for 1 s; not the mean of the readings (50 %).
    assert busy_fraction(readings, 0.5, 3.0) == pytest.approx(1.5 / 2.5)
    assert busy_fraction(readings, 2.0, 4.0) == pytest.approx(1.0)
    assert busy_fraction(readings, 4.0, 5.0) is None  # the only reading there has no figure
    assert busy_fraction(readings, 6.0, 9.0) is None and busy_fraction(readings[:1], 0.0, 1.0) is None


def test_the_report_gives_each_gpu_s_busy_fraction_over_the_measured_window_and_its_vram_peak(good_run):
    report = build_report(_gpu_run(good_run))
    gpu = report["gpu"]
    assert (gpu["sampling"], gpu["off_reason"], gpu["visible_devices"]) == ("on", None, "3,1")
    assert gpu["busy_window_t_s"] == [10.0, 12.6]
    first, second = gpu["devices"]
    assert (first["device"], first["nvml_index"], first["uuid"], first["name"]) == (0, 3, UUIDS[3], H200)
    assert first["busy_fraction"] == pytest.approx(GPU0_BUSY)  # the warm-up's 100 % left out
    assert second["busy_fraction"] == pytest.approx(0.4)  # the unanswered tick counts for nothing
    assert (first["vram_peak_bytes"], first["vram_peak_t_s"]) == (12 * GiB, 11.0)
    assert (second["vram_peak_bytes"], second["vram_peak_t_s"]) == (3 * GiB, 10.0)
    assert first["memory_total_bytes"] == 141 * GiB and first["utilization_source"] == UTILIZATION_BUFFER
    samples = first["samples"]
    assert samples["t_s"] == TICKS[1:] and samples["utilization_percent"] == GPU0[1:]
    assert samples["memory_used_bytes"] == [u * GiB for u in GPU0_USED[1:]] and set(samples["sm_clock_mhz"]) == {1980}
    assert json.loads(json.dumps(report, default=str))["gpu"] == gpu  # what results.json holds

    console = Console(width=200, file=io.StringIO())
    console.print(*render(report, good_run.options.out_dir))
    text = console.file.getvalue()
    assert f"busy {GPU0_BUSY * 100:.0f} % (NVML, over the measured window), VRAM peak 12.00 GiB of 141.00 GiB" in text
    assert "GPU 1" in text and "busy 40 % (NVML" in text and "GPU sampling" not in text


def test_without_gpu_readings_the_report_says_once_why(good_run):
    result = dataclasses.replace(good_run, gpu=GpuSetup(off_reason="pynvml is not installed: the cuda12 extra brings it"))
    report = build_report(result)
    assert report["gpu"] == {"sampling": "off", "off_reason": "pynvml is not installed: the cuda12 extra brings it",
                             "visible_devices": None, "environment_source": None, "busy_window_t_s": [10.0, 12.6],
                             "devices": []}
    console = Console(width=200, file=io.StringIO())
    console.print(*render(report, good_run.options.out_dir))
    text = console.file.getvalue()
    assert text.count("GPU sampling  off (pynvml is not installed") == 1 and "busy" not in text


def test_the_csv_has_each_gpu_s_columns_and_blank_cells_where_nothing_was_read(good_run, tmp_path):
    result = _gpu_run(good_run)
    path = tmp_path / "timeline.csv"
    write_csv(path, result.samples)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == len(TICKS)
    gpu_columns = [c for c in rows[0] if c.startswith("gpu")]
    assert gpu_columns == [f"gpu{d}_{f}" for d in (0, 1)
                           for f in ("utilization_percent", "memory_used_bytes", "memory_total_bytes", "sm_clock_mhz")]
    assert [r["gpu0_utilization_percent"] for r in rows] == ["" if v is None else str(v) for v in GPU0]
    assert rows[7]["gpu1_utilization_percent"] == "" and rows[7]["gpu1_memory_used_bytes"] == str(2 * GiB)
    assert rows[0]["gpu0_memory_used_bytes"] == "" and rows[3]["gpu0_memory_total_bytes"] == str(141 * GiB)
    assert {r["gpu1_sm_clock_mhz"] for r in rows} == {""} and rows[5]["gpu0_sm_clock_mhz"] == "1980"
    write_csv(path, good_run.samples)  # no GPU read: no GPU columns
    assert not [c for c in next(csv.reader(path.open())) if c.startswith("gpu")]


def _png_pixels(path):
    png = path.read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    import matplotlib.image

    return np.round(matplotlib.image.imread(path)[..., :3] * 255).astype(int)


def test_the_plot_has_a_gpu_panel_with_each_device(good_run, tmp_path):
    with_gpus, without = tmp_path / "gpus.png", tmp_path / "none.png"
    plot_timeline(with_gpus, _gpu_run(good_run))
    plot_timeline(without, good_run)
    pixels, plain = _png_pixels(with_gpus), _png_pixels(without)
    assert pixels.shape[0] == 1100 and plain.shape[0] == 800  # two GPU panels of 1.5 between memory and jobs
    orange = (255, 127, 14)  # GPU 1's colour; nothing else in the picture is drawn in it
    rows = np.nonzero((np.abs(pixels - orange).sum(axis=2) <= 3).any(axis=1))[0]
    assert len(rows) and not (np.abs(plain - orange).sum(axis=2) <= 3).any()
    # Its lines lie in the GPU panels: below the memory panel (3/8 of the height), above the jobs (the last 2/8).
    assert 1100 * 3 / 8 - 20 < rows.min() and rows.max() < 1100 * 6 / 8


# -- a real GPU ---------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_sampler_sees_a_cupy_kernel_loop_on_the_device_it_maps():
    """NVML's device for each CUDA ordinal is the one CUDA means (same PCI address), and the sampler sees the last one busy."""
    cupy = pytest.importorskip("cupy")
    pytest.importorskip("pynvml")
    count = cupy.cuda.runtime.getDeviceCount()
    if count == 0:
        pytest.skip("no CUDA device")
    status = {"server": {"pid": os.getpid()}, "workers": [{"name": f"prove-{d}", "kind": "proving", "device": d}
                                                          for d in range(count)]}
    sampler = GpuSampler("unix:/unused.sock")
    try:
        assert set(sampler.read(status)) == set(range(count)), sampler.setup().off_reason
        for device in sampler.devices:
            props = cupy.cuda.runtime.getDeviceProperties(device.ordinal)
            domain, bus, rest = device.pci_bus_id.split(":")
            assert (int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)) == (
                props["pciDomainID"], props["pciBusID"], props["pciDeviceID"]), device
        target = count - 1
        stop = threading.Event()

        def keep_busy() -> None:
            with cupy.cuda.Device(target):
                a = cupy.random.random((4096, 4096), dtype=cupy.float32)
                while not stop.is_set():
                    for _ in range(10):
                        a = a @ a
                        a /= cupy.abs(a).max()
                    cupy.cuda.Stream.null.synchronize()

        worker = threading.Thread(target=keep_busy)
        worker.start()
        readings = []
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any((r.utilization_percent or 0) > 0 for r in readings[2:]):
                stop.wait(0.25)  # one timeline tick
                readings.append(sampler.read(status)[target])
        finally:
            stop.set()
            worker.join()
        assert max(r.utilization_percent or 0 for r in readings) > 0, readings
        assert max(r.memory_used_bytes or 0 for r in readings) > 64 * 2**20  # the 64 MiB matrix and CuPy's pool at least
        assert all(r.memory_total_bytes == sampler.devices[target].memory_total_bytes for r in readings)
    finally:
        sampler.close()
