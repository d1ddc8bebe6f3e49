"""Witnesses the engine calculates itself, from a circuit's input, for keys registered with their circom .wasm.

One owner for the keys' compiled witness generators and the threads that run them, so a
calculation (seconds, for a big circuit) never holds the caller's intake thread longer than
the calculation itself and never runs more than ``witness_workers`` at once. Each one holds a
transient reservation in the host budget for the parsed input, its instance's memory and the
witness while it runs; one that could never fit is ``JobTooLarge``. The circuit's ``log()`` lines go to the daemon's
log at DEBUG (``log_level = "debug"``): a circuit that logs in a loop would otherwise fill it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..formats.wtns import wtns_bytes
from ..formats.zkey import read_zkey_header
from ..memory.budget import BudgetExceededError, MemoryBudget, Reservation
from ..witness import WitnessCalculator, parse_input_json
from .admission import JobTooLarge
from .jobs import JobError
from .tracker import EngineStopped

log = logging.getLogger("cuzk.witness")

# Host bytes json.loads makes of one byte of input text, at worst: `"10",` (5 bytes) becomes a 51-byte str and an 8-byte
# list slot; numbers and long strings take less (a 77-digit decimal string: ~1.7).
PARSED_BYTES_PER_TEXT_BYTE = 12


class WitnessCalculators:
    def __init__(self, budget: MemoryBudget, workers: int):
        self._budget = budget
        self._by_key: dict[str, WitnessCalculator] = {}
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="cuzk-witness")

    def prepare(self, name: str, zkey_path: str | os.PathLike, wasm_path: str | os.PathLike) -> WitnessCalculator:
        """Compile ``wasm_path`` and check it makes witnesses for the key at ``zkey_path`` (``add`` it once registered)."""
        calculator = WitnessCalculator(Path(wasm_path).resolve())  # FormatError names the file
        header = read_zkey_header(zkey_path)
        if calculator.curve is not header.curve or calculator.witness_size != header.n_vars:
            raise JobError(f"{calculator.path} makes {calculator.witness_size}-value {calculator.curve.name} witnesses, but key "
                           f"{name!r} is for {header.n_vars} signals over {header.curve.name}: not this key's circuit")
        return calculator

    def set(self, name: str, calculator: WitnessCalculator | None) -> None:
        if calculator is None:
            self._by_key.pop(name, None)
        else:
            self._by_key[name] = calculator

    def reserve(self, name: str, text_bytes: int) -> Reservation:
        """The host memory of one calculation for key ``name`` from ``text_bytes`` of input JSON: the parsed document
        (``PARSED_BYTES_PER_TEXT_BYTE`` each: a request body of max_request bytes would otherwise take gigabytes the
        budget never saw) and, for a key registered with its .wasm, the instance and the witness. Waits for room;
        ``JobTooLarge`` when it could never fit."""
        calculator = self._by_key.get(name)
        nbytes = PARSED_BYTES_PER_TEXT_BYTE * text_bytes + (calculator.calculation_bytes if calculator else 0)
        try:
            return self._budget.acquire(nbytes, "transient", label=f"witness ({name})")
        except BudgetExceededError as exc:
            raise JobTooLarge(f"calculating a witness of {name!r} from {text_bytes} bytes of input: {exc}; it can never "
                              "run here") from None

    def wtns(self, name: str, input_json: str | bytes | Mapping[str, Any], reservation: Reservation | None = None) -> bytes:
        """The .wtns bytes of key ``name``'s circuit for this input (text or parsed); ``InputError`` names what is wrong.
        ``reservation``: the caller's :meth:`reserve`, held while it parsed the input (else one is taken here)."""
        calculator = self._by_key.get(name)
        if calculator is None:
            raise JobError(f"key {name!r} has no witness generator: send a witness, or register the circuit's .wasm "
                           "with the key ([engine.wasm] in the daemon's config)")
        circuit_log = (lambda line: log.debug("%s: %s", name, line)) if log.isEnabledFor(logging.DEBUG) else None
        text_bytes = 0 if isinstance(input_json, Mapping) else len(input_json)
        with contextlib.nullcontext() if reservation is not None else self.reserve(name, text_bytes):
            doc = input_json if isinstance(input_json, Mapping) else parse_input_json(input_json)
            try:
                pending = self._pool.submit(lambda: wtns_bytes(calculator.curve, calculator.calculate(doc, log=circuit_log)))
            except RuntimeError:  # closed since the caller looked
                raise EngineStopped("the engine is stopping; submit to the next one") from None
            try:
                return pending.result()
            except CancelledError:  # closed before it ran
                raise EngineStopped("the engine is stopping; submit to the next one") from None

    def close(self) -> None:
        """Cancel what has not started; a calculation under way finishes (its caller then finds the engine stopped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
