"""circom circuits of many shapes, compiled here by circom 2.2 (the circom2 npm package of tests/oracle) and proved
from their inputs: cuzk's witness is snarkjs's byte for byte (circom's own calculator's for bus inputs, which snarkjs
0.7.6 refuses), the keys cuzk sets up prove with snarkjs too, cuzk's proofs verify with snarkjs, and bad inputs are
one error each, naming the signal or the template.

The shapes are the ones a fixed corpus misses: no public signal, 600 public signals, a 2-D public array, an input no
constraint uses, only linear constraints (and --O2 substituting a private input away), no constraint at all, hints
checked by ===, circom asserts, circomlib's gadgets, circom 2.2 buses, the BLS12-381 prime; 2-D and 3-D inputs written
flattened, in hex and negative; circom 2.1 tags and anonymous components; exactly one constraint; rows landing exactly on
a power of two and one above it; --O2 leaving no constraint and no private wire. Marked slow (`-m slow`): an
EdDSA-Poseidon signature check, Baby Jubjub and the rest of circomlib's gadgets, a domain of exactly 2^16, 2^15 input
values, --O0. circom's other primes (goldilocks, pallas, ...) are refused, naming the prime, by every command that
meets one.

Where circom2 is missing (the GPU machine has no node), $CUZK_CIRCOM_BUILD names a folder this module filled where it
is installed (run it there with the variable set, and with -m slow for the slow cases too: a case is compiled at its
first use): the GPU tests prove from those builds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO, SNARKJS, keep_for_snarkjs_elsewhere, snarkjs_available, snarkjs_verify
from cuzk.cli import main as cli_main
from cuzk.formats.wtns import wtns_bytes
from cuzk.witness import InputError, WitnessCalculator
from test_daemon import snarkjs_verify_all

SOURCES = Path(__file__).parent / "fixtures" / "circom"
ORACLE = REPO / "tests" / "oracle" / "node_modules"
CIRCOM = ORACLE / ".bin" / "circom2"
BN254_R = 21888242871839275222246405745257275088548364400416034343698204186575808495617


@dataclass(frozen=True)
class Case:
    source: Path
    inputs: dict
    public: list[str]  # what the proof's public.json must hold
    flags: tuple[str, ...] = ()
    snarkjs_reads_inputs: bool = True  # False: the calculator to match is circom's own generate_witness.js
    bad: dict[str, tuple[dict, str]] = field(default_factory=dict)  # name → (inputs, start of the error)
    slow: bool = False  # compiled, set up and proved only with -m slow


ARRAYS_INPUT = {"a": [[1, 2, 3, 4], ["5", "0x6", -7, "8"], [9, 10, 11, "21888242871839275222246405745257275088548364400416034343698204186575808495616"]],
                "k": "3", "unused": 42}

DIMS_B = [[[i + 4 * j + 12 * k for i in range(4)] for j in range(3)] for k in range(2)]
DIMS_INPUT = {"a": [["0x1", -2, " 3 "], [4, "0X05", "+6"]],  # hex, negative, signed and padded strings
              "b": [str(x) for row in DIMS_B for col in row for x in col]}  # 3-D, given flat, as snarkjs allows
DIMS_PUBLIC = [str(a * sum(DIMS_B[i][j]) % BN254_R) for i, row in enumerate([[1, -2, 3], [4, 5, 6]]) for j, a in enumerate(row)] \
    + DIMS_INPUT["b"]
# A real EdDSA-Poseidon signature of M (Baby Jubjub, circomlib's scheme): private key 0x1234567890abcdef1234567890abcdef,
# nonce 0xfedcba0987654321fedcba; S·B8 = R8 + 8·Poseidon(R8, A, M)·A checked in Python when it was made.
EDDSA_INPUT = {"Ax": "8030844503787425640529868608229587850237505664137890566782319253289729210358",
               "Ay": "2253969918754873096340048490283349666794221245292707591772826348641323802837",
               "S": "2627665234956623973344057101799551457913074239284942609566708861776756487918",
               "R8x": "10129745842985705456253604493561746531719688564320627227013318924869402573513",
               "R8y": "20889633060209202080415441785000399790530648526485338213402961238457971232061", "M": "1234567"}
BABYJUB_ORDER = 2736030358979909402780800718157159386076813972158567259200215660948447373041  # B8's subgroup


def _chain(n: int, x: int, w: int) -> list[str]:
    """domain_*.circom's public signals: y (t[0] = x·w, t[i] = t[i-1]² + i), then x."""
    t = x * w % BN254_R
    for i in range(1, n):
        t = (t * t + i) % BN254_R
    return [str(t), str(x)]


CASES = {
    "no_public": Case(SOURCES / "no_public.circom", {"a": 3, "b": "5"}, [],
                      bad={"unknown signal": ({"a": 3, "b": 5, "c": 1}, "input 'c' is not an input signal of the circuit")}),
    "arrays": Case(SOURCES / "arrays.circom", ARRAYS_INPUT, None,  # public: outputs first, then a (row-major), k
                   bad={"short row": ({**ARRAYS_INPUT, "a": [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11]]},
                                      "input 'a' has 11 values; the circuit's signal takes 12"),
                        "missing": ({"a": ARRAYS_INPUT["a"], "k": 3}, "inputs missing: the circuit takes 14 input values, the input sets 13"),
                        "not a number": ({**ARRAYS_INPUT, "k": "three"}, "input k: 'three' is not an integer")}),
    "many_public": Case(SOURCES / "many_public.circom", {"x": [str(i * i + 1) for i in range(300)]},
                        [str((i * i + 1) ** 2) for i in range(300)] + [str(i * i + 1) for i in range(300)]),
    "linear": Case(SOURCES / "linear.circom", {"a": 10, "b": -3}, ["14", "33", "10"]),
    "linear_o2": Case(SOURCES / "linear.circom", {"a": 10, "b": -3}, ["14", "33", "10"], flags=("--O2",)),
    "unconstrained": Case(SOURCES / "unconstrained.circom", {"a": 5}, ["15", "5"]),
    "inverse": Case(SOURCES / "inverse.circom", {"a": 7}, [str(pow(7, -1, BN254_R)), "7"],
                    bad={"=== broken": ({"a": 0}, "the circuit rejects the input: assert failed: Error in template Inverse_0 line: 3"),
                         "assert": ({"a": 1000}, "the circuit rejects the input: assert failed: Error in template Inverse_0 line: 3")}),
    "circomlib": Case(SOURCES / "circomlib.circom", {"x": [1, 2, 3, 4, 5], "lo": 17, "hi": "18446744073709551615"}, None,
                      flags=("-l", str(ORACLE)),
                      bad={"beyond 64 bits": ({"x": [1, 2, 3, 4, 5], "lo": 17, "hi": str(1 << 64)},
                                              "the circuit rejects the input: assert failed: Error in template Num2Bits")}),
    "bus": Case(Path(__file__).parent / "fixtures" / "witness" / "bus.circom", {"p": [{"x": 3, "y": 5}, {"x": 7, "y": 11}]},
                ["21", "236", "3", "5", "7", "11"], snarkjs_reads_inputs=False),
    "bls_dot": Case(SOURCES / "bls_dot.circom", {"a": list(range(50)), "b": [str(2**200 + i) for i in range(50)]}, None,
                    flags=("--prime", "bls12381")),
    "dims": Case(SOURCES / "dims.circom", DIMS_INPUT, DIMS_PUBLIC,
                 bad={"3-D short": ({**DIMS_INPUT, "b": DIMS_INPUT["b"][:-1]}, "input 'b' has 23 values; the circuit's signal takes 24"),
                      "-0x": ({**DIMS_INPUT, "a": [["-0x1", 2, 3], [4, 5, 6]]}, "input a[0][0]: '-0x1' is not an integer")}),
    "tags": Case(SOURCES / "tags.circom", {"x": 0b101101110001, "y": [2, 3, "-1"]}, None,
                 bad={"beyond 12 bits": ({"x": 4096, "y": [2, 3, 4]},
                                         "the circuit rejects the input: assert failed: Error in template Bits_0 line: 4")}),
    "one_constraint": Case(SOURCES / "one_constraint.circom", {"a": 3, "b": "0x10"}, ["48"]),
    "domain_exact": Case(SOURCES / "domain_exact.circom", {"x": 2, "w": 3}, _chain(61, 2, 3)),
    "domain_above": Case(SOURCES / "domain_above.circom", {"x": 2, "w": 3}, _chain(62, 2, 3)),
    "zero_o2": Case(SOURCES / "zero_o2.circom", {"a": 1, "b": 2}, ["4"], flags=("--O2",)),
    "linear_o0": Case(SOURCES / "linear.circom", {"a": 10, "b": -3}, ["14", "33", "10"], flags=("--O0",), slow=True),
    "eddsa_poseidon": Case(SOURCES / "eddsa_poseidon.circom", EDDSA_INPUT, [EDDSA_INPUT[k] for k in ("Ax", "Ay", "M")],
                           flags=("-l", str(ORACLE)), slow=True,
                           bad={"another message": ({**EDDSA_INPUT, "M": "1234568"},
                                                    "the circuit rejects the input: assert failed: Error in template ForceEqualIfEnabled"),
                                "S beyond the subgroup": ({**EDDSA_INPUT, "S": str(int(EDDSA_INPUT["S"]) + BABYJUB_ORDER)},
                                                          "the circuit rejects the input: assert failed: Error in template EdDSAPoseidonVerifier")}),
    "babyjub": Case(SOURCES / "babyjub.circom", {"s": "1234567890123456789012345678901234567890", "m": [12345, "0x2a", 7, -1], "sel": 13},
                    None, flags=("-l", str(ORACLE)), slow=True,
                    bad={"sel beyond 4 bits": ({"s": 5, "m": [1, 2, 3, 4], "sel": 16},
                                               "the circuit rejects the input: assert failed: Error in template Num2Bits")}),
    "domain_2e16": Case(SOURCES / "domain_2e16.circom", {"x": 2, "w": 3}, _chain(65533, 2, 3), slow=True),
    "many_inputs": Case(SOURCES / "many_inputs.circom", {"x": [str(i * 7919 % 1000003 + 1) for i in range(1 << 15)]}, None, slow=True),
}
FAST = [name for name, case in CASES.items() if not case.slow]


def _cases() -> list:
    """Every case's name as a parameter, the slow ones marked slow."""
    return [pytest.param(name, marks=pytest.mark.slow) if case.slow else name for name, case in CASES.items()]


def _build_dir(tmp_path_factory) -> Path:
    chosen = os.environ.get("CUZK_CIRCOM_BUILD")
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)
    return tmp_path_factory.mktemp("circom")


def _compile(source: Path, d: Path, flags=()) -> None:
    """circuit.r1cs, circuit.wasm and witness_calculator/ of ``source`` in ``d``, by circom2."""
    if not CIRCOM.exists():
        pytest.skip("circom2 not installed (npm ci --prefix tests/oracle) and no $CUZK_CIRCOM_BUILD")
    d.mkdir(parents=True, exist_ok=True)
    # circom2 runs in a WASI sandbox that resolves paths below its working directory only: run it from /.
    res = subprocess.run([str(CIRCOM), str(source), "--r1cs", "--wasm", "-o", str(d), *flags],
                         cwd="/", capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    stem = source.stem
    (d / f"{stem}.r1cs").rename(d / "circuit.r1cs")
    (d / f"{stem}_js" / f"{stem}.wasm").rename(d / "circuit.wasm")
    (d / "witness_calculator").mkdir(exist_ok=True)
    for js in (d / f"{stem}_js").iterdir():
        js.rename(d / "witness_calculator" / js.name)
    (d / f"{stem}_js").rmdir()


class _Builds(dict):
    """Each case's build folder (circuit.r1cs, circuit.wasm, input.json), compiled at its first use (or found built),
    so a run that deselects the slow cases never compiles them."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def __missing__(self, name: str) -> Path:
        case, d = CASES[name], self.root / name
        if not (d / "circuit.wasm").exists():
            _compile(case.source, d, case.flags)
        (d / "input.json").write_text(json.dumps(case.inputs))
        self[name] = d
        return d


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    return _Builds(_build_dir(tmp_path_factory))


def _reference_wtns(case: Case, d: Path, out: Path) -> bytes:
    """The .wtns of the calculator users compare with: snarkjs's, or circom's generate_witness.js for bus inputs."""
    if case.snarkjs_reads_inputs:
        argv = [str(SNARKJS), "wtns", "calculate", str(d / "circuit.wasm"), str(d / "input.json"), str(out)]
    else:
        argv = ["node", str(d / "witness_calculator" / "generate_witness.js"), str(d / "circuit.wasm"), str(d / "input.json"), str(out)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return out.read_bytes()


@pytest.mark.parametrize("name", _cases())
def test_witness_is_the_reference_calculators(name, built, tmp_path):
    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed")
    case, d = CASES[name], built[name]
    calculator = WitnessCalculator(d / "circuit.wasm")
    ours = wtns_bytes(calculator.curve, calculator.calculate(case.inputs))
    assert ours == _reference_wtns(case, d, tmp_path / "reference.wtns")


@pytest.mark.parametrize("name, bad", [pytest.param(name, bad, marks=[pytest.mark.slow] * case.slow)
                                       for name, case in CASES.items() for bad in case.bad])
def test_bad_inputs_name_what_is_wrong(name, bad, built):
    inputs, message = CASES[name].bad[bad]
    with pytest.raises(InputError) as exc:
        WitnessCalculator(built[name] / "circuit.wasm").calculate(inputs)
    assert str(exc.value).startswith(message), str(exc.value)


class _Keys(dict):
    """A test-only key per case, by cuzk setup at its first use: (zkey, verification key)."""

    def __init__(self, built: _Builds):
        super().__init__()
        self.built = built

    def __missing__(self, name: str) -> tuple[Path, Path]:
        d = self.built[name]
        zkey, vkey = d / "circuit.zkey", d / "verification_key.json"
        if not zkey.exists():
            assert cli_main(["setup", str(d / "circuit.r1cs"), str(zkey), "--vkey", str(vkey), "-q"]) == 0
        self[name] = zkey, vkey
        return zkey, vkey


@pytest.fixture(scope="module")
def keys(built) -> dict[str, tuple[Path, Path]]:
    return _Keys(built)


def _fullprove_and_check(name: str, built, keys, tmp_path: Path, backend: str) -> None:
    case, d = CASES[name], built[name]
    zkey, vkey = keys[name]
    proof, public = tmp_path / "proof.json", tmp_path / "public.json"
    assert cli_main(["fullprove", "--local", "--backend", backend, "-q", str(d / "input.json"), str(d / "circuit.wasm"),
                     str(zkey), str(proof), str(public)]) == 0
    if case.public is not None:
        assert json.loads(public.read_text()) == case.public
    assert cli_main(["verify", str(vkey), str(public), str(proof)]) == 0
    assert snarkjs_verify(vkey, public, proof)


@pytest.mark.parametrize("name", _cases())
def test_proofs_from_inputs_verify_with_snarkjs(name, built, keys, tmp_path):
    _fullprove_and_check(name, built, keys, tmp_path, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("name", _cases())
def test_proofs_from_inputs_verify_with_snarkjs_on_the_gpu(name, built, keys, tmp_path):
    _fullprove_and_check(name, built, keys, tmp_path, "cuda")


@pytest.mark.parametrize("name", ["arrays", "unconstrained", "linear_o2", "bls_dot", "zero_o2", "domain_above"])
def test_snarkjs_proves_with_the_keys_cuzk_sets_up(name, built, keys, tmp_path):
    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed")
    d, (zkey, vkey) = built[name], keys[name]
    wtns, proof, public = tmp_path / "w.wtns", tmp_path / "proof.json", tmp_path / "public.json"
    assert cli_main(["wtns", "calculate", str(d / "circuit.wasm"), str(d / "input.json"), str(wtns)]) == 0
    res = subprocess.run([str(SNARKJS), "groth16", "prove", str(zkey), str(wtns), str(proof), str(public)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert cli_main(["verify", str(vkey), str(public), str(proof)]) == 0


def _engine_proves_them_all(built, keys, tmp_path: Path, backend: str) -> None:
    """One engine with every key registered with its .wasm: all inputs submitted at once, each proof checked by
    snarkjs; every bad input refused at submit, naming what is wrong, while the others prove."""
    from cuzk.engine import Engine, EngineConfig
    from cuzk.engine.jobs import JobState

    engine = Engine(EngineConfig(data_dir=tmp_path / "data", backend=backend, reconcile=False, measure_peaks=False))
    for name in FAST:
        engine.register_key(name, keys[name][0], wasm_path=built[name] / "circuit.wasm")
    engine.start()
    try:
        jobs = {name: engine.submit_input(name, CASES[name].inputs) for name in FAST}
        for name in FAST:
            for inputs, message in CASES[name].bad.values():
                with pytest.raises(InputError, match="^" + re.escape(message)):
                    engine.submit_input(name, inputs)
        records = {name: engine.await_result(job, timeout=600) for name, job in jobs.items()}
    finally:
        engine.stop()
    for name, record in records.items():
        assert record.state is JobState.DONE, (name, record.error)
        if CASES[name].public is not None:
            assert record.public_signals == CASES[name].public
        proof, public = tmp_path / f"{name}.proof.json", tmp_path / f"{name}.public.json"
        proof.write_text(json.dumps(record.proof))
        public.write_text(json.dumps(record.public_signals))
        assert cli_main(["verify", str(keys[name][1]), str(public), str(proof)]) == 0
    triples = [(keys[name][1], tmp_path / f"{name}.public.json", tmp_path / f"{name}.proof.json") for name in records]
    if not snarkjs_available():
        for triple in triples:
            keep_for_snarkjs_elsewhere(*triple)
        pytest.skip("snarkjs oracle not installed: the proofs are kept for scripts/verify_unverified.sh")
    assert snarkjs_verify_all(triples) == [True] * len(triples)

def test_an_engine_proves_them_all_from_inputs(built, keys, tmp_path):
    _engine_proves_them_all(built, keys, tmp_path, "cpu")


@pytest.mark.gpu
def test_an_engine_proves_them_all_from_inputs_on_the_gpu(built, keys, tmp_path):
    _engine_proves_them_all(built, keys, tmp_path, "cuda")


@pytest.mark.parametrize("prime", ["goldilocks", "secq256r1", *(pytest.param(p, marks=pytest.mark.slow)
                                                                 for p in ("grumpkin", "pallas", "vesta", "bls12377"))])
def test_circoms_other_primes_are_refused_naming_them(prime, built, keys, tmp_path, capsys):
    """A circuit compiled for a prime of no pairing curve snarkjs (or cuzk) proves over: `wtns calculate`, `fullprove`
    and `setup` each refuse it in one line naming circom's --prime, and write nothing; so does `prove`, given the witness
    snarkjs calculates for it."""
    d = tmp_path / prime
    _compile(SOURCES / "other_prime.circom", d, ("--prime", prime))
    (d / "input.json").write_text(json.dumps({"a": 3, "b": 5}))
    named = f"is circom's --prime {prime}: cuzk proves Groth16 over bn128 (BN254) and bls12381 (BLS12-381) only"
    zkey = keys["one_constraint"][0]
    out = tmp_path / "out"
    out.mkdir()
    commands = {"wtns calculate": ["wtns", "calculate", d / "circuit.wasm", d / "input.json", out / "w.wtns"],
                "fullprove": ["fullprove", "--local", "-q", d / "input.json", d / "circuit.wasm", zkey, out / "p.json", out / "pub.json"],
                "setup": ["setup", "-q", d / "circuit.r1cs", out / "c.zkey"]}
    if snarkjs_available():
        res = subprocess.run([str(SNARKJS), "wtns", "calculate", str(d / "circuit.wasm"), str(d / "input.json"), str(d / "w.wtns")],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        commands["prove"] = ["prove", "--local", "-q", zkey, d / "w.wtns", out / "p.json", out / "pub.json"]
    for what, argv in commands.items():
        capsys.readouterr()
        assert cli_main([str(a) for a in argv]) == 1, what
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and named in err, (what, err)
        assert not any(out.iterdir()), what
