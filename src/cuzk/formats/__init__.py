"""snarkjs file formats: .zkey / .wtns / .r1cs readers and writers, proof / public / vkey JSON.

Every reader validates before it allocates and raises :class:`FormatError` (a ValueError)
naming the file, the section and the problem.
"""

from .errors import FormatError
from .json_io import Groth16Proof, VerificationKey, read_proof, read_public, read_vkey, write_proof, write_public, write_vkey
from .r1cs import R1CS, SparseMatrix, check_satisfied, read_r1cs, write_r1cs
from .wtns import Witness, read_wtns, write_wtns
from .zkey import ZKey, ZKeyHeader, coeff_values_mont, read_zkey, read_zkey_header, write_zkey

__all__ = [
    "FormatError", "Groth16Proof", "VerificationKey", "read_proof", "read_public", "read_vkey", "write_proof",
    "write_public", "write_vkey", "R1CS", "SparseMatrix", "check_satisfied", "read_r1cs", "write_r1cs", "Witness",
    "read_wtns", "write_wtns", "ZKey", "ZKeyHeader", "coeff_values_mont", "read_zkey", "read_zkey_header", "write_zkey",
]  # fmt: skip
