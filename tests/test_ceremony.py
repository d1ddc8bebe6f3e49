"""snarkjs's ceremony record (prover/ceremony.py) against snarkjs and ffjavascript themselves: ChaCha, hashToG2, the
wasm's point subtraction on unreduced input, the uncompressed encoding its hashes absorb, a contribution's proof of
knowledge."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess

import numpy as np
import pytest

from conftest import REPO
from cuzk.curves import BLS12_381, BN254
from cuzk.curves.serialize import g1_from_bytes, g1_to_bytes, g1_to_uncompressed, g2_to_bytes, g2_to_uncompressed
from cuzk.prover.ceremony import ChaCha, contribution, hash_to_g2, uncompressed_points, wasm_sub_affine

CURVES = [BN254, BLS12_381]
NODE_MODULES = REPO / "tests" / "oracle" / "node_modules"
SEEDS = [[0] * 8, [0xFFFFFFFF] * 8, list(range(1, 9))]
DIGESTS = [bytes(64), b"\xab" * 64] + [random.Random(i).randbytes(64) for i in range(6)]


def _differences(curve) -> list[tuple[bytes, bytes]]:
    """(P as raw limbs, Q) pairs: P a point, or any bytes (coordinates ≥ q included, as zkey new may read), Q = k·G1."""
    G1, rng = curve.G1, random.Random(curve.name)
    point = g1_to_bytes(curve, G1.mul(G1.generator, 5))
    raw = [rng.randbytes(2 * curve.Fq.n8) for _ in range(6)] + [b"\xff" * (2 * curve.Fq.n8), point]
    return [(a, g1_to_bytes(curve, G1.mul(G1.generator, 1000 + i))) for i, a in enumerate(raw)]


DIFFERENCES = {curve.name: _differences(curve) for curve in (BN254, BLS12_381)}

# snarkjs's own hashToG2 (src/keypair.js) on its own curves, and ffjavascript's ChaCha words, 64-bit draws and booleans.
ORACLE = """
const [modules, seeds, digests, differences] = process.argv.slice(1);
const { ChaCha } = await import(`${modules}/ffjavascript/main.js`);
const { hashToG2 } = await import(`${modules}/snarkjs/src/keypair.js`);
const { getCurveFromName } = await import(`${modules}/snarkjs/src/curves.js`);
const out = { chacha: JSON.parse(seeds).map((seed) => {
    const rng = new ChaCha(seed);
    const words = Array.from({ length: 40 }, () => rng.nextU32());
    return { words, u64: String(rng.nextU64()), bools: Array.from({ length: 8 }, () => rng.nextBool()) };
}) };
for (const name of ["bn128", "bls12381"]) {
    const curve = await getCurveFromName(name);
    out[name] = JSON.parse(digests).map((hex) => {
        const P = curve.G2.toAffine(hashToG2(curve, Buffer.from(hex, "hex")));
        return curve.G2.toObject(P).slice(0, 2).map((c) => c.map(String));
    });
    out[`${name} sub`] = JSON.parse(differences)[name].map(([a, b]) => {
        const P = curve.G1.toAffine(curve.G1.sub(Buffer.from(a, "hex"), Buffer.from(b, "hex")));  // wasm g1m_subAffine
        const bytes = new Uint8Array(curve.G1.F.n8 * 2);
        curve.G1.toRprUncompressed(bytes, 0, P);
        return Buffer.from(bytes).toString("hex");
    });
    await curve.terminate();
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def snarkjs_values():
    if not ((NODE_MODULES / "snarkjs").exists() and shutil.which("node")):
        pytest.skip("node + snarkjs (tests/oracle) not installed")
    differences = {name: [(a.hex(), b.hex()) for a, b in pairs] for name, pairs in DIFFERENCES.items()}
    res = subprocess.run(["node", "--input-type=module", "-e", ORACLE, str(NODE_MODULES), json.dumps(SEEDS), json.dumps([d.hex() for d in DIGESTS]),
                          json.dumps(differences)], capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return json.loads(res.stdout)


@pytest.mark.parametrize("i", range(len(SEEDS)))
def test_chacha_is_ffjavascripts(snarkjs_values, i):
    rng = ChaCha(tuple(SEEDS[i]))
    expected = snarkjs_values["chacha"][i]
    assert [rng.next_u32() for _ in range(40)] == expected["words"]  # three blocks: the counter moves on
    assert str(rng.next_u64()) == expected["u64"]
    assert [rng.next_bool() for _ in range(8)] == expected["bools"]


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_hash_to_g2_is_snarkjs(snarkjs_values, curve):
    for digest, (x, y) in zip(DIGESTS, snarkjs_values[curve.name]):
        P = hash_to_g2(curve, digest)
        assert [[str(c) for c in P[0]], [str(c) for c in P[1]]] == [x, y], digest.hex()
        assert curve.G2.mul(P, curve.r) is None  # in the order-r group: the cofactor was applied


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_wasm_sub_affine_is_ffjavascripts_even_on_unreduced_coordinates(snarkjs_values, curve):
    L = curve.Fq.limbs32
    for (a, b), expected in zip(DIFFERENCES[curve.name], snarkjs_values[f"{curve.name} sub"]):
        P = wasm_sub_affine(curve, np.frombuffer(a, "<u4").reshape(2, L), g1_from_bytes(curve, b))
        assert g1_to_uncompressed(curve, P).hex() == expected, a.hex()


def test_chacha_seed_is_eight_words():
    with pytest.raises(ValueError):
        ChaCha((1, 2, 3))
    with pytest.raises(ValueError):
        ChaCha((1 << 32,) + (0,) * 7)


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_fq2_sqrt(curve):
    F2, rng = curve.Fq2, random.Random(5)
    non_squares = 0
    for _ in range(20):
        a = (rng.randrange(curve.q), rng.randrange(curve.q))
        root = F2.sqrt(F2.sqr(a))
        assert F2.eq(F2.sqr(root), F2.sqr(a))
        b = (rng.randrange(curve.q), rng.randrange(curve.q))
        root = F2.sqrt(b)
        if root is None:  # then b's norm is not a square in Fq
            non_squares += 1
            assert pow((b[0] ** 2 + b[1] ** 2) % curve.q, (curve.q - 1) // 2, curve.q) == curve.q - 1
        else:
            assert F2.eq(F2.sqr(root), b)
    assert 0 < non_squares < 20
    assert F2.sqrt(F2.zero) == F2.zero and F2.eq(F2.sqr(F2.sqrt((curve.q - 1, 0))), (curve.q - 1, 0))


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_uncompressed_points_are_the_reference_encoding(curve):
    G1, G2 = curve.G1, curve.G2
    g1 = [G1.mul(G1.generator, k) for k in (1, 2, 12345)] + [None]
    g2 = [None] + [G2.mul(G2.generator, k) for k in (3, 7)]
    L = curve.Fq.limbs32
    rows1 = np.frombuffer(b"".join(g1_to_bytes(curve, P) for P in g1), "<u4").reshape(-1, 2, L)
    rows2 = np.frombuffer(b"".join(g2_to_bytes(curve, P) for P in g2), "<u4").reshape(-1, 2, 2, L)
    assert uncompressed_points(curve, rows1) == b"".join(g1_to_uncompressed(curve, P) for P in g1)
    assert uncompressed_points(curve, rows2) == b"".join(g2_to_uncompressed(curve, P) for P in g2)
    assert g1_to_uncompressed(curve, G1.generator)[: curve.Fq.n8] == G1.generator[0].to_bytes(curve.Fq.n8, "big")
    assert g2_to_uncompressed(curve, G2.generator)[: curve.Fq.n8] == G2.generator[0][1].to_bytes(curve.Fq.n8, "big")  # x.c1 first


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_contribution_proves_knowledge_of_delta(curve):
    delta, cs_hash = 0xC0FFEE, hashlib.blake2b(b"circuit", digest_size=64).digest()
    c = contribution(curve, delta, "me", cs_hash)
    G1, G2 = curve.G1, curve.G2
    assert c.delta_after == G1.mul(G1.generator, delta) and c.g1_sx == G1.mul(c.g1_s, delta)
    assert c.transcript == hashlib.blake2b(cs_hash + g1_to_uncompressed(curve, c.g1_s) + g1_to_uncompressed(curve, c.g1_sx), digest_size=64).digest()
    assert c.g2_spx == G2.mul(hash_to_g2(curve, c.transcript), delta)
    assert (c.type, c.name) == (0, "me")
    assert contribution(curve, delta, "me", cs_hash).g1_s != c.g1_s  # s is fresh each time
