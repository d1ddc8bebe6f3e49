"""JSON text as snarkjs writes it, and read back, on the standard library's C accelerator (``_json``) alone; and
the writer of text output files (``write_text``), whose failure names the file.

The ``json`` package imports ``re`` (and with it enum, functools, collections): ~10 ms of a one-shot ``cuzk prove``
that a local daemon answers on two cores, a quarter of the whole call on a small circuit, for a client that only
reads one answer and writes two small files. ``_json`` is the C scanner and string encoder ``json`` itself runs on
(CPython's, which cuzk needs anyway for numba).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own constant costs its import: type checkers treat this name alike
if TYPE_CHECKING:
    from typing import Any

import _json
import os


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _ScannerContext:
    """What the C scanner reads from a ``json.JSONDecoder``: strict strings, plain dicts, float/int, no NaN."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)


_scan = _json.make_scanner(_ScannerContext())
_WHITESPACE = " \t\n\r"


def loads(text: str | bytes) -> Any:
    """``json.loads`` for UTF-8 text: a ``ValueError`` (``json.JSONDecodeError`` inside a document) for what is not JSON."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode()
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration:
        raise ValueError(f"expecting a JSON value at character {start}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return value


def _leaf(value: Any) -> str:
    if isinstance(value, str):
        return _json.encode_basestring(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float) and value - value == 0:  # finite
        return float.__repr__(value)
    raise ValueError(f"{value!r} ({type(value).__name__}) has no JSON form")


def dumps_like_snarkjs(obj: Any, _level: int = 0) -> str:
    """JSON text exactly as snarkjs's bfj.write(obj, {space: 1}) produces it (an empty list is "[\\n]")."""
    pad, close = " " * (_level + 1), " " * _level
    if isinstance(obj, dict):
        items = [f"{pad}{_leaf(str(k))}: {dumps_like_snarkjs(v, _level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + ("\n" if items else "") + close + "}"
    if isinstance(obj, (list, tuple)):
        items = [pad + dumps_like_snarkjs(v, _level + 1) for v in obj]
        return "[\n" + ",\n".join(items) + ("\n" if items else "") + close + "]"
    return _leaf(obj)


# What a JSON number longer than Python converts to an int (``sys.get_int_max_str_digits()``, 4300 by default; json
# raises a plain ValueError for it, not a JSONDecodeError) is: field elements have at most 115 digits.
TOO_MANY_DIGITS = "holds a number of thousands of digits, longer than any field element"

MAX_NESTING = 200  # arrays and objects within each other that a document may have: far past any snarkjs file or input


def nested_too_deeply(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether JSON ``text`` nests arrays and objects more than ``limit`` deep (brackets in strings do not count).

    Checked before parsing: the C parser recurses once per level, bounded only by the interpreter's recursion limit,
    which a library may raise past what the C stack holds (py_ecc sets 100,000), and a document nested that deep then
    crashes the process instead of raising ``RecursionError``."""
    if text.count("[") + text.count("{") <= limit:
        return False
    import re
    from itertools import accumulate

    brackets = re.sub(r'"(?:[^"\\]|\\.)*"|[^\[\]{}"]+', "", text).replace('"', "")  # strings out, then all but brackets
    return max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0) > limit


class OutputError(OSError):
    """An output file could not be written (disk full, a read-only file system, ...): the message names it in the
    one-line form of every other file error ("PATH: cannot write: REASON"). An OSError, not a FormatError: the
    engine counts it as its own failure, never as the request's."""

    def __init__(self, path: str | os.PathLike, exc: OSError):
        super().__init__(exc.errno, exc.strerror or str(exc), os.fspath(path))

    def __str__(self) -> str:
        return f"{self.filename}: cannot write: {self.strerror}"


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text output file (proof.json, public.json, a verification key: the formats' writers and a daemon
    client's); an :class:`OutputError` if it fails."""
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        raise OutputError(path, exc) from None
