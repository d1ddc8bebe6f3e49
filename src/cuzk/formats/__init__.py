"""snarkjs file formats: .zkey / .wtns / .r1cs readers and writers, proof / public / vkey JSON, one module each.

Every reader validates before it allocates and raises :class:`errors.FormatError` (a ValueError)
naming the file, the section and the problem. Nothing is imported here: a client that only writes
a witness for the daemon (``cuzk fullprove``) then loads neither numba nor the r1cs and zkey readers.
"""
