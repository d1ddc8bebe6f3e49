"""Groth16 verification: snarkjs's corpus proofs, synthetic keys with known trapdoors, tampering, bad input."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS_CIRCUITS, corpus_dir, load_json
from cuzk.curves import BLS12_381, BN254, CURVES, Curve
from cuzk.formats.json_io import Groth16Proof, VerificationKey, read_proof, read_public, read_vkey
from cuzk.formats.zkey import read_zkey
from cuzk.prover.verify import (PreparedVerifyingKey, VerifyInputError, alphabeta, prepare_vkey, prepare_zkey, verify,
                               vkey_from_zkey)

by_curve = pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)


# ---------------------------------------------------------------------------- synthetic keys
class Trapdoor:
    """A verification key whose discrete logs we know, so valid proofs can be made for any signals."""

    def __init__(self, curve: Curve, n_public: int, seed: int = 0):
        rng = random.Random(seed)
        r = curve.r
        G1, G2 = curve.G1, curve.G2
        self.curve = curve
        self.alpha, self.beta, self.gamma, self.delta = (rng.randrange(1, r) for _ in range(4))
        # IC_i = (ic0 + i * step) G1, built by additions so hundreds of points stay cheap
        ic0, step = rng.randrange(1, r), rng.randrange(1, r)
        self.ic_logs = [(ic0 + i * step) % r for i in range(n_public + 1)]
        P, D = G1.mul(G1.generator, ic0), G1.mul(G1.generator, step)
        ic = []
        for _ in range(n_public + 1):
            ic.append(P)
            P = G1.add(P, D)
        alpha1 = G1.mul(G1.generator, self.alpha)
        beta2 = G2.mul(G2.generator, self.beta)
        self.vkey = VerificationKey(
            curve, n_public, alpha1, beta2, G2.mul(G2.generator, self.gamma), G2.mul(G2.generator, self.delta),
            alphabeta(curve, alpha1, beta2), tuple(ic),
        )  # fmt: skip

    def proof(self, signals: list[int], seed: int = 1) -> Groth16Proof:
        """A, B random; C solves ab = alpha beta + l gamma + c delta (l = the IC combination's log)."""
        rng = random.Random(seed)
        r, G1, G2 = self.curve.r, self.curve.G1, self.curve.G2
        a, b = rng.randrange(1, r), rng.randrange(1, r)
        l = (self.ic_logs[0] + sum(s * k for s, k in zip(signals, self.ic_logs[1:]))) % r
        c = (a * b - self.alpha * self.beta - l * self.gamma) * pow(self.delta, -1, r) % r
        return Groth16Proof(self.curve, G1.mul(G1.generator, a), G2.mul(G2.generator, b), G1.mul(G1.generator, c))


_trapdoors: dict[tuple[str, int], tuple[Trapdoor, PreparedVerifyingKey]] = {}


def trapdoor(curve: Curve, n_public: int) -> tuple[Trapdoor, PreparedVerifyingKey]:
    key = (curve.name, n_public)
    if key not in _trapdoors:
        td = Trapdoor(curve, n_public)
        _trapdoors[key] = (td, prepare_vkey(td.vkey))
    return _trapdoors[key]


@by_curve
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_synthetic_proofs_verify_and_one_changed_signal_fails(curve, data):
    n_public = data.draw(st.sampled_from([0, 1, 3, 40]))
    td, pvk = trapdoor(curve, n_public)
    small = data.draw(st.booleans())
    signals = data.draw(st.lists(st.integers(0, 1 if small else curve.r - 1), min_size=n_public, max_size=n_public))
    proof = td.proof(signals, seed=data.draw(st.integers(0, 2**32)))
    assert verify(pvk, signals, proof)
    if n_public:
        i = data.draw(st.integers(0, n_public - 1))
        bumped = list(signals)
        bumped[i] = (bumped[i] + data.draw(st.integers(1, curve.r - 1))) % curve.r
        assert not verify(pvk, bumped, proof)


@by_curve
def test_hundreds_of_public_signals(curve):
    """sha256_32B has 256 bit-valued public signals; full-size ones take more MSM windows."""
    td, pvk = trapdoor(curve, 300)
    rng = random.Random(9)
    for signals in ([rng.randrange(2) for _ in range(300)], [rng.randrange(curve.r) for _ in range(300)]):
        proof = td.proof(signals)
        assert verify(pvk, signals, proof)
        assert not verify(pvk, signals[:-1] + [(signals[-1] + 1) % curve.r], proof)


@by_curve
def test_unprepared_key_and_infinity_points(curve):
    td, pvk = trapdoor(curve, 1)
    proof = td.proof([5])
    assert verify(td.vkey, [5], proof)  # prepared on the fly
    assert not verify(pvk, [5], replace(proof, a=None))
    assert not verify(pvk, [5], replace(proof, c=None))


@by_curve
def test_each_proof_point_swapped_for_another_valid_point_fails(curve):
    td, pvk = trapdoor(curve, 2)
    proof = td.proof([1, 2])
    G1, G2 = curve.G1, curve.G2
    assert not verify(pvk, [1, 2], replace(proof, a=G1.double(proof.a)))
    assert not verify(pvk, [1, 2], replace(proof, b=G2.double(proof.b)))
    assert not verify(pvk, [1, 2], replace(proof, c=G1.add(proof.c, G1.generator)))


# ---------------------------------------------------------------------------- malformed input
@by_curve
def test_malformed_signals_raise(curve):
    td, pvk = trapdoor(curve, 2)
    proof = td.proof([1, 2])
    for signals, match in (
        ([1], "2 public signals, got 1"),
        ([1, 2, 3], "2 public signals, got 3"),
        ([1, curve.r], "outside"),
        ([-1, 2], "outside"),
        ([1, "2"], "expected an integer"),
        ([True, 2], "expected an integer"),
    ):
        with pytest.raises(VerifyInputError, match=match):
            verify(pvk, signals, proof)


@by_curve
def test_off_curve_and_out_of_field_points_raise(curve):
    td, pvk = trapdoor(curve, 1)
    proof = td.proof([3])
    x, y = proof.a
    bx, by = proof.b
    q = curve.q
    cases = [
        (replace(proof, a=(x, (y + 1) % q)), "proof A is not on"),
        (replace(proof, c=(x + q, y)), "proof C: coordinates"),
        (replace(proof, b=(bx, (by[0], (by[1] + 1) % q))), "proof B is not on"),
        (replace(proof, b=(1, 2)), "proof B: expected an affine point"),
    ]
    for bad, match in cases:
        with pytest.raises(VerifyInputError, match=match):
            verify(pvk, [3], bad)


def test_points_outside_the_subgroup_raise():
    from test_pairing import random_twist_point

    td, pvk = trapdoor(BN254, 1)
    proof = td.proof([3])
    with pytest.raises(VerifyInputError, match="proof B is on the curve but not in the order-r subgroup"):
        verify(pvk, [3], replace(proof, b=random_twist_point(BN254, random.Random(1))))
    td, pvk = trapdoor(BLS12_381, 1)
    proof = td.proof([3])
    c = BLS12_381
    x = 5
    while True:  # a point of E(Fq) outside G1 (the BLS12-381 G1 cofactor is about 2^126)
        rhs = (x**3 + c.G1.b) % c.q
        y = pow(rhs, (c.q + 1) // 4, c.q)
        if y * y % c.q == rhs:
            break
        x += 1
    with pytest.raises(VerifyInputError, match="proof A is on the curve but not in the order-r subgroup"):
        verify(pvk, [3], replace(proof, a=(x, y)))


def test_a_key_point_outside_its_subgroup_is_not_exported(tmp_path):
    """The zkey reader checks its header points on their curves only: one outside its subgroup was exported, and the
    verification key then refused by every verifier. vkey_from_zkey checks them (and the IC points) as one does."""
    from cuzk.cli import main as cli_main
    from cuzk.formats.binfile import BinFile
    from cuzk.formats.errors import FormatError
    from test_formats import write_synthetic_files

    c = BLS12_381
    zkey = write_synthetic_files(c, tmp_path)["zkey"]
    with BinFile(zkey, "zkey", 2) as f:
        alpha_at = next(s.offset for s in f.sections if s.type == 2) + 4 + c.Fq.n8 + 4 + c.Fr.n8 + 12
    x = 5
    while True:  # a point of E(Fq) outside G1, as above
        rhs = (x**3 + c.G1.b) % c.q
        y = pow(rhs, (c.q + 1) // 4, c.q)
        if y * y % c.q == rhs:
            break
        x += 1
    data = zkey.read_bytes()
    bad = tmp_path / "bad.zkey"
    bad.write_bytes(data[:alpha_at] + c.Fq.to_mont_bytes(x) + c.Fq.to_mont_bytes(y) + data[alpha_at + 2 * c.Fq.n8 :])
    with pytest.raises(FormatError, match=r"bad.zkey: section 2 \(groth16 header\): alpha1 is on the curve but not in the "
                                          "order-r subgroup of bls12381 G1"):
        vkey_from_zkey(read_zkey(bad))
    assert cli_main(["zkey", "export", "verificationkey", str(bad), str(tmp_path / "vk.json")]) == 1
    assert not (tmp_path / "vk.json").exists()


def test_proof_of_the_other_curve_raises():
    td, pvk = trapdoor(BN254, 1)
    other, _ = trapdoor(BLS12_381, 1)
    with pytest.raises(VerifyInputError, match="the proof is for bls12381 but the key is for bn128"):
        verify(pvk, [1], other.proof([1]))


@by_curve
def test_malformed_keys_raise(curve):
    td, _ = trapdoor(curve, 2)
    vk = td.vkey
    with pytest.raises(VerifyInputError, match="needs 3 IC points, got 2"):
        prepare_vkey(replace(vk, ic=vk.ic[:2]))
    with pytest.raises(VerifyInputError, match="vk_gamma_2 is the point at infinity"):
        prepare_vkey(replace(vk, gamma2=None))
    with pytest.raises(VerifyInputError, match="vk_alpha_1 is not on"):
        prepare_vkey(replace(vk, alpha1=(vk.alpha1[0], (vk.alpha1[1] + 1) % curve.q)))


# ---------------------------------------------------------------------------- snarkjs corpus
@pytest.mark.parametrize("name", CORPUS_CIRCUITS or [pytest.param(None, marks=pytest.mark.skip(reason="no ../shared/corpus"))])
def test_corpus_alphabeta_reproduced_exactly(name):
    d = corpus_dir(name)
    vk = read_vkey(d / "verification_key.json")
    got = alphabeta(vk.curve, vk.alpha1, vk.beta2)
    assert got == vk.alphabeta_12
    assert [[[str(c) for c in fq2] for fq2 in fq6] for fq6 in got] == load_json(d / "verification_key.json")["vk_alphabeta_12"]


@pytest.mark.parametrize("single_proof", [False, True], ids=["prepared-vkey", "zkey-single-proof"])
@pytest.mark.parametrize("name", CORPUS_CIRCUITS or [pytest.param(None, marks=pytest.mark.skip(reason="no ../shared/corpus"))])
def test_corpus_proof_verifies_and_tampering_fails(name, single_proof):
    """The same verdicts from the exported key prepared for many proofs and from the zkey prepared for a single proof
    (e(alpha, beta) paired in the proof's product: a one-shot prove's self-check)."""
    d = corpus_dir(name)
    vk = read_vkey(d / "verification_key.json")
    public = read_public(d / "public.json", vk.curve, vk.n_public)
    proof = read_proof(d / "proof.json", vk.curve)
    pvk = prepare_zkey(read_zkey(d / "circuit.zkey"), single_proof=True) if single_proof else prepare_vkey(vk)
    assert verify(pvk, public, proof)
    G1, G2 = vk.curve.G1, vk.curve.G2
    assert not verify(pvk, public, replace(proof, a=G1.double(proof.a)))
    assert not verify(pvk, public, replace(proof, b=G2.add(proof.b, G2.generator)))
    assert not verify(pvk, public, replace(proof, c=G1.neg(proof.c)))
    if public:
        assert not verify(pvk, [(public[0] + 1) % vk.curve.r, *public[1:]], proof)
        with pytest.raises(VerifyInputError, match="outside"):
            verify(pvk, [vk.curve.r, *public[1:]], proof)


@pytest.mark.parametrize("name", ["toy_multiplier", "chain4000_bls12381"])
def test_vkey_from_zkey_equals_snarkjs_export(name):
    d = corpus_dir(name)
    assert vkey_from_zkey(read_zkey(d / "circuit.zkey")) == read_vkey(d / "verification_key.json")


# ---------------------------------------------------------------------------- the command line
def test_cli_verify_takes_other_provers_layout_and_keeps_unreadable_apart_from_invalid(tmp_path):
    """rapidsnark's proof.json names no curve: the curve is the verification key's, as snarkjs does. Exit 0 valid,
    1 invalid, 2 when the files cannot be read (nothing verified)."""
    import json
    from pathlib import Path

    from conftest import snarkjs_verify
    from cuzk.cli import main as cli_main

    example = Path(__file__).resolve().parents[1] / "src" / "cuzk" / "examples" / "synthetic_bn254"
    vkey, proof, public = example / "verification_key.json", tmp_path / "proof.json", tmp_path / "public.json"
    assert cli_main(["prove", str(example / "circuit.zkey"), str(example / "witness.wtns"), str(proof), str(public)]) == 0
    layout = json.loads(proof.read_text())
    del layout["curve"]  # rapidsnark's layout: pi_a, pi_b, pi_c, protocol
    proof.write_text(json.dumps(layout))
    assert snarkjs_verify(vkey, public, proof)
    assert cli_main(["verify", str(vkey), str(public), str(proof)]) == 0
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps({**layout, "pi_a": layout["pi_c"]}))
    assert cli_main(["verify", str(vkey), str(public), str(tampered)]) == 1
    truncated = tmp_path / "truncated.json"
    truncated.write_text(proof.read_text()[:40])
    assert cli_main(["verify", str(vkey), str(public), str(truncated)]) == 2
    assert cli_main(["verify", str(vkey), str(public), str(tmp_path / "missing.json")]) == 2
    # A verification key without vk_alphabeta_12 (snarkjs's verifier never reads it, and says OK): verified as well
    bare = tmp_path / "bare_vkey.json"
    bare.write_text(json.dumps({k: v for k, v in json.loads(vkey.read_text()).items() if k != "vk_alphabeta_12"}))
    assert snarkjs_verify(bare, public, proof)
    assert cli_main(["verify", str(bare), str(public), str(proof)]) == 0
    assert cli_main(["verify", str(bare), str(public), str(tampered)]) == 1
    # Numbers as "0x" hex strings, which snarkjs's unstringifyBigInts reads too
    hex_public, hex_proof = tmp_path / "hex_public.json", tmp_path / "hex_proof.json"
    hex_public.write_text(json.dumps([hex(int(v)) for v in json.loads(public.read_text())]))
    hex_proof.write_text(json.dumps({**layout, "pi_a": [hex(int(v)) for v in layout["pi_a"]]}))
    assert snarkjs_verify(vkey, hex_public, hex_proof)
    assert cli_main(["verify", str(vkey), str(hex_public), str(hex_proof)]) == 0


def test_cli_verify_names_the_file_of_what_only_the_verifier_checks(tmp_path, capsys):
    """A key point at infinity, a proof point outside its subgroup, a signal count the key does not take: exit 2 with
    the file named (was "error: vk_alpha_1 is the point at infinity", "error: the key has 2 public signals, got 1")."""
    import json
    from pathlib import Path

    from cuzk.cli import main as cli_main
    from cuzk.curves.serialize import g2_to_json
    from test_pairing import random_twist_point

    example = Path(__file__).resolve().parents[1] / "src" / "cuzk" / "examples" / "synthetic_bn254"
    vkey, public = example / "verification_key.json", example / "public.json"
    proof = tmp_path / "proof.json"
    assert cli_main(["prove", "--local", str(example / "circuit.zkey"), str(example / "witness.wtns"), str(proof),
                     str(tmp_path / "public.json")]) == 0
    capsys.readouterr()
    cases = []
    bad = tmp_path / "vk.json"
    bad.write_text(json.dumps({**json.loads(vkey.read_text()), "vk_alpha_1": ["0", "1", "0"]}))
    cases.append(((bad, public, proof), f"error: {bad}: vk_alpha_1 is the point at infinity"))
    short = tmp_path / "short.json"
    short.write_text(json.dumps(json.loads(public.read_text())[:-1]))
    cases.append(((vkey, short, proof), f"error: {short}: has "))
    twisted = tmp_path / "twisted.json"
    twisted.write_text(json.dumps({**json.loads(proof.read_text()), "pi_b": g2_to_json(random_twist_point(BN254, random.Random(1)))}))
    cases.append(((vkey, public, twisted), f"error: {twisted}: proof B is on the curve but not in the order-r subgroup"))
    for files, message in cases:
        assert cli_main(["verify", *map(str, files)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, err


def test_prepare_zkey_is_prepare_vkey_of_the_exported_key():
    from cuzk.bench.workload import example_dir

    zkey = read_zkey(example_dir() / "circuit.zkey")
    once, twice = prepare_zkey(zkey), prepare_vkey(vkey_from_zkey(zkey))
    assert (once.curve, once.n_public, once.alpha) == (twice.curve, twice.n_public, None)
    for name in ("ic", "lines", "target"):
        assert np.array_equal(getattr(once, name), getattr(twice, name)), name
