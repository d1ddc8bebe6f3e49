"""Run circom's witness generator (the ``.wasm`` circom writes with ``--wasm``) in wasmtime.

This drives the module as circom_runtime's ``witness_calculator.js`` does (circom 2's API):
``init``; per input signal ``getInputSignalSize(hash)`` and, per value, the value's 32-bit
words into the shared read/write buffer and ``setInputSignal(hash, index)`` — the circuit
runs as its inputs arrive; then ``getWitness(i)`` for each witness value, read back from the
shared buffer — both loops by a few lines of WebAssembly of our own linked to the circuit's instance
(``SET_INPUTS_WAT``, ``COPY_WITNESS_WAT``), since a call from Python costs far more than the call itself. The module's imports report errors: ``printErrorMessage`` hands over a line
(``getMessageChar`` until 0) and ``exceptionHandler(code)`` aborts with circom's code. A circom ``log()`` arrives
piece by piece (``writeBufferMessage`` for a text, ``showSharedRWMemory`` for a value in the shared buffer, a text
of "\n" to end the line) and becomes the line circom's own calculator prints, handed to the caller's ``log``.

A compiled module is shared (thread-safe); every calculation gets a fresh instance, so
calculations run in parallel and never see each other's signals.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import wasmtime

from ..curves import Curve, UnknownCurveError, curve_by_r
from ..formats.errors import FormatError
from .inputs import InputError, fnv1a_64, input_signals

# circom's exceptionHandler codes, as circom_runtime words them.
EXCEPTIONS = {
    1: "signal not found",
    2: "too many signals set",
    3: "signal already set",
    4: "assert failed",
    5: "not enough memory",
    6: "input signal array access exceeds the size",
}
IMPORTS = ("exceptionHandler", "printErrorMessage", "writeBufferMessage", "showSharedRWMemory")
EXPORTS = ("memory", "getFieldNumLen32", "getRawPrime", "getSharedRWMemoryStart", "readSharedRWMemory", "writeSharedRWMemory", "init",
           "getInputSignalSize", "setInputSignal", "getInputSize", "getWitnessSize", "getWitness", "getMessageChar")


CACHE_FOLDER = "wasm-cache"  # under the data directory, beside numba's
_cache_dir: Path | None = None


def use_cache_dir(data_dir: str | os.PathLike) -> None:
    """Keep compiled modules under the data directory (``CACHE_FOLDER``) rather than wasmtime's default,
    $XDG_CACHE_HOME/wasmtime: a container's home is often lost at each restart where its data directory is kept.
    Effective only before this process's first module: wasmtime's engine is made once."""
    global _cache_dir
    _cache_dir = Path(data_dir) / CACHE_FOLDER


# wasmtime's cache settings file in its two forms: wasmtime 50 refuses the `enabled` key that wasmtime 7 requires.
CACHE_SETTINGS = ('[cache]\ndirectory = {}\n', '[cache]\nenabled = true\ndirectory = {}\n')


@functools.cache
def _engine() -> wasmtime.Engine:
    """wasmtime's engine with its on-disk cache of compiled modules (size-capped by wasmtime): a circuit's .wasm
    compiles once per machine, not in every `cuzk fullprove` or daemon start (a circomlib circuit of 10k constraints,
    2.3 MB of wasm: 0.8 s, then 0.02 s). Under :func:`use_cache_dir`'s folder where one was given."""
    config = wasmtime.Config()
    if _cache_dir is not None:
        _cache_in(config, _cache_dir)
    else:
        with contextlib.suppress(wasmtime.WasmtimeError):  # no usable cache: every process compiles
            config.cache = True
    return wasmtime.Engine(config)


def _cache_in(config: wasmtime.Config, folder: Path) -> None:
    """Point ``config``'s cache at ``folder`` through a settings file beside it (wasmtime's clean-up removes what it
    did not write from the folder), in the form this wasmtime reads; no cache where neither form is read or the data
    directory cannot be written."""
    settings = folder.with_suffix(".toml")
    for form in CACHE_SETTINGS:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = settings.with_name(f".{settings.name}.{os.getpid()}")  # renamed into place: a reader never sees half
            tmp.write_text(form.format(json.dumps(str(folder))))  # a TOML basic string as JSON writes a string
            os.replace(tmp, settings)
            config.cache = str(settings)
            return
        except (wasmtime.WasmtimeError, OSError):
            continue
WASM_MEMORY_MAX = (1 << 32) - (1 << 16)  # bytes a 32-bit WebAssembly memory can grow to, in whole 64 KiB pages

# Reads the witness out inside WebAssembly: getWitness(i) then n32 × readSharedRWMemory(j) per value, into this
# module's own memory, read back at once. From Python each of those calls costs ~15 µs of wasmtime-py's argument
# handling (half a second for 30,000 values); here they cost nanoseconds. Returns 0 when its memory cannot grow.
COPY_WITNESS_WAT = r"""
(module
  (import "circuit" "getWitness" (func $getWitness (param i32)))
  (import "circuit" "readSharedRWMemory" (func $read (param i32) (result i32)))
  (memory (export "witness") 0)
  (func (export "copyWitness") (param $n i32) (param $n32 i32) (result i32)
    (local $i i32) (local $j i32) (local $at i32)
    (if (i32.eq (memory.grow (i32.div_u (i32.add (i32.mul (i32.mul (local.get $n) (local.get $n32)) (i32.const 4))
                                                 (i32.const 65535))
                                         (i32.const 65536)))
                (i32.const -1))
      (then (return (i32.const 0))))
    (block $done
      (loop $values
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $getWitness (local.get $i))
        (local.set $j (i32.const 0))
        (block $words_done
          (loop $words
            (br_if $words_done (i32.ge_u (local.get $j) (local.get $n32)))
            (i32.store (local.get $at) (call $read (local.get $j)))
            (local.set $at (i32.add (local.get $at) (i32.const 4)))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $words)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $values)))
    (i32.const 1)))
"""


@functools.cache
def _copy_witness_module() -> wasmtime.Module:
    return wasmtime.Module(_engine(), COPY_WITNESS_WAT)


# Sets one input signal's values inside WebAssembly, as COPY_WITNESS_WAT reads the witness: per value, n32 ×
# writeSharedRWMemory(j, word) from this module's memory, then setInputSignal(hash, i). From Python those calls cost
# ~45 µs a value (3 s for 65,536 input values, where snarkjs takes 0.35 s); here they cost nanoseconds.
SET_INPUTS_WAT = r"""
(module
  (import "circuit" "writeSharedRWMemory" (func $write (param i32) (param i32)))
  (import "circuit" "setInputSignal" (func $set (param i32) (param i32) (param i32)))
  (memory (export "values") 0)
  (func (export "setInputs") (param $msb i32) (param $lsb i32) (param $n i32) (param $n32 i32)
    (local $i i32) (local $j i32) (local $at i32)
    (block $done
      (loop $values
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $j (i32.const 0))
        (block $words_done
          (loop $words
            (br_if $words_done (i32.ge_u (local.get $j) (local.get $n32)))
            (call $write (local.get $j) (i32.load (local.get $at)))
            (local.set $at (i32.add (local.get $at) (i32.const 4)))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $words)))
        (call $set (local.get $msb) (local.get $lsb) (local.get $i))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $values)))))
"""


@functools.cache
def _set_inputs_module() -> wasmtime.Module:
    return wasmtime.Module(_engine(), SET_INPUTS_WAT)


class CircuitAbort(Exception):
    """Raised inside the exceptionHandler import to unwind the module; the calculation reports it."""


class WitnessCalculator:
    """One circuit's witness generator: compile once, :meth:`calculate` any number of times (from any thread)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self._module = wasmtime.Module.from_file(_engine(), str(self.path))
        except OSError as exc:  # missing, a directory, unreadable
            raise FormatError(self.path, f"cannot open: {exc.strerror or exc}") from None
        except wasmtime.WasmtimeError as exc:
            raise FormatError(self.path, f"not a WebAssembly module: {str(exc).splitlines()[0]}") from None
        imports = {(i.module, i.name) for i in self._module.imports}
        unknown = sorted(f"{m}.{n}" for m, n in imports if m != "runtime" or n not in IMPORTS)
        if unknown:
            raise FormatError(self.path, f"imports {', '.join(unknown)}: not a circom 2 witness generator")
        missing = sorted(set(EXPORTS) - {e.name for e in self._module.exports})
        if missing:
            raise FormatError(self.path, f"lacks the exports {', '.join(missing)}: not a witness generator of circom 2 "
                                         "(recompile the circuit with a current circom)")
        run = _Run(self)
        self.n32 = run.call("getFieldNumLen32")
        run.call("getRawPrime")
        self.prime = int.from_bytes(run.shared(self.n32), "little")
        try:
            self.curve: Curve = curve_by_r(self.prime)
        except UnknownCurveError as exc:
            raise FormatError(self.path, f"the witness generator's {exc}") from None
        if self.n32 != self.curve.Fr.limbs32:
            raise FormatError(self.path, f"{self.n32} words per field element, but {self.curve.name}'s take {self.curve.Fr.limbs32}")
        self.witness_size = run.call("getWitnessSize")
        self.input_size = run.call("getInputSize")
        # What one calculation holds on the host: the instance's linear memory (circom sizes it when it compiles the
        # circuit) and the witness three times over (the copier's memory, the array read from it, the .wtns bytes).
        self.calculation_bytes = run.memory.data_len(run.store) + 3 * self.witness_size * 4 * self.n32

    def calculate(self, inputs: Mapping[str, Any], log: Callable[[str], object] | None = None) -> np.ndarray:
        """The witness for an input object (parsed input.json): an (n, limbs) uint32 array, standard form. Each line
        the circuit's ``log()`` calls make goes to ``log`` (dropped without one).

        Raises :class:`InputError` naming the signal for inputs that do not fit the circuit, and
        naming circom's error (the template and line of a failed assert) when the circuit rejects them.
        """
        signals = input_signals(inputs, self.prime)
        run = _Run(self, log)
        run.call("init", 0)
        n_set = 0
        for signal in signals:
            h = fnv1a_64(signal.name)
            msb, lsb = _i32(h >> 32), _i32(h & 0xFFFFFFFF)
            size = run.call("getInputSignalSize", msb, lsb)
            if size < 0 or (size == 0 and signal.values):  # circom 2.2 answers 0 for an unknown name
                raise InputError(f"input {signal.name!r} is not an input signal of the circuit")
            if len(signal.values) != size:
                raise InputError(f"input {signal.name!r} has {len(signal.values)} value{'s' * (len(signal.values) != 1)}; "
                                 f"the circuit's signal takes {size}")
            run.set_input(msb, lsb, signal.values, self.n32)
            n_set += len(signal.values)
        if n_set < self.input_size:
            given = ", ".join(repr(s.name) for s in signals) or "none"
            raise InputError(f"inputs missing: the circuit takes {self.input_size} input values, the input sets {n_set} "
                             f"(signals given: {given})")
        return run.witness(self.witness_size, self.n32)


def _i32(word: int) -> int:
    """A 32-bit word as the signed i32 wasm takes (JavaScript's ToInt32)."""
    return word - (1 << 32) if word >= 1 << 31 else word


class _Run:
    """One instance of the module, with the host side of its imports (error lines collected here, never printed; the
    circuit's log lines to ``log``)."""

    def __init__(self, calc: WitnessCalculator, log: Callable[[str], object] | None = None):
        self.path = calc.path
        self.store = wasmtime.Store(_engine())
        self.messages: list[str] = []
        self.code: int | None = None
        self._log, self._log_line = log, []
        void = wasmtime.FuncType([], [])
        host = {
            "exceptionHandler": wasmtime.Func(self.store, wasmtime.FuncType([wasmtime.ValType.i32()], []), self._exception),
            "printErrorMessage": wasmtime.Func(self.store, void, lambda: self.messages.append(self._message())),
            "writeBufferMessage": wasmtime.Func(self.store, void, self._log_text),
            "showSharedRWMemory": wasmtime.Func(self.store, void, lambda: self._log_value(calc.n32)),
        }
        instance = wasmtime.Instance(self.store, calc._module, [host[i.name] for i in calc._module.imports])
        self._exports = instance.exports(self.store)
        self.memory: wasmtime.Memory = self._exports["memory"]
        self._shared_at: int | None = None
        self._setter: Any = None  # the exports of SET_INPUTS_WAT's instance, made at the first input

    def export(self, name: str) -> wasmtime.Func:
        return self._exports[name]

    def call(self, name: str, *args: int) -> Any:
        return self.call_export(self._exports[name], name, *args)

    def call_export(self, func: wasmtime.Func, name: str, *args: int) -> Any:
        try:
            return func(self.store, *args)
        except (CircuitAbort, wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            # wasmtime re-raises a host function's exception through one process-wide slot, so under
            # concurrent calculations the exception seen here may be another's: judge by this run's own record.
            if self.code is None:
                raise FormatError(self.path, f"the witness generator trapped in {name}: {str(exc).splitlines()[0]}") from None
            what = EXCEPTIONS.get(self.code, f"error code {self.code}")
            detail = " ".join(m.strip() for m in self.messages if m.strip())
            raise InputError(f"the circuit rejects the input: {what}"
                             + (f": {detail}" if detail else "")) from None

    def shared(self, n32: int) -> bytes:
        at = self._shared_start()
        return bytes(self.memory.read(self.store, at, at + 4 * n32))

    def witness(self, n: int, n32: int) -> np.ndarray:
        """The ``n`` witness values, copied out by :data:`COPY_WITNESS_WAT` in one call."""
        if n * n32 * 4 > WASM_MEMORY_MAX:
            raise FormatError(self.path, f"a witness of {n} values is more than a WebAssembly memory holds")
        copier = wasmtime.Instance(self.store, _copy_witness_module(), [self._exports["getWitness"],
                                                                        self._exports["readSharedRWMemory"]])
        exports = copier.exports(self.store)
        if not self.call_export(exports["copyWitness"], "getWitness", n, n32):
            raise MemoryError(f"no room for a witness of {n} values in a WebAssembly memory")
        values = exports["witness"].read(self.store, 0, n * n32 * 4)
        return np.frombuffer(bytes(values), dtype="<u4").reshape(n, n32)

    def set_input(self, msb: int, lsb: int, values: tuple[int, ...], n32: int) -> None:
        """One input signal's values (each in [0, p)), set in order by :data:`SET_INPUTS_WAT` in one call."""
        if not values:
            return
        if self._setter is None:
            setter = wasmtime.Instance(self.store, _set_inputs_module(), [self._exports["writeSharedRWMemory"],
                                                                         self._exports["setInputSignal"]])
            self._setter = setter.exports(self.store)
        data = b"".join(v.to_bytes(4 * n32, "little") for v in values)
        memory: wasmtime.Memory = self._setter["values"]
        short = len(data) - memory.data_len(self.store)
        if short > 0:
            try:
                memory.grow(self.store, (short + 0xFFFF) >> 16)
            except wasmtime.WasmtimeError:
                raise MemoryError(f"no room for an input of {len(values)} values in a WebAssembly memory") from None
        memory.write(self.store, data, 0)
        self.call_export(self._setter["setInputs"], "setInputSignal", msb, lsb, len(values), n32)

    def _shared_start(self) -> int:
        if self._shared_at is None:
            self._shared_at = self.call("getSharedRWMemoryStart")
        return self._shared_at

    def _exception(self, code: int) -> None:
        self.code = code
        raise CircuitAbort(code)

    def _log_text(self) -> None:
        """A text of a ``log()`` call (drained from the module even where nobody reads it); "\n" ends the line."""
        text = self._message()
        if self._log is None:
            return
        if text == "\n":
            line, self._log_line = " ".join(self._log_line), []
            self._log(line)
        else:
            self._log_line.append(text)

    def _log_value(self, n32: int) -> None:
        """A value of a ``log()`` call, in the shared buffer: written in decimal, in [0, p), as circom writes it."""
        if self._log is not None:
            self._log_line.append(str(int.from_bytes(self.shared(n32), "little")))

    def _message(self) -> str:
        get_char = self._exports["getMessageChar"]
        chars = []
        while (c := get_char(self.store)) != 0:
            chars.append(chr(c))
        return "".join(chars)
