"""Bad input to cuzk.formats: every defect is a FormatError naming what is wrong, and nothing large is allocated.

All files here are made by the writers from the synthetic circuit (no corpus needed) and
then damaged at known offsets.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from cuzk.curves import BLS12_381, BN254, CIRCOM_OTHER_PRIMES
from cuzk.formats.errors import FormatError
from cuzk.formats.binfile import BinFile
from cuzk.formats.json_io import read_proof, read_public, read_vkey
from cuzk.formats.limbs import ints_to_limbs
from cuzk.formats.r1cs import check_satisfied, read_r1cs, write_r1cs
from cuzk.formats.wtns import read_wtns, write_wtns
from cuzk.formats.zkey import read_zkey, read_zkey_header
from test_formats import synthetic_circuit, write_synthetic_files

READERS = {"zkey": read_zkey, "wtns": read_wtns, "r1cs": read_r1cs}
MAGIC = {"zkey": "zkey", "wtns": "wtns", "r1cs": "r1cs"}
ALLOCATION_LIMIT = 4 << 20  # bytes: "nothing large" for a file that claims terabytes
NOT_A_PRIME_OF_OURS = 2**255 - 19


@pytest.fixture(scope="module")
def good_files(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Bytes of valid synthetic files per curve: {"bn128": {"zkey": b"...", ...}, ...}."""
    out = {}
    for curve in (BN254, BLS12_381):
        d = tmp_path_factory.mktemp(curve.name)
        out[curve.name] = {kind: p.read_bytes() for kind, p in write_synthetic_files(curve, d).items()}
    return out


def section_offsets(data: bytes, tmp_path: Path, kind: str) -> dict[int, tuple[int, int]]:
    """{section type: (payload offset, size)} of a valid file."""
    path = tmp_path / f"probe.{kind}"
    path.write_bytes(data)
    with BinFile(path, MAGIC[kind], 2) as f:
        return {s.type: (s.offset, s.size) for s in f.sections}


def patched(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


def read_bad(tmp_path: Path, kind: str, data: bytes, match: str) -> FormatError:
    """Write ``data``, read it with the reader of ``kind``, expect a FormatError matching ``match`` and a small peak allocation."""
    path = tmp_path / f"bad.{kind}"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match=match) as info:
            READERS[kind](path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < ALLOCATION_LIMIT, f"reading a bad file allocated {peak} bytes"
    assert str(path) in str(info.value)
    return info.value


# container level ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["zkey", "wtns", "r1cs"])
@pytest.mark.parametrize("curve", ["bn128", "bls12381"])
def test_truncated_files_are_rejected_at_every_cut(good_files, tmp_path, kind, curve):
    data = good_files[curve][kind]
    sections = section_offsets(data, tmp_path, kind)
    cuts = {0, 3, 4, 11, 12, 17, len(data) - 1}
    for offset, size in sections.values():
        cuts |= {offset - 5, offset, offset + size // 2, offset + size - 1}
    for cut in sorted(c for c in cuts if 0 <= c < len(data)):
        read_bad(tmp_path, kind, data[:cut], r"truncated|too short|ends at|remain|needs|missing")


@pytest.mark.parametrize("kind", ["zkey", "wtns", "r1cs"])
def test_wrong_magic(good_files, tmp_path, kind):
    err = read_bad(tmp_path, kind, b"ptau" + good_files["bn128"][kind][4:], "not a ." + kind + " file")
    assert "b'ptau'" in str(err)


@pytest.mark.parametrize("kind", ["zkey", "wtns", "r1cs"])
@pytest.mark.parametrize("version", [0, 3, 0xFFFFFFFF])
def test_wrong_version(good_files, tmp_path, kind, version):
    read_bad(tmp_path, kind, patched(good_files["bn128"][kind], 4, struct.pack("<I", version)), f"version {version} is not supported")


@pytest.mark.parametrize("kind", ["zkey", "wtns", "r1cs"])
def test_section_count_beyond_the_file(good_files, tmp_path, kind):
    read_bad(tmp_path, kind, patched(good_files["bn128"][kind], 8, struct.pack("<I", 0xFFFFFFFF)), "claims 4294967295 sections")


@pytest.mark.parametrize("kind", ["zkey", "wtns", "r1cs"])
@pytest.mark.parametrize("size", [2**40, 2**64 - 1])
def test_section_size_beyond_the_file(good_files, tmp_path, kind, size):
    data = good_files["bn128"][kind]
    offset = min(o for o, _ in section_offsets(data, tmp_path, kind).values())
    read_bad(tmp_path, kind, patched(data, offset - 8, struct.pack("<Q", size)), f"claims {size} bytes")


@pytest.mark.parametrize("kind", ["zkey", "wtns", "r1cs"])
def test_missing_and_duplicated_sections(good_files, tmp_path, kind):
    data = good_files["bn128"][kind]
    sections = section_offsets(data, tmp_path, kind)
    header_type = 2 if kind == "zkey" else 1
    offset, _ = sections[header_type]
    read_bad(tmp_path, kind, patched(data, offset - 12, struct.pack("<I", 77)), f"section {header_type} .*missing")
    other = max(sections)  # read after the header section, so the duplicate is what is seen
    read_bad(tmp_path, kind, patched(data, sections[other][0] - 12, struct.pack("<I", header_type)), "appears 2 times")


def test_empty_and_missing_files(tmp_path):
    (tmp_path / "empty.zkey").write_bytes(b"")
    with pytest.raises(FormatError, match="0 bytes, shorter than"):
        read_zkey(tmp_path / "empty.zkey")
    with pytest.raises(FormatError, match="cannot open"):
        read_wtns(tmp_path / "absent.wtns")


# counts of 2^32 - 1 (the largest a u32 count can claim) ---------------------------------
def test_huge_counts_in_zkey_allocate_nothing(good_files, tmp_path):
    data = good_files["bn128"]["zkey"]
    sections = section_offsets(data, tmp_path, "zkey")
    hdr = sections[2][0]
    n_vars_at = hdr + 4 + 32 + 4 + 32
    read_bad(tmp_path, "zkey", patched(data, n_vars_at, struct.pack("<I", 0xFFFFFFFF)), r"section 5 \(A points\): is \d+ bytes, but nVars = 4294967295 G1 points needs exactly")
    read_bad(tmp_path, "zkey", patched(data, sections[4][0], struct.pack("<I", 0xFFFFFFFF)), r"coefficients\): is \d+ bytes, but the count of 4294967295")
    read_bad(tmp_path, "zkey", patched(data, sections[10][0] + 64, struct.pack("<I", 0xFFFFFFFF)), "claims 4294967295 contributions")


def test_huge_counts_in_wtns_and_r1cs_allocate_nothing(good_files, tmp_path):
    wtns = good_files["bn128"]["wtns"]
    hdr = section_offsets(wtns, tmp_path, "wtns")[1][0]
    read_bad(tmp_path, "wtns", patched(wtns, hdr + 4 + 32, struct.pack("<I", 0xFFFFFFFF)), "4294967295 values")
    r1cs = good_files["bn128"]["r1cs"]
    sections = section_offsets(r1cs, tmp_path, "r1cs")
    n_constraints_at = sections[1][0] + 4 + 32 + 16 + 8
    read_bad(tmp_path, "r1cs", patched(r1cs, n_constraints_at, struct.pack("<I", 0xFFFFFFFF)), "too small for the header's 4294967295 constraints")
    read_bad(tmp_path, "r1cs", patched(r1cs, sections[2][0], struct.pack("<I", 0xFFFFFFFF)), "constraint 0, A: 4294967295 terms run past")


def test_huge_label_count_is_harmless(good_files, tmp_path):
    r1cs = good_files["bn128"]["r1cs"]
    n_labels_at = section_offsets(r1cs, tmp_path, "r1cs")[1][0] + 4 + 32 + 16
    path = tmp_path / "labels.r1cs"
    path.write_bytes(patched(r1cs, n_labels_at, struct.pack("<Q", 2**40)))
    assert read_r1cs(path).n_labels == 2**40


# unknown or inconsistent primes -----------------------------------------------------------
def test_unknown_primes_are_named(good_files, tmp_path):
    zkey = good_files["bn128"]["zkey"]
    q_at = section_offsets(zkey, tmp_path, "zkey")[2][0] + 4
    err = read_bad(tmp_path, "zkey", patched(zkey, q_at, NOT_A_PRIME_OF_OURS.to_bytes(32, "little")), "matches no supported curve")
    assert f"{NOT_A_PRIME_OF_OURS:#x}" in str(err)
    for kind in ("wtns", "r1cs"):
        data = good_files["bn128"][kind]
        r_at = section_offsets(data, tmp_path, kind)[1][0] + 4
        err = read_bad(tmp_path, kind, patched(data, r_at, NOT_A_PRIME_OF_OURS.to_bytes(32, "little")), "scalar field prime .* matches no supported curve")
        assert f"{NOT_A_PRIME_OF_OURS:#x}" in str(err)


@pytest.mark.parametrize("prime, name", sorted(CIRCOM_OTHER_PRIMES.items(), key=lambda kv: kv[1]))
def test_circoms_other_primes_are_named(good_files, tmp_path, prime, name):
    """A witness or circuit of circom's --prime goldilocks (grumpkin, pallas, ...) is refused naming that --prime, which
    the user chose, not only its number. (goldilocks's elements take 8 bytes: the refusal comes before any size check.)"""
    for kind in ("wtns", "r1cs"):
        data = good_files["bn128"][kind]
        r_at = section_offsets(data, tmp_path, kind)[1][0] + 4
        read_bad(tmp_path, kind, patched(data, r_at, prime.to_bytes(32, "little")), f"is circom's --prime {name}: cuzk proves")

def test_zkey_scalar_prime_of_another_curve(good_files, tmp_path):
    zkey = good_files["bn128"]["zkey"]
    r_at = section_offsets(zkey, tmp_path, "zkey")[2][0] + 4 + 32 + 4
    read_bad(tmp_path, "zkey", patched(zkey, r_at, BLS12_381.r.to_bytes(32, "little")), "is not bn128's r")


def test_n8_inconsistent_with_curve(good_files, tmp_path):
    zkey = good_files["bn128"]["zkey"]
    hdr = section_offsets(zkey, tmp_path, "zkey")[2][0]
    read_bad(tmp_path, "zkey", patched(zkey, hdr + 4 + 32, struct.pack("<I", 48)), "n8r = 48, but bn128's scalar field takes 32")
    wtns = good_files["bn128"]["wtns"]
    read_bad(tmp_path, "wtns", patched(wtns, section_offsets(wtns, tmp_path, "wtns")[1][0], struct.pack("<I", 16)), "n8 = 16")


# zkey content -----------------------------------------------------------------------------
def _zkey_header_field(data: bytes, tmp_path: Path, index: int) -> int:
    """Offset of the index-th u32 after the primes in the groth16 header (0 nVars, 1 nPublic, 2 domainSize)."""
    return section_offsets(data, tmp_path, "zkey")[2][0] + 4 + 32 + 4 + 32 + 4 * index


def test_zkey_semantic_errors(good_files, tmp_path):
    zkey = good_files["bn128"]["zkey"]
    sections = section_offsets(zkey, tmp_path, "zkey")
    read_bad(tmp_path, "zkey", patched(zkey, sections[1][0], struct.pack("<I", 2)), r"protocol id 2 \(PLONK\) is not Groth16")
    read_bad(tmp_path, "zkey", patched(zkey, _zkey_header_field(zkey, tmp_path, 2), struct.pack("<I", 12)), "domainSize = 12 is not a power of two")
    read_bad(tmp_path, "zkey", patched(zkey, _zkey_header_field(zkey, tmp_path, 1), struct.pack("<I", 50)), "nPublic = 50 needs at least 51 signals")
    alpha_at = _zkey_header_field(zkey, tmp_path, 3)
    read_bad(tmp_path, "zkey", patched(zkey, alpha_at, (5).to_bytes(32, "little")), "alpha1 is not a point of bn128 G1")
    read_bad(tmp_path, "zkey", patched(zkey, alpha_at, (BN254.q + 1).to_bytes(32, "little")), "alpha1: a coordinate is not reduced")


@pytest.mark.parametrize(
    "field, offset, value, match",
    [
        ("matrix", 0, 2, "entry #3: matrix = 2 must be 0"),
        ("constraint", 4, 16, "entry #3: constraint = 16 must be < domainSize = 16"),
        ("signal", 8, 10, "entry #3: signal = 10 must be < nVars = 10"),
    ],
)
def test_zkey_coefficient_entries_are_checked(good_files, tmp_path, field, offset, value, match):
    zkey = good_files["bn128"]["zkey"]
    entry = section_offsets(zkey, tmp_path, "zkey")[4][0] + 4 + 3 * 44
    read_bad(tmp_path, "zkey", patched(zkey, entry + offset, struct.pack("<I", value)), match)


def test_zkey_unreduced_coefficient(good_files, tmp_path):
    zkey = good_files["bn128"]["zkey"]
    entry = section_offsets(zkey, tmp_path, "zkey")[4][0] + 4 + 5 * 44
    read_bad(tmp_path, "zkey", patched(zkey, entry + 12, BN254.r.to_bytes(32, "little")), r"entry #5: value is not reduced modulo r")


def test_zkey_header_reader_is_cheap_and_strict(good_files, tmp_path):
    zkey = good_files["bn128"]["zkey"]
    hdr = section_offsets(zkey, tmp_path, "zkey")[9][0]
    path = tmp_path / "cut.zkey"
    path.write_bytes(zkey[: hdr + 10])
    with pytest.raises(FormatError, match="H points"):
        read_zkey_header(path)


def test_zkey_contributions_malformed(good_files, tmp_path):
    zkey = good_files["bn128"]["zkey"]
    params_len_at = section_offsets(zkey, tmp_path, "zkey")[10][0] + 64 + 4 + 10 * 32 + 64 + 4
    read_bad(tmp_path, "zkey", patched(zkey, params_len_at + 4, bytes([9])), "unknown parameter type 9")
    read_bad(tmp_path, "zkey", patched(zkey, params_len_at, struct.pack("<I", 1000)), "ends at byte .* while reading contribution #1 parameters")


# wtns / r1cs content ----------------------------------------------------------------------
def test_wtns_unreduced_value(good_files, tmp_path):
    wtns = good_files["bn128"]["wtns"]
    values = section_offsets(wtns, tmp_path, "wtns")[2][0]
    read_bad(tmp_path, "wtns", patched(wtns, values + 2 * 32, BN254.r.to_bytes(32, "little")), "value #2 is not reduced")


def test_r1cs_wire_out_of_range_and_unreduced_coefficient(good_files, tmp_path):
    r1cs = good_files["bn128"]["r1cs"]
    constraints = section_offsets(r1cs, tmp_path, "r1cs")[2][0]
    read_bad(tmp_path, "r1cs", patched(r1cs, constraints + 4, struct.pack("<I", 10)), r"constraint 0, A: wire 10 is out of range \(nWires = 10\)")
    read_bad(tmp_path, "r1cs", patched(r1cs, constraints + 8, BN254.r.to_bytes(32, "little")), "constraint 0, A: a coefficient is not reduced")


def test_r1cs_trailing_words_and_custom_gates(tmp_path):
    args, _ = synthetic_circuit(BN254)
    write_r1cs(tmp_path / "ok.r1cs", **args)
    data = (tmp_path / "ok.r1cs").read_bytes()
    size_at = 12 + 4  # the constraints section comes first (circom's order)
    (size,) = struct.unpack_from("<Q", data, size_at)
    grown = data[:size_at] + struct.pack("<Q", size + 8) + data[size_at + 8 : 24 + size] + bytes(8) + data[24 + size :]
    read_bad(tmp_path, "r1cs", grown, "has 8 bytes after the last of the header's 7 constraints")
    with_gates = patched(data, 8, struct.pack("<I", 4)) + struct.pack("<IQI", 4, 4, 0)
    read_bad(tmp_path, "r1cs", with_gates, "custom gates are a PLONK feature")


def test_witness_of_wrong_length_or_curve_for_r1cs(tmp_path):
    args, w = synthetic_circuit(BN254)
    write_r1cs(tmp_path / "c.r1cs", **args)
    r1cs = read_r1cs(tmp_path / "c.r1cs")
    write_wtns(tmp_path / "short.wtns", BN254, w[:-1])
    with pytest.raises(FormatError, match=r"short.wtns: witness must be \(10, 8\) uint32"):
        check_satisfied(r1cs, read_wtns(tmp_path / "short.wtns"))
    write_wtns(tmp_path / "bls.wtns", BLS12_381, w)
    with pytest.raises(FormatError, match="witness is over bls12381's scalar field but the r1cs .* is bn128"):
        check_satisfied(r1cs, read_wtns(tmp_path / "bls.wtns"))
    with pytest.raises(FormatError, match="witness must be"):
        check_satisfied(r1cs, ints_to_limbs(w, 8).astype(np.int64))


# JSON ---------------------------------------------------------------------------------------
G1_JSON = ["1", "2", "1"]
G2_JSON = [[str(c) for c in BN254.G2.generator[0]], [str(c) for c in BN254.G2.generator[1]], ["1", "0"]]
PROOF = {"pi_a": G1_JSON, "pi_b": G2_JSON, "pi_c": G1_JSON, "protocol": "groth16", "curve": "bn128"}
VKEY = {
    "protocol": "groth16", "curve": "bn128", "nPublic": 1, "vk_alpha_1": G1_JSON, "vk_beta_2": G2_JSON,
    "vk_gamma_2": G2_JSON, "vk_delta_2": G2_JSON, "vk_alphabeta_12": [[["1", "2"]] * 3] * 2, "IC": [G1_JSON, G1_JSON],
}  # fmt: skip


def _json_bad(tmp_path: Path, reader, doc, match: str, raw: str | None = None, **kw) -> None:
    path = tmp_path / "doc.json"
    path.write_text(raw if raw is not None else json.dumps(doc))
    with pytest.raises(FormatError, match=match) as info:
        reader(path, **kw)
    assert str(path) in str(info.value)


def test_good_json_documents_parse(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(PROOF))
    (tmp_path / "v.json").write_text(json.dumps(VKEY))
    assert read_proof(tmp_path / "p.json").a == (1, 2)
    assert read_vkey(tmp_path / "v.json").n_public == 1


@pytest.mark.parametrize(
    "doc, match",
    [
        (None, "not valid JSON"),
        ([1, 2], "expected a JSON object"),
        ({**PROOF, "curve": "secp256k1"}, "curve: unknown curve 'secp256k1'"),
        ({**PROOF, "protocol": "plonk"}, "protocol: 'plonk' is not groth16"),
        ({k: v for k, v in PROOF.items() if k != "pi_b"}, "pi_b: missing"),
        ({**PROOF, "pi_a": ["1", "3", "1"]}, "pi_a: not on bn128 G1"),
        ({**PROOF, "pi_a": [str(BN254.q + 1), "2", "1"]}, "pi_a: .* outside the field"),
        ({**PROOF, "pi_c": ["x", "2", "1"]}, r"pi_c: 'x' is not a decimal \(or 0x hex\) integer"),
        ({**PROOF, "pi_b": G1_JSON}, r"pi_b: expected \[\[x0, x1\]"),
        ({k: v for k, v in PROOF.items() if k != "curve"}, "no \"curve\" key"),
    ],
)
def test_bad_proof_json(tmp_path, doc, match):
    _json_bad(tmp_path, read_proof, doc, match, raw="{ not json" if doc is None else None)


@pytest.mark.parametrize(
    "doc, match",
    [
        ({**VKEY, "nPublic": 2}, "IC: nPublic = 2 needs 3 points, got 2"),
        ({**VKEY, "nPublic": "1"}, "nPublic: expected a non-negative integer"),
        ({**VKEY, "IC": [G1_JSON, ["1", "3", "1"]]}, r"IC\[1\]: not on bn128 G1"),
        ({**VKEY, "vk_alphabeta_12": [["1", "2"]]}, "vk_alphabeta_12: expected an Fq12"),
        ({**VKEY, "vk_alphabeta_12": [[[str(BN254.q), "2"]] * 3] * 2}, "vk_alphabeta_12: .* is not an element of bn128's base field"),
        ({**VKEY, "curve": 7}, "curve: expected a curve name"),
        ({**VKEY, "vk_gamma_2": [["1", "2"], ["3", "4"], ["1", "0"]]}, "vk_gamma_2: not on bn128 G2"),
    ],
)
def test_bad_vkey_json(tmp_path, doc, match):
    _json_bad(tmp_path, read_vkey, doc, match)


@pytest.mark.parametrize("text", [" 5", "5 ", "+5", "5_0", "\u0665", "0X5", "0x", "0x5g", " 0x5", "", "-"])
def test_only_ascii_digits_are_decimal(tmp_path, text):
    """Python's int() also reads blanks, a '+', '_' between digits and other scripts' digits, where snarkjs reads no
    number (" 502" and "+502": Invalid proof; "5_0_2": an error): such a file was verified here as valid."""
    _json_bad(tmp_path, read_public, ["1", text], rf"entry #1: {text!r} is not a decimal \(or 0x hex\) integer".replace("+", r"\+"))
    _json_bad(tmp_path, read_proof, {**PROOF, "pi_a": [text, "2", "1"]}, r"pi_a: .* is not a decimal \(or 0x hex\) integer")


def test_hex_numbers_are_read_as_snarkjs_reads_them(tmp_path):
    """snarkjs's unstringifyBigInts reads "0x" and hex digits as a number (its verifier says OK to such a public.json
    or proof.json; "0X5" is no number to it): they were refused here as "not a decimal integer"."""
    path = tmp_path / "public.json"
    path.write_text(json.dumps(["0x1f", "0xABcd", "31"]))
    assert read_public(path) == [31, 0xABCD, 31]


def test_numbers_too_long_for_python_are_named(tmp_path):
    """A number of more digits than Python converts (4300) is json's plain ValueError, not a JSONDecodeError: it
    reached the command line without the file's name (and over HTTP, as an internal error)."""
    _json_bad(tmp_path, read_public, None, "doc.json: holds a number of thousands of digits", raw="[" + "1" * 5000 + "]")
    _json_bad(tmp_path, read_public, ["9" * 5000], "entry #0: a 5000-digit number is not a field element")
    _json_bad(tmp_path, read_proof, {**PROOF, "pi_c": ["9" * 5000, "2", "1"]}, "pi_c: a 5000-digit number is not")


def test_zkey_ic_points_are_checked_when_a_verification_key_is_taken(good_files, tmp_path):
    """The IC points are what a verification key lists: one off the curve was exported as it was, and made a one-shot
    prove's self-check fail naming no file."""
    zkey = good_files["bn128"]["zkey"]
    ic = section_offsets(zkey, tmp_path, "zkey")[3][0]
    path = tmp_path / "ic.zkey"
    path.write_bytes(patched(zkey, ic + 64 + 3, bytes([zkey[ic + 64 + 3] ^ 1])))
    with pytest.raises(FormatError, match=r"ic.zkey: section 3 \(IC points\): IC\[1\] is not a point of bn128 G1"):
        read_zkey(path).ic_points()
    path.write_bytes(patched(zkey, ic, (BN254.q + 1).to_bytes(32, "little")))
    with pytest.raises(FormatError, match=r"IC\[0\]: a coordinate is not reduced modulo q"):
        read_zkey(path).ic_points()


def test_bad_public_json(tmp_path):
    _json_bad(tmp_path, read_public, {"a": 1}, "expected a JSON array")
    _json_bad(tmp_path, read_public, ["1", True], "entry #1: expected a decimal string")
    _json_bad(tmp_path, read_public, ["1", "-5"], "entry #1: -5 is outside")
    _json_bad(tmp_path, read_public, ["1", str(BN254.r)], "entry #1: .* outside the bn128 scalar field", curve=BN254)
    _json_bad(tmp_path, read_public, ["1", "2"], "has 2 public signals, the key expects 3", n_public=3)
    _json_bad(tmp_path, read_public, None, "not valid JSON", raw="[\"1\",")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe[]")
    with pytest.raises(FormatError, match="binary.json: is not UTF-8 text"):
        read_public(tmp_path / "binary.json")
    (tmp_path / "key.json").write_bytes(b"zkey\x01\x00\x00\x00" + bytes(32))  # a .zkey where the vkey goes
    with pytest.raises(FormatError, match="key.json: is a binary .zkey file, not JSON"):
        read_vkey(tmp_path / "key.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FormatError, match="deep.json: arrays or objects nested more than 200 deep: not a snarkjs file"):
        read_public(tmp_path / "deep.json")
