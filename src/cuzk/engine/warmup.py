"""The JIT warm-up: one small proof per curve on each kind of backend, so that the first real job neither
compiles nor loads kernels.

numba compiles a kernel (or loads it from its cache) the first time it is called with a new type
signature, and each curve's field constants make a signature of their own: a daemon's first
proof on a curve took seconds (minutes with a cold cache) of which the proving itself was a
fraction. The circuit is the project's own synthetic one, with a test-only key made in a
temporary directory, and large enough that its MSMs take the bucket path real keys take
(more than ``backends.cpu.msm.BIT_MSM_POINTS`` points), not only the few-point one.

On a device the key is also homed there as a real key is (``keys.device.load_from_disk``: its
bases and coefficients laid out in VRAM) and proved from there, then freed: that path runs
CuPy's own library kernels (the coefficients' counting sort), which CuPy compiles on a machine's
first use — 5 to 10 s on an H200 (GPU_NOTES, session 10), once paid by the first job's key load.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from ..backends.base import is_device_backend
from ..backends.cpu.msm import BIT_MSM_POINTS

log = logging.getLogger("cuzk.engine")

WARMUP_CONSTRAINTS = 2 * BIT_MSM_POINTS
WARMUP_RING_CHUNK = 64 << 10  # the warm-up key's staging chunks: a few per section of its small file


def warm_up(backends: Iterable, curve_names: Iterable[str], msm_tables: bool = False, device_homes: bool = True) -> float:
    """Prove and verify the warm-up circuit on each curve with one backend of each kind; the seconds it took.
    ``msm_tables``: the CPU backend also builds the key's MSM window tables and proves over them (their kernels).
    ``device_homes``: a device also proves from the key homed in its VRAM (not where ``key_home = "host"``)."""
    from ..circuits.synthetic import synthesize, write_synthetic
    from ..curves import curve_by_name
    from ..formats.wtns import read_wtns
    from ..formats.zkey import read_zkey
    from ..keys.host import with_msm_tables
    from ..prover import groth16
    from ..prover.setup import setup
    from ..prover.verify import prepare_zkey, verify

    t = time.perf_counter()
    kinds = {backend.name: backend for backend in backends}  # kernels are per process (numba) or per module (CUDA)
    with tempfile.TemporaryDirectory(prefix="cuzk-warmup-") as tmp:
        for name in sorted(set(curve_names)):
            curve = curve_by_name(name)
            r1cs, wtns = write_synthetic(Path(tmp) / curve.name, synthesize(curve, WARMUP_CONSTRAINTS, 1, seed=1))
            zkey_path = Path(tmp) / curve.name / "circuit.zkey"
            setup(r1cs, zkey_path, backend="cpu")
            zkey, witness = read_zkey(zkey_path), read_wtns(wtns)
            pvk = prepare_zkey(zkey)
            runs = [(backend, zkey) for backend in kinds.values()]
            if msm_tables and "cpu" in kinds:
                runs.append((kinds["cpu"], with_msm_tables(zkey)))
            if device_homes:
                runs += [(backend, None) for backend in kinds.values() if is_device_backend(backend)]  # homed on it
            for backend, key in runs:
                # On a device: a lane of its own, as each proving worker has, so jobs already running are undisturbed.
                lane = backend.new_lane() if is_device_backend(backend) else None
                homed = _home_on_device(zkey_path, zkey, backend) if key is None else None
                try:
                    with lane or contextlib.nullcontext():
                        # A homed key's A·w and B·w run on the device, from its resident coefficients (as the engine does).
                        proof = (groth16.prove(backend, key, witness) if homed is None else groth16.prove_synthesized(
                            backend, homed, groth16.synthesize(homed, witness, defer_ab=True)))
                finally:
                    if lane is not None:
                        lane.close()
                    if homed is not None:
                        backend.free_key(homed)
                if not verify(pvk, proof.public_signals, proof):
                    raise RuntimeError(f"the warm-up proof on {curve.name} with the {backend.name} backend does not verify")
            log.info("JIT warm for %s on %s", curve.name, ", ".join(kinds))
    return time.perf_counter() - t


def _home_on_device(zkey_path: Path, zkey, backend):
    """The warm-up key resident on ``backend``'s device as the key manager homes one (``free_key`` gives it back)."""
    from ..keys.device import load_from_disk
    from ..keys.stream import StagingRing
    from ..memory.pinned import PageAlignedAllocator

    return load_from_disk(zkey_path, zkey, backend, StagingRing(PageAlignedAllocator(), WARMUP_RING_CHUNK))
