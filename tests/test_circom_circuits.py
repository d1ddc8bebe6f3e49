"""circom circuits of many shapes, compiled here by circom 2.2 (the circom2 npm package of tests/oracle) and proved
from their inputs: cuzk's witness is snarkjs's byte for byte (circom's own calculator's for bus inputs, which snarkjs
0.7.6 refuses), the keys cuzk sets up prove with snarkjs too, cuzk's proofs verify with snarkjs, and bad inputs are
one error each, naming the signal or the template.

The shapes are the ones a fixed corpus misses: no public signal, 600 public signals, a 2-D public array, an input no
constraint uses, only linear constraints (and --O2 substituting a private input away), no constraint at all, hints
checked by ===, circom asserts, circomlib's gadgets, circom 2.2 buses, the BLS12-381 prime.

Where circom2 is missing (the GPU machine has no node), $CUZK_CIRCOM_BUILD names a folder this module filled where it
is installed (run it there with the variable set): the GPU tests prove from those builds.
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


ARRAYS_INPUT = {"a": [[1, 2, 3, 4], ["5", "0x6", -7, "8"], [9, 10, 11, "21888242871839275222246405745257275088548364400416034343698204186575808495616"]],
                "k": "3", "unused": 42}

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
}


def _build_dir(tmp_path_factory) -> Path:
    chosen = os.environ.get("CUZK_CIRCOM_BUILD")
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)
    return tmp_path_factory.mktemp("circom")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Each case's build folder (circuit.r1cs, circuit.wasm, input.json), compiled once per run (or found built)."""
    root, folders = _build_dir(tmp_path_factory), {}
    for name, case in CASES.items():
        d = root / name
        if not (d / "circuit.wasm").exists():
            if not CIRCOM.exists():
                pytest.skip("circom2 not installed (npm ci --prefix tests/oracle) and no $CUZK_CIRCOM_BUILD")
            d.mkdir(exist_ok=True)
            # circom2 runs in a WASI sandbox that resolves paths below its working directory only: run it from /.
            res = subprocess.run([str(CIRCOM), str(case.source), "--r1cs", "--wasm", "-o", str(d), *case.flags],
                                 cwd="/", capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stdout + res.stderr
            stem = case.source.stem
            (d / f"{stem}.r1cs").rename(d / "circuit.r1cs")
            (d / f"{stem}_js" / f"{stem}.wasm").rename(d / "circuit.wasm")
            (d / "witness_calculator").mkdir(exist_ok=True)
            for js in (d / f"{stem}_js").iterdir():
                js.rename(d / "witness_calculator" / js.name)
            (d / f"{stem}_js").rmdir()
        (d / "input.json").write_text(json.dumps(case.inputs))
        folders[name] = d
    return folders


def _reference_wtns(case: Case, d: Path, out: Path) -> bytes:
    """The .wtns of the calculator users compare with: snarkjs's, or circom's generate_witness.js for bus inputs."""
    if case.snarkjs_reads_inputs:
        argv = [str(SNARKJS), "wtns", "calculate", str(d / "circuit.wasm"), str(d / "input.json"), str(out)]
    else:
        argv = ["node", str(d / "witness_calculator" / "generate_witness.js"), str(d / "circuit.wasm"), str(d / "input.json"), str(out)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return out.read_bytes()


@pytest.mark.parametrize("name", CASES)
def test_witness_is_the_reference_calculators(name, built, tmp_path):
    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed")
    case, d = CASES[name], built[name]
    calculator = WitnessCalculator(d / "circuit.wasm")
    ours = wtns_bytes(calculator.curve, calculator.calculate(case.inputs))
    assert ours == _reference_wtns(case, d, tmp_path / "reference.wtns")


@pytest.mark.parametrize("name, bad", [(name, bad) for name, case in CASES.items() for bad in case.bad])
def test_bad_inputs_name_what_is_wrong(name, bad, built):
    inputs, message = CASES[name].bad[bad]
    with pytest.raises(InputError) as exc:
        WitnessCalculator(built[name] / "circuit.wasm").calculate(inputs)
    assert str(exc.value).startswith(message), str(exc.value)


@pytest.fixture(scope="module")
def keys(built) -> dict[str, tuple[Path, Path]]:
    """A test-only key per case, by cuzk setup: (zkey, verification key)."""
    made = {}
    for name, d in built.items():
        zkey, vkey = d / "circuit.zkey", d / "verification_key.json"
        if not zkey.exists():
            assert cli_main(["setup", str(d / "circuit.r1cs"), str(zkey), "--vkey", str(vkey), "-q"]) == 0
        made[name] = zkey, vkey
    return made


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


@pytest.mark.parametrize("name", CASES)
def test_proofs_from_inputs_verify_with_snarkjs(name, built, keys, tmp_path):
    _fullprove_and_check(name, built, keys, tmp_path, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
def test_proofs_from_inputs_verify_with_snarkjs_on_the_gpu(name, built, keys, tmp_path):
    _fullprove_and_check(name, built, keys, tmp_path, "cuda")


@pytest.mark.parametrize("name", ["arrays", "unconstrained", "linear_o2", "bls_dot"])
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
    for name, d in built.items():
        engine.register_key(name, keys[name][0], wasm_path=d / "circuit.wasm")
    engine.start()
    try:
        jobs = {name: engine.submit_input(name, case.inputs) for name, case in CASES.items()}
        for name, case in CASES.items():
            for inputs, message in case.bad.values():
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
