"""Optimal ate pairing for BN254 and BLS12-381 in numba, in snarkjs's Fq12 tower.

Values equal ``cuzk.curves.tower``'s reference pairing (and so snarkjs's Gt) exactly; this
is the fast path the Groth16 verifier runs, on the CPU backend's field arithmetic and
point formulas. Split as py_ecc splits it:

- ``tower``: Fq2, Fq6 and Fq12 arithmetic;
- ``curve``: the kernel constants of a curve, the G2 endomorphism psi, subgroup checks;
- ``miller``: G2 line coefficients and the Miller loop shared by several pairs;
- ``final_exp``: the final exponentiation;
- ``engine``: the per-curve Python entry points (:func:`engine`).
"""

from .engine import PairingEngine, engine

__all__ = ["PairingEngine", "engine"]
