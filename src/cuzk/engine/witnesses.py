"""Witnesses the engine calculates itself, from a circuit's input, for keys registered with their circom .wasm.

One owner for the keys' compiled witness generators and the threads that run them, so a
calculation (seconds, for a big circuit) never holds the caller's intake thread longer than
the calculation itself and never runs more than ``witness_workers`` at once. Each one holds a
transient reservation in the host budget for its instance's memory and the witness while it
runs; one that could never fit is ``JobTooLarge``. The circuit's ``log()`` lines go to the daemon's
log at DEBUG (``log_level = "debug"``): a circuit that logs in a loop would otherwise fill it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..formats.wtns import wtns_bytes
from ..formats.zkey import read_zkey_header
from ..memory.budget import BudgetExceededError, MemoryBudget
from ..witness import WitnessCalculator, parse_input_json
from .admission import JobTooLarge
from .jobs import JobError
from .tracker import EngineStopped

log = logging.getLogger("cuzk.witness")


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

    def wtns(self, name: str, input_json: str | bytes | Mapping[str, Any]) -> bytes:
        """The .wtns bytes of key ``name``'s circuit for this input (text or parsed); ``InputError`` names what is wrong."""
        calculator = self._by_key.get(name)
        if calculator is None:
            raise JobError(f"key {name!r} has no witness generator: send a witness, or register the circuit's .wasm "
                           "with the key ([engine.wasm] in the daemon's config)")
        doc = input_json if isinstance(input_json, Mapping) else parse_input_json(input_json)
        circuit_log = (lambda line: log.debug("%s: %s", name, line)) if log.isEnabledFor(logging.DEBUG) else None
        try:
            reservation = self._budget.acquire(calculator.calculation_bytes, "transient", label=f"witness ({name})")
        except BudgetExceededError as exc:
            raise JobTooLarge(f"calculating a witness of {name!r}: {exc}; it can never run here") from None
        with reservation:
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
