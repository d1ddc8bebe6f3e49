"""cuzk: a Groth16 proving daemon for circom/snarkjs circuits that lives within its memory limits."""

__version__ = "0.1.0"
