"""Witnesses from inputs: circom's WebAssembly witness generator run in wasmtime, input.json read as snarkjs reads it."""

from .inputs import InputError, parse_input_json, read_input_json
from .wasm import WitnessCalculator

__all__ = ["InputError", "WitnessCalculator", "parse_input_json", "read_input_json"]
