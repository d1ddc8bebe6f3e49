"""snarkjs's JSON files: proof.json, public.json, verification_key.json.

Writers reproduce snarkjs's bytes exactly: it writes with ``bfj.write(obj, {space: 1})``,
which matches ``JSON.stringify(obj, null, 1)`` (one-space indent, no trailing newline)
except that an empty array or object still gets a line break (``[\\n]``). Key order
follows snarkjs's objects. Readers validate everything they return: known curve, field
ranges, points on the curve, counts that agree, and raise :class:`FormatError` naming
the file and key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..curves import Curve, UnknownCurveError, curve_by_name
from ..curves.ec import Point
from ..curves.serialize import g1_from_json, g1_to_json, g2_from_json, g2_to_json, snarkjs_int
from ..json_text import MAX_NESTING, TOO_MANY_DIGITS, dumps_like_snarkjs, nested_too_deeply, write_text
from .errors import FormatError

# An Fq12 element in snarkjs's layout: [[[c000, c001], [c010, c011], [c020, c021]], [[...], [...], [...]]]
# (Fq12 = Fq6[w], Fq6 = Fq2[v], Fq2 = Fq[u]; the innermost pair is one Fq2).
Fq12 = Sequence[Sequence[Sequence[int]]]


@dataclass(frozen=True)
class Groth16Proof:
    """The three proof points (reference affine points), as proof.json carries them."""

    curve: Curve
    a: Point
    b: Point
    c: Point


@dataclass(frozen=True)
class VerificationKey:
    curve: Curve
    n_public: int
    alpha1: Point
    beta2: Point
    gamma2: Point
    delta2: Point
    alphabeta_12: Fq12 | None  # e(alpha1, beta2) as snarkjs stores it; None from a file without it (no verifier reads it)
    ic: tuple[Point, ...]  # n_public + 1 G1 points


# serialising ---------------------------------------------------------------------------
def proof_to_json(proof) -> str:
    """proof.json text for anything with ``curve``, ``a``, ``b``, ``c`` (a :class:`Groth16Proof` or the prover's Proof)."""
    return dumps_like_snarkjs({
        "pi_a": g1_to_json(proof.a),
        "pi_b": g2_to_json(proof.b),
        "pi_c": g1_to_json(proof.c),
        "protocol": "groth16",
        "curve": proof.curve.name,
    })  # fmt: skip


def public_to_json(values: Sequence[int]) -> str:
    return dumps_like_snarkjs([str(int(v)) for v in values])


def vkey_to_json(vkey: VerificationKey) -> str:
    if len(vkey.ic) != vkey.n_public + 1:
        raise ValueError(f"a verification key with n_public = {vkey.n_public} needs {vkey.n_public + 1} IC points, got {len(vkey.ic)}")
    if vkey.alphabeta_12 is not None:
        _check_fq12(vkey.curve, vkey.alphabeta_12, ValueError)
    return dumps_like_snarkjs({
        "protocol": "groth16",
        "curve": vkey.curve.name,
        "nPublic": vkey.n_public,
        "vk_alpha_1": g1_to_json(vkey.alpha1),
        "vk_beta_2": g2_to_json(vkey.beta2),
        "vk_gamma_2": g2_to_json(vkey.gamma2),
        "vk_delta_2": g2_to_json(vkey.delta2),
        **({} if vkey.alphabeta_12 is None else
           {"vk_alphabeta_12": [[[str(c) for c in fq2] for fq2 in fq6] for fq6 in vkey.alphabeta_12]}),
        "IC": [g1_to_json(P) for P in vkey.ic],
    })  # fmt: skip


def write_proof(path: str | os.PathLike, proof) -> None:
    write_text(path, proof_to_json(proof))


def write_public(path: str | os.PathLike, values: Sequence[int]) -> None:
    write_text(path, public_to_json(values))


def write_vkey(path: str | os.PathLike, vkey: VerificationKey) -> None:
    write_text(path, vkey_to_json(vkey))


# reading --------------------------------------------------------------------------------
def _load(path: str | os.PathLike) -> Any:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise FormatError(path, f"cannot read: {exc.strerror or exc}") from exc
    if data[:4] in (b"zkey", b"wtns", b"r1cs", b"ptau"):  # one of snarkjs's binary files given in a JSON file's place
        raise FormatError(path, f"is a binary .{data[:4].decode()} file, not JSON")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise FormatError(path, "is not UTF-8 text") from None
    if nested_too_deeply(text):
        raise FormatError(path, f"arrays or objects nested more than {MAX_NESTING} deep: not a snarkjs file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"not valid JSON: {exc}") from None
    except ValueError:  # a JSON number of more digits than Python converts
        raise FormatError(path, TOO_MANY_DIGITS) from None


def _field(obj: dict, key: str, source) -> Any:
    if key not in obj:
        raise FormatError(source, "missing", key)
    return obj[key]


def _curve_of(obj: dict, source, curve: Curve | None) -> Curve:
    name = obj.get("curve")
    if name is None:
        if curve is None:
            raise FormatError(source, "no \"curve\" key, and no curve was given", "curve")
        return curve
    if not isinstance(name, str):
        raise FormatError(source, f"expected a curve name, got {name!r}", "curve")
    try:
        found = curve_by_name(name)
    except UnknownCurveError as exc:
        raise FormatError(source, str(exc), "curve") from None
    if curve is not None and found.r != curve.r:
        raise FormatError(source, f"is {found.name}, expected {curve.name}", "curve")
    return found


def _protocol(obj: dict, source) -> None:
    protocol = obj.get("protocol", "groth16")
    if protocol != "groth16":
        raise FormatError(source, f"{protocol!r} is not groth16", "protocol")


def _point(curve: Curve, group: int, value: Any, key: str, source) -> Point:
    """A G1 (group 1) or G2 (group 2) point from its JSON form, checked on the curve."""
    try:
        return (g1_from_json if group == 1 else g2_from_json)(curve, value, key)
    except ValueError as exc:
        raise FormatError(source, str(exc)) from None


def parse_proof(obj: Any, source: str | os.PathLike | None = None, curve: Curve | None = None) -> Groth16Proof:
    """A proof from decoded proof.json; ``curve`` is needed only when the JSON has no "curve" key."""
    if not isinstance(obj, dict):
        raise FormatError(source, f"expected a JSON object, got {type(obj).__name__}")
    _protocol(obj, source)
    curve = _curve_of(obj, source, curve)
    a, b, c = (_point(curve, g, _field(obj, k, source), k, source) for g, k in ((1, "pi_a"), (2, "pi_b"), (1, "pi_c")))
    return Groth16Proof(curve, a, b, c)


def parse_public(obj: Any, source: str | os.PathLike | None = None, curve: Curve | None = None, n_public: int | None = None) -> list[int]:
    """Public signals from decoded public.json; checked < r when ``curve`` is given, counted when ``n_public`` is."""
    if not isinstance(obj, list):
        raise FormatError(source, f"expected a JSON array of decimal strings, got {type(obj).__name__}")
    out = []
    for i, v in enumerate(obj):
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise FormatError(source, f"entry #{i}: expected a decimal string, got {v!r}")
        try:
            x = snarkjs_int(v)
        except ValueError as exc:
            raise FormatError(source, f"entry #{i}: {exc}") from None
        if x < 0 or (curve is not None and x >= curve.r):
            field = f"{curve.name} scalar field" if curve is not None else "field (negative)"
            raise FormatError(source, f"entry #{i}: {x} is outside the {field}")
        out.append(x)
    if n_public is not None and len(out) != n_public:
        raise FormatError(source, f"has {len(out)} public signals, the key expects {n_public}")
    return out


def parse_vkey(obj: Any, source: str | os.PathLike | None = None) -> VerificationKey:
    if not isinstance(obj, dict):
        raise FormatError(source, f"expected a JSON object, got {type(obj).__name__}")
    _protocol(obj, source)
    curve = _curve_of(obj, source, None)
    n_public = _field(obj, "nPublic", source)
    if isinstance(n_public, bool) or not isinstance(n_public, int) or n_public < 0:
        raise FormatError(source, f"expected a non-negative integer, got {n_public!r}", "nPublic")
    ic = _field(obj, "IC", source)
    if not isinstance(ic, list) or len(ic) != n_public + 1:
        got = len(ic) if isinstance(ic, list) else type(ic).__name__
        raise FormatError(source, f"nPublic = {n_public} needs {n_public + 1} points, got {got}", "IC")
    ic_points = tuple(_point(curve, 1, P, f"IC[{i}]", source) for i, P in enumerate(ic))
    # snarkjs's verifier never reads vk_alphabeta_12 (nor does cuzk's: prover.verify recomputes it): a key without it
    # verifies there, so here too; one that has it must hold an Fq12 element
    raw = obj.get("vk_alphabeta_12")
    alphabeta = None if raw is None else _check_fq12(curve, raw, lambda msg: FormatError(source, msg, "vk_alphabeta_12"))
    return VerificationKey(
        curve=curve,
        n_public=n_public,
        alpha1=_point(curve, 1, _field(obj, "vk_alpha_1", source), "vk_alpha_1", source),
        beta2=_point(curve, 2, _field(obj, "vk_beta_2", source), "vk_beta_2", source),
        gamma2=_point(curve, 2, _field(obj, "vk_gamma_2", source), "vk_gamma_2", source),
        delta2=_point(curve, 2, _field(obj, "vk_delta_2", source), "vk_delta_2", source),
        alphabeta_12=alphabeta,
        ic=ic_points,
    )


def _check_fq12(curve: Curve, value: Any, error) -> list[list[list[int]]]:
    """The Fq12 as nested ints, checked to be 2 × 3 × 2 elements of Fq; ``error(msg)`` builds the exception."""
    shape_ok = (
        isinstance(value, (list, tuple)) and len(value) == 2
        and all(isinstance(c6, (list, tuple)) and len(c6) == 3 for c6 in value)
        and all(isinstance(c2, (list, tuple)) and len(c2) == 2 for c6 in value for c2 in c6)
    )  # fmt: skip
    if not shape_ok:
        raise error("expected an Fq12 as [[[c000, c001], [c010, c011], [c020, c021]], [[...], [...], [...]]]")
    out = []
    for c6 in value:
        row = []
        for c2 in c6:
            pair = []
            for c in c2:
                try:
                    x = int(c) if not isinstance(c, bool) else None
                except (TypeError, ValueError):
                    x = None
                if x is None or not 0 <= x < curve.q:
                    raise error(f"{c!r} is not an element of {curve.name}'s base field")
                pair.append(x)
            row.append(pair)
        out.append(row)
    return out


def read_proof(path: str | os.PathLike, curve: Curve | None = None) -> Groth16Proof:
    return parse_proof(_load(path), path, curve)


def read_public(path: str | os.PathLike, curve: Curve | None = None, n_public: int | None = None) -> list[int]:
    return parse_public(_load(path), path, curve, n_public)


def read_vkey(path: str | os.PathLike) -> VerificationKey:
    return parse_vkey(_load(path), path)
