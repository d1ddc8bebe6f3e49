"""End to end on real circom circuits: cuzk's proofs verify with snarkjs and with cuzk's verifier."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import load_json, snarkjs_verify
from cuzk.backends import get_backend
from cuzk.cli import main as cli_main
from cuzk.formats.json_io import read_proof, read_public, read_vkey
from cuzk.formats.wtns import read_wtns
from cuzk.formats.zkey import read_zkey
from cuzk.prover.groth16 import prove
from cuzk.prover.verify import verify, vkey_from_zkey


def test_cli_proof_verifies_with_snarkjs_and_cuzk(corpus_circuit, tmp_path):
    proof_path, public_path = tmp_path / "proof.json", tmp_path / "public.json"
    rc = cli_main(["prove", str(corpus_circuit / "circuit.zkey"), str(corpus_circuit / "witness.wtns"), str(proof_path), str(public_path)])
    assert rc == 0
    vkey = corpus_circuit / "verification_key.json"
    assert load_json(public_path) == load_json(corpus_circuit / "public.json")
    assert snarkjs_verify(vkey, public_path, proof_path)
    assert cli_main(["verify", str(vkey), str(public_path), str(proof_path)]) == 0


def test_snarkjs_proof_verifies_with_cuzk(corpus_circuit):
    vkey = read_vkey(corpus_circuit / "verification_key.json")
    assert verify(vkey, read_public(corpus_circuit / "public.json"), read_proof(corpus_circuit / "proof.json"))


def test_tampered_proof_and_public_rejected_by_both(corpus_circuit, tmp_path):
    zkey = read_zkey(corpus_circuit / "circuit.zkey")
    proof = prove(get_backend("cpu"), zkey, read_wtns(corpus_circuit / "witness.wtns"))
    vk = vkey_from_zkey(zkey)
    assert verify(vk, proof.public_signals, proof)

    vkey_path = corpus_circuit / "verification_key.json"
    good_proof = load_json(corpus_circuit / "proof.json")
    good_public = load_json(corpus_circuit / "public.json")

    # A valid point, but the wrong one: swap in 2·A.
    G1 = zkey.curve.G1
    bad = json.loads(json.dumps(good_proof))
    a2 = G1.double(read_proof(corpus_circuit / "proof.json").a)
    bad["pi_a"] = [str(a2[0]), str(a2[1]), "1"]
    (tmp_path / "bad_proof.json").write_text(json.dumps(bad))
    shutil.copy(corpus_circuit / "public.json", tmp_path / "public.json")
    assert not snarkjs_verify(vkey_path, tmp_path / "public.json", tmp_path / "bad_proof.json")
    assert not verify(read_vkey(vkey_path), read_public(tmp_path / "public.json"), read_proof(tmp_path / "bad_proof.json"))

    if good_public:
        tampered = list(good_public)
        tampered[0] = str((int(tampered[0]) + 1) % zkey.curve.r)
        (tmp_path / "bad_public.json").write_text(json.dumps(tampered))
        (tmp_path / "proof.json").write_text(json.dumps(good_proof))
        assert not snarkjs_verify(vkey_path, tmp_path / "bad_public.json", tmp_path / "proof.json")
        assert not verify(read_vkey(vkey_path), read_public(tmp_path / "bad_public.json"), read_proof(tmp_path / "proof.json"))


def test_wrong_witness_leaves_no_proof_file(corpus_circuit, tmp_path):
    """A witness for another circuit is refused with a one-line error and nothing is written."""
    other = next((p for p in corpus_circuit.parent.iterdir() if p != corpus_circuit and (p / "witness.wtns").exists()), None)
    if other is None:
        pytest.skip("needs two corpus circuits")
    proof_path, public_path = tmp_path / "proof.json", tmp_path / "public.json"
    rc = cli_main(["prove", str(corpus_circuit / "circuit.zkey"), str(other / "witness.wtns"), str(proof_path), str(public_path)])
    assert rc != 0
    assert not proof_path.exists() and not public_path.exists()
