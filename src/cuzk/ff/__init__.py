"""Finite-field kernels in numba (sppark's ``ff/``): Montgomery arithmetic over any of the curves' fields, and
the launch guard every numba parallel kernel goes through. Below formats, backends and the prover, which all use it;
it imports only ``curves`` (the constants)."""
