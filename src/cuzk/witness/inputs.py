"""circom input JSON (snarkjs's input.json) read by snarkjs's rules.

snarkjs parses the file with ``JSON.parse``, flattens every signal's value (nested arrays,
row-major) and turns each leaf into a field element with ``BigInt(v) % p`` (negative values
wrap to p − |v|). So a leaf may be a JSON integer, ``true``/``false``, or a string ``BigInt``
accepts: decimal with an optional sign, ``0x``/``0o``/``0b``, blanks around it, "" for 0.
Everything else (fractions, null, objects, "1e3", "12abc") is an error naming the signal and the
position. Two deliberate differences, both where snarkjs would prove another value than the one
written: a value outside the field (|v| ≥ p: snarkjs reduces it, silently) is refused, and so is
a JSON *number* beyond 2^53, which JavaScript silently rounds (quoted, it is exact).

A JSON object inside the document is a circom 2.2 bus, read as circom's own witness calculator reads it: each
field is the input signal ``name.field``, an array whose leaves are all objects is an array of buses (``p[0].x``),
nested as deep as the buses are.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..json_text import MAX_NESTING, TOO_MANY_DIGITS, nested_too_deeply

MAX_DEPTH = 64  # nesting of arrays and buses: far beyond any circuit's, well within Python's recursion limit
MAX_SAFE_INTEGER = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER: larger JSON numbers are rounded by JSON.parse

# What BigInt(string) accepts, after trimming JavaScript's white space.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_BIGINT_TEXT = re.compile(r"[+-]?[0-9]+|0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+", re.ASCII)


class InputError(ValueError):
    """The inputs do not fit the circuit, or the circuit rejects them; the message names the signal or template."""


@dataclass(frozen=True)
class InputSignal:
    name: str
    values: tuple[int, ...]  # flattened, each reduced into [0, p)


def parse_input_json(text: str | bytes, source: str = "input", shape: str = "of signal name → value") -> dict[str, Any]:
    """The JSON object of an input file (or of a request holding one: ``shape`` says what it holds), parsed as
    JSON.parse does (no NaN/Infinity; the last of repeated keys wins)."""

    def no_constant(name: str):
        raise InputError(f"{source}: {name} is not JSON")

    try:
        if isinstance(text, (bytes, bytearray)):
            text = text.decode()
        if nested_too_deeply(text):
            raise InputError(f"{source}: arrays or objects nested more than {MAX_NESTING} deep: not circuit inputs")
        doc = json.loads(text, parse_constant=no_constant)
    except UnicodeDecodeError as exc:
        raise InputError(f"{source}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: not JSON: {exc}") from None
    except InputError:
        raise
    except ValueError:  # a JSON number of more digits than Python converts
        raise InputError(f"{source}: {TOO_MANY_DIGITS}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{source}: must be a JSON object {shape}, not a {_json_kind(doc)}")
    return doc


def read_input_json(path: str | os.PathLike) -> dict[str, Any]:
    """An input.json file's object."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot open: {exc.strerror or exc}") from None
    return parse_input_json(text, source=str(path))


def input_signals(doc: Mapping[str, Any], prime: int) -> list[InputSignal]:
    """Each signal of an input object (a bus's fields each one), its value flattened and reduced modulo ``prime`` as
    snarkjs does."""
    return [InputSignal(name, tuple(_field_element(where, leaf, prime) for where, leaf in _flatten(name, value)))
            for top, value in doc.items() for name, value in _bus_fields(top, value)]


def fnv1a_64(name: str) -> int:
    """circom's signal-name hash (64-bit FNV-1a over the name's UTF-16 code units, as the JavaScript runtime hashes it)."""
    h = 0xCBF29CE484222325
    units = name.encode("utf-16-le")
    for i in range(0, len(units), 2):
        h ^= units[i] | units[i + 1] << 8
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _bus_fields(name: str, value: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(signal name, value) of one input, a bus's fields qualified as circom 2.2's calculator qualifies them: an object's
    field ``f`` is ``name.f``; an array whose leaves are all objects is buses, element ``i`` named ``name[i]``."""
    if depth == MAX_DEPTH:
        raise InputError(f"input {name.partition('.')[0].partition('[')[0]}: buses or arrays nested more than {MAX_DEPTH} deep")
    if isinstance(value, dict):
        for field, item in value.items():
            yield from _bus_fields(f"{name}.{field}", item, depth + 1)
    elif isinstance(value, list) and value and all(isinstance(leaf, dict) for _, leaf in _flatten(name, value)):
        for i, item in enumerate(value):
            yield from _bus_fields(f"{name}[{i}]", item, depth + 1)
    else:
        yield name, value


def _flatten(where: str, value: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Leaves in row-major order, each with its place (``grid[1][2]``)."""
    if isinstance(value, list):
        if depth == MAX_DEPTH:
            raise InputError(f"input {where.partition('[')[0]}: arrays nested more than {MAX_DEPTH} deep")
        for i, item in enumerate(value):
            yield from _flatten(f"{where}[{i}]", item, depth + 1)
    else:
        yield where, value


def _field_element(place: str, leaf: Any, prime: int) -> int:
    where = f"input {place}"
    if isinstance(leaf, bool):
        return int(leaf)
    if isinstance(leaf, int):
        if abs(leaf) > MAX_SAFE_INTEGER:
            raise InputError(f"{where}: the JSON number {leaf} is beyond 2^53, where JavaScript (and so snarkjs) rounds it; "
                             f"write it as a string: \"{leaf}\"")
        return _in_field(where, leaf, prime)
    if isinstance(leaf, float):
        if not leaf.is_integer():
            raise InputError(f"{where}: {leaf!r} is not an integer")
        if abs(leaf) > MAX_SAFE_INTEGER:
            raise InputError(f"{where}: the JSON number {leaf!r} is beyond 2^53, where it is rounded; write the exact integer as a string")
        return int(leaf) % prime
    if isinstance(leaf, str):
        text = leaf.strip(_JS_SPACE)
        if not text:
            return 0  # BigInt("") is 0n
        if not _BIGINT_TEXT.fullmatch(text):
            raise InputError(f"{where}: {leaf!r} is not an integer (decimal, or 0x/0o/0b)")
        try:
            value = int(text, 0 if text[:2].lower() in ("0x", "0o", "0b") else 10)
        except ValueError:  # more digits than Python converts (4300): past any field's prime, unless they are zeros
            raise InputError(f"{where}: a number of {len(text)} digits is outside the circuit's field (|value| must be "
                             f"below p = {prime})") from None
        return _in_field(where, value, prime)
    raise InputError(f"{where}: a {_json_kind(leaf)} is not a field element (a number, or a string of digits)")


def _in_field(where: str, value: int, prime: int) -> int:
    """``value`` as a field element (a negative one wraps to p − |value|), or an error where |value| ≥ p."""
    if -prime < value < prime:
        return value % prime
    shown = value if value.bit_length() <= 1024 else f"a {value.bit_length()}-bit number"  # str() refuses 4300+ digits
    raise InputError(f"{where}: {shown} is outside the circuit's field (|value| must be below p = {prime}); snarkjs "
                     "would reduce it modulo p and prove another value than the one written")


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "JSON object"
    if isinstance(value, list):
        return "JSON array"
    return type(value).__name__
