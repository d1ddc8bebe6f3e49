"""Reader for snarkjs powers-of-tau files (.ptau) prepared for phase 2.

A Groth16 setup from a ceremony needs, for the circuit's domain of n = 2^k rows, the
Lagrange-basis points L_i(τ)·G1, L_i(τ)·G2, α·L_i(τ)·G1 and β·L_i(τ)·G1 (sections 12-15,
written by ``snarkjs powersoftau prepare phase2``), the odd half of the 2n-domain basis for
the H points, and α·G1, β·G1, β·G2; the circuit hash that snarkjs's ``zkey new`` computes
also needs the powers τ^i·G1. Sections 12-15 hold the bases of every domain size
2^0, 2^1, ... one after another, so the basis of size m starts at point m − 1.

Points are returned in the backends' layout (Montgomery little-endian uint32 limbs,
``(m, 2, L)`` for G1 and ``(m, 2, 2, L)`` for G2) as zero-copy views of the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..curves import Curve
from .binfile import BinFile

SECTION_NAMES = {
    1: "header",
    2: "tauG1",
    3: "tauG2",
    4: "alphaTauG1",
    5: "betaTauG1",
    6: "betaG2",
    7: "contributions",
    12: "lagrange tauG1",
    13: "lagrange tauG2",
    14: "lagrange alphaTauG1",
    15: "lagrange betaTauG1",
}
_LAGRANGE = {"tau_g1": 12, "tau_g2": 13, "alpha_tau_g1": 14, "beta_tau_g1": 15}


@dataclass(frozen=True)
class PtauHeader:
    curve: Curve
    power: int  # the file holds powers of tau up to 2^power
    ceremony_power: int
    prepared: bool  # has the phase-2 Lagrange sections 12..15


class Ptau:
    """An open .ptau file whose header and section sizes have been checked.

    Use as a context manager; point views stay valid after close.
    """

    def __init__(self, path: str | os.PathLike):
        self._bin = BinFile(path, "ptau", 1, SECTION_NAMES)
        try:
            self.header = self._read_header()
            self._check_sizes()
        except BaseException:
            self._bin.close()
            raise

    @property
    def path(self):
        return self._bin.path

    @property
    def curve(self) -> Curve:
        return self.header.curve

    def close(self) -> None:
        self._bin.close()

    def __enter__(self) -> Ptau:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read_header(self) -> PtauHeader:
        b = self._bin
        sec = b.section(1)
        if sec.size < 4:
            raise b.error(1, f"is {sec.size} bytes, too short for a ptau header")
        n8 = b.u32(1)
        if n8 not in (32, 48):
            raise b.error(1, f"field element size {n8} bytes is not that of BN254 (32) or BLS12-381 (48)")
        b.expect_size(1, 4 + n8 + 8, f"a header with {n8}-byte field elements")
        curve = b.curve_of(1, int.from_bytes(b.read(1, 4, n8), "little"), n8, "q")
        power = b.u32(1, 4 + n8)
        ceremony_power = b.u32(1, 8 + n8)
        if not 1 <= power <= curve.fr_two_adicity:
            raise b.error(1, f"power {power} is outside 1..{curve.fr_two_adicity} for {curve.name}")
        prepared = all(b.has(s) for s in _LAGRANGE.values())
        return PtauHeader(curve, power, ceremony_power, prepared)

    def _check_sizes(self) -> None:
        b, h = self._bin, self.header
        g1, g2 = self._point_bytes(1), self._point_bytes(2)
        m = 2**h.power
        b.expect_size(2, (2 * m - 1) * g1, f"power {h.power} (2·2^power − 1 G1 points)")
        b.expect_size(3, m * g2, f"power {h.power} (2^power G2 points)")
        b.expect_size(4, m * g1, f"power {h.power} (2^power G1 points)")
        b.expect_size(5, m * g1, f"power {h.power} (2^power G1 points)")
        b.expect_size(6, g2, "one G2 point")
        if h.prepared:
            b.expect_size(12, (4 * m - 1) * g1, f"power {h.power} (bases of sizes 2^0..2^(power+1))")
            b.expect_size(13, (2 * m - 1) * g2, f"power {h.power} (bases of sizes 2^0..2^power)")
            b.expect_size(14, (2 * m - 1) * g1, f"power {h.power} (bases of sizes 2^0..2^power)")
            b.expect_size(15, (2 * m - 1) * g1, f"power {h.power} (bases of sizes 2^0..2^power)")

    def _point_bytes(self, group: int) -> int:
        return 2 * group * self.curve.Fq.n8

    def _points(self, stype: int, group: int, start: int, count: int) -> np.ndarray:
        limbs = self.curve.Fq.limbs32
        shape = (count, 2, limbs) if group == 1 else (count, 2, 2, limbs)
        return self._bin.view(stype, "<u4", shape, offset=start * self._point_bytes(group))

    # what a Groth16 setup reads ------------------------------------------------------
    def require_domain(self, log_n: int) -> None:
        """Raise unless this file can set up a circuit on a 2^log_n domain."""
        h = self.header
        if not h.prepared:
            raise self._bin.error(
                None,
                "is not prepared for phase 2 (no Lagrange sections 12-15): run "
                "`snarkjs powersoftau prepare phase2 <in.ptau> <out.ptau>` first",
            )
        if log_n > h.power:
            raise self._bin.error(
                None, f"holds powers up to 2^{h.power}, but the circuit needs a domain of 2^{log_n} rows; use a larger ptau"
            )

    def lagrange(self, which: str, log_n: int) -> np.ndarray:
        """The Lagrange basis of size 2^log_n: ``which`` is tau_g1, tau_g2, alpha_tau_g1 or beta_tau_g1.

        tau_g1 also has the basis of size 2^(power+1) (what the H points of the largest
        circuit need).
        """
        stype = _LAGRANGE[which]
        limit = self.header.power + (1 if which == "tau_g1" else 0)
        if not 0 <= log_n <= limit:
            raise self._bin.error(stype, f"has bases up to 2^{limit}, not 2^{log_n}")
        m = 2**log_n
        return self._points(stype, 2 if which == "tau_g2" else 1, m - 1, m)

    def tau_g1(self, count: int) -> np.ndarray:
        """τ^i·G1 for i < count (section tauG1, which holds 2·2^power − 1 of them)."""
        return self._points(2, 1, 0, count)

    def past_tau_g1(self) -> np.ndarray:
        """The point's worth of bytes that follow section tauG1 in the file, as a point's limbs (unchecked, maybe
        unreduced): snarkjs's ``zkey new`` reads them as τ^(2·2^power − 1)·G1 in one case (see prover/setup.py)."""
        sec = self._bin.section(2)
        raw = self._bin.read_at(sec.offset + sec.size, self._point_bytes(1))
        return np.frombuffer(raw, "<u4").reshape(1, 2, self.curve.Fq.limbs32)

    def alpha_g1(self) -> np.ndarray:
        return self._points(4, 1, 0, 1)[0]

    def beta_g1(self) -> np.ndarray:
        return self._points(5, 1, 0, 1)[0]

    def beta_g2(self) -> np.ndarray:
        return self._points(6, 2, 0, 1)[0]


def read_ptau(path: str | os.PathLike) -> Ptau:
    """Open a .ptau file, checking its header and every section's size."""
    return Ptau(path)
