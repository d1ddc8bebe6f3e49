"""Witnesses from inputs: circom's .wasm run in wasmtime must give snarkjs's .wtns byte for byte, and refuse
what snarkjs refuses (and only that), each refusal naming the signal or the circuit's template."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import CORPUS_CIRCUITS, SNARKJS, corpus_dir, load_json, snarkjs_available, snarkjs_verify
from cuzk.cli import main as cli_main
from cuzk.formats.errors import FormatError
from cuzk.formats.wtns import write_wtns
from cuzk.witness import InputError, WitnessCalculator, parse_input_json
from cuzk.witness.inputs import fnv1a_64

FIXTURES = Path(__file__).parent / "fixtures" / "witness"
CHECKS_WASM = FIXTURES / "checks.wasm"  # grid[2][3], x; assert(x != 13); x*x === grid[0][0]^2
BUS_WASM = FIXTURES / "bus.wasm"  # circom 2.2 buses: input Point() p[2], output Point() out
WASM_CIRCUITS = [c for c in CORPUS_CIRCUITS if (corpus_dir(c) / "circuit.wasm").exists()] if CORPUS_CIRCUITS else []
P = 21888242871839275222246405745257275088548364400416034343698204186575808495617  # BN254's r


@pytest.fixture(scope="module")
def checks() -> WitnessCalculator:
    return WitnessCalculator(CHECKS_WASM)


@pytest.mark.parametrize("circuit", WASM_CIRCUITS or [pytest.param(None, marks=pytest.mark.skip(reason="no corpus"))])
def test_cli_witness_equals_snarkjs_witness_byte_for_byte(circuit, tmp_path):
    d = corpus_dir(circuit)
    out = tmp_path / "w.wtns"
    assert cli_main(["wtns", "calculate", str(d / "circuit.wasm"), str(d / "input.json"), str(out)]) == 0
    assert out.read_bytes() == (d / "witness.wtns").read_bytes()


def test_fullprove_proof_verifies_with_snarkjs(tmp_path):
    d = corpus_dir("toy_multiplier")
    proof, public = tmp_path / "proof.json", tmp_path / "public.json"
    args = [str(d / "input.json"), str(d / "circuit.wasm"), str(d / "circuit.zkey"), str(proof), str(public)]
    assert cli_main(["fullprove", *args, "--backend", "cpu"]) == 0
    assert load_json(public) == load_json(d / "public.json")
    assert snarkjs_verify(d / "verification_key.json", public, proof)


def test_fullprove_bad_input_is_one_line_and_no_files(tmp_path, capsys):
    d = corpus_dir("toy_multiplier")
    bad = tmp_path / "input.json"
    bad.write_text('{"a": 3, "b": 11}')
    proof, public = tmp_path / "proof.json", tmp_path / "public.json"
    assert cli_main(["fullprove", str(bad), str(d / "circuit.wasm"), str(d / "circuit.zkey"), str(proof), str(public)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: inputs missing: the circuit takes 3 input values, the input sets 2") and err.count("\n") == 1
    assert not proof.exists() and not public.exists()


GRID = [[2, 1, 1], [1, 1, 1]]
# Inputs snarkjs accepts, each meaning grid = GRID and x = 2 (read as BigInt(v) mod p).
SAME_AS_PLAIN = {
    "decimal strings": {"grid": [["2", "1", "1"], ["1", "1", "1"]], "x": "2"},
    "hex, octal, binary": {"grid": [["0x2", "0X1", "0o1"], ["0b1", 1, 1]], "x": "0B10"},
    "blanks and a sign": {"grid": [[" 2\n", 1, 1], [1, 1, 1]], "x": "+2"},
    "true is 1": {"grid": [[2, True, 1], [1, 1, 1]], "x": 2},
    "integral floats": {"grid": [[2.0, 1, 1], [1, 1, 1]], "x": 2e0},
    "one flat list": {"grid": [2, 1, 1, 1, 1, 1], "x": 2},
}
# Inputs whose field elements differ from the plain ones but that snarkjs accepts.
ACCEPTED_OTHER = {
    "negatives wrap to p - v": {"grid": [[-2, 1, 1], [1, 1, 1]], "x": "-2"},
    "empty string is 0": {"grid": [["", 1, 1], [1, 1, 1]], "x": 0},
    "unknown signal with no values": {"grid": GRID, "x": 2, "unused": []},
}
# Inputs snarkjs accepts but proves another value for than the one written: refused here (test_acceptance_matches_snarkjs
# checks that snarkjs does accept them).
REFUSED_THOUGH_SNARKJS_ACCEPTS = {
    "value past p": ({"grid": [[str(P + 2), 1, 1], [1, 1, 1]], "x": 2}, f"input grid[0][0]: {P + 2} is outside the circuit's field"),
    "negative past -p": ({"grid": GRID, "x": str(-P - 2)}, f"input x: {-P - 2} is outside the circuit's field"),
    "hex past p": ({"grid": GRID, "x": hex(P + 2)}, f"input x: {P + 2} is outside the circuit's field"),
}
REJECTED = {
    "missing signal": ({"grid": GRID}, "inputs missing: the circuit takes 7 input values, the input sets 6 (signals given: 'grid')"),
    "unknown signal": ({"grid": GRID, "x": 2, "y": 1}, "input 'y' is not an input signal of the circuit"),
    "too few values": ({"grid": [[2, 1, 1], [1, 1]], "x": 2}, "input 'grid' has 5 values; the circuit's signal takes 6"),
    "too many values": ({"grid": [[2, 1, 1], [1, 1, 1, 1]], "x": 2}, "input 'grid' has 7 values; the circuit's signal takes 6"),
    "scalar for an array": ({"grid": 2, "x": 2}, "input 'grid' has 1 value; the circuit's signal takes 6"),
    "fraction": ({"grid": [[2.5, 1, 1], [1, 1, 1]], "x": 2}, "input grid[0][0]: 2.5 is not an integer"),
    "null": ({"grid": GRID, "x": None}, "input x: a null is not a field element"),
    "object": ({"grid": [[2, {"v": 1}, 1], [1, 1, 1]], "x": 2}, "input grid[0][1]: a JSON object is not a field element"),
    "exponent string": ({"grid": GRID, "x": "2e0"}, "input x: '2e0' is not an integer"),
    "signed hex": ({"grid": [[2, 1, 1], [1, "-0x1", 1]], "x": 2}, "input grid[1][1]: '-0x1' is not an integer"),
    "circom assert": ({"grid": [[13, 1, 1], [1, 1, 1]], "x": 13},
                      "the circuit rejects the input: assert failed: Error in template Checks_0 line: 16"),
    "broken ===": ({"grid": [[3, 1, 1], [1, 1, 1]], "x": 2},
                   "the circuit rejects the input: assert failed: Error in template Checks_0 line: 19"),
}


def test_accepted_spellings_give_the_plain_witness(checks):
    plain = checks.calculate({"grid": GRID, "x": 2})
    for name, doc in SAME_AS_PLAIN.items():
        assert np.array_equal(checks.calculate(doc), plain), name


def test_negative_inputs_wrap_modulo_p(checks):
    w = checks.calculate(ACCEPTED_OTHER["negatives wrap to p - v"])
    public_x = int.from_bytes(w[2].tobytes(), "little")  # wire 1 = sum, wire 2 = x
    assert public_x == P - 2


@pytest.mark.parametrize("name", [*REJECTED, *REFUSED_THOUGH_SNARKJS_ACCEPTS])
def test_rejected_inputs_name_what_is_wrong(checks, name):
    doc, message = {**REJECTED, **REFUSED_THOUGH_SNARKJS_ACCEPTS}[name]
    with pytest.raises(InputError) as exc:
        checks.calculate(doc)
    assert str(exc.value).startswith(message)


@pytest.mark.parametrize("deep, message", [
    ("[" * 65 + "2" + "]" * 65, "input x: arrays nested more than 64 deep"),
    ('{"y": ' * 65 + "2" + "}" * 65, "input x: buses or arrays nested more than 64 deep"),
])
def test_inputs_nested_past_any_circuits_are_refused(checks, deep, message):
    """Nesting JSON's parser takes but no circuit has (Python's recursion would give out first): refused by name."""
    with pytest.raises(InputError) as exc:
        checks.calculate(parse_input_json('{"grid": [[2, 1, 1], [1, 1, 1]], "x": ' + deep + "}"))
    assert str(exc.value) == message


def test_json_number_beyond_2_53_is_refused_not_rounded(checks):
    """JavaScript rounds 12345678901234567891 to 12345678901234567168: refused here, with the exact way to write it."""
    with pytest.raises(InputError, match=r'beyond 2\^53.*write it as a string: "12345678901234567891"'):
        checks.calculate(parse_input_json('{"grid": [[12345678901234567891, 1, 1], [1, 1, 1]], "x": 2}'))


def test_numbers_longer_than_python_converts_are_the_inputs_errors(checks):
    """Past 4300 digits int() raises a plain ValueError: it escaped as one not naming the signal (and as an internal
    error from the daemon)."""
    for value, message in [("9" * 5000, "input x: a number of 5000 digits is outside the circuit's field"),
                           ("0x" + "f" * 5000, "input x: a 20000-bit number is outside the circuit's field")]:
        with pytest.raises(InputError) as exc:
            checks.calculate({"grid": GRID, "x": value})
        assert str(exc.value).startswith(message)
    with pytest.raises(InputError, match="^input: holds a number of thousands of digits, longer than any field element$"):
        parse_input_json('{"x": ' + "1" * 5000 + "}")


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "input: must be a JSON object of signal name → value, not a JSON array"),
    ('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "input: arrays or objects nested more than 200 deep: not circuit inputs"),
    ('{"x": NaN}', "input: NaN is not JSON"),
    ('{"x": ', "input: not JSON"),
    (b'{"x": "\xff"}', "input: not UTF-8"),
])
def test_input_document_errors(text, message):
    with pytest.raises(InputError) as exc:
        parse_input_json(text)
    assert str(exc.value).startswith(message)


def test_deep_nesting_is_refused_before_parsing_whatever_the_recursion_limit():
    """py_ecc raises the recursion limit to 100,000, past what the C stack holds: json's C parser then crashed the
    process on a document nested that deep (it did in the full suite) instead of raising RecursionError."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 200_000))
    try:
        with pytest.raises(InputError, match="nested more than 200 deep"):
            parse_input_json('{"x": ' + "[" * 150_000 + "]" * 150_000 + "}")
    finally:
        sys.setrecursionlimit(limit)


def _snarkjs_wtns(tmp_path: Path, doc) -> bytes | None:
    """snarkjs's witness for ``doc`` on the fixture circuit, or None when snarkjs refuses it."""
    inp, out = tmp_path / "input.json", tmp_path / "snarkjs.wtns"
    inp.write_text(json.dumps(doc))
    out.unlink(missing_ok=True)
    res = subprocess.run([str(SNARKJS), "wtns", "calculate", str(CHECKS_WASM), str(inp), str(out)], capture_output=True, timeout=120)
    return out.read_bytes() if res.returncode == 0 and out.exists() else None


@pytest.mark.skipif(not snarkjs_available(), reason="snarkjs oracle not installed")
def test_acceptance_matches_snarkjs(checks, tmp_path):
    """Every accepted spelling gives snarkjs's bytes; everything refused here snarkjs refuses too, but the values it
    would prove changed (out of the field: reduced modulo p), which it accepts."""
    ours = tmp_path / "cuzk.wtns"
    for name, doc in {"plain": {"grid": GRID, "x": 2}, **SAME_AS_PLAIN, **ACCEPTED_OTHER}.items():
        write_wtns(ours, checks.curve, checks.calculate(doc))
        assert _snarkjs_wtns(tmp_path, doc) == ours.read_bytes(), name
    for name, (doc, _) in REJECTED.items():
        assert _snarkjs_wtns(tmp_path, doc) is None, name
    for name, (doc, _) in REFUSED_THOUGH_SNARKJS_ACCEPTS.items():
        assert _snarkjs_wtns(tmp_path, doc) is not None, name


def test_bus_inputs_are_named_as_circoms_own_calculator_names_them(tmp_path):
    """A bus given as nested objects is its fields' signals (p[0].x, ...): circom's generate_witness.js's bytes."""
    calc = WitnessCalculator(BUS_WASM)
    doc = {"p": [{"x": 3, "y": 5}, {"x": 7, "y": 11}]}
    ours = tmp_path / "bus.wtns"
    write_wtns(ours, calc.curve, calc.calculate(doc))
    assert ours.read_bytes() == (FIXTURES / "bus.wtns").read_bytes()
    by_name = {"p[0].x": 3, "p[0].y": 5, "p[1]": {"x": 7, "y": 11}}  # the same signals, partly by their full names
    assert np.array_equal(calc.calculate(by_name), calc.calculate(doc))
    out_x, out_y = (int.from_bytes(w.tobytes(), "little") for w in calc.calculate(doc)[1:3])
    assert (out_x, out_y) == (3 * 7, 5 + 11 * 3 * 7)


def test_log_lines_are_circoms_and_the_cli_prints_them_as_snarkjs_does(tmp_path, capfd):
    lines = []
    WitnessCalculator(BUS_WASM).calculate({"p": [{"x": 3, "y": 5}, {"x": 7, "y": 11}]}, log=lines.append)
    assert lines == [f"r = 21 236 p.x - q.x = {P - 4}"]  # as circom's generate_witness.js prints it
    inp, out = tmp_path / "input.json", tmp_path / "w.wtns"
    inp.write_text(json.dumps({"grid": GRID, "x": 2}))
    assert cli_main(["wtns", "calculate", str(CHECKS_WASM), str(inp), str(out)]) == 0
    printed = capfd.readouterr().out
    assert printed == "sum 11\n"
    if snarkjs_available():
        res = subprocess.run([str(SNARKJS), "wtns", "calculate", str(CHECKS_WASM), str(inp), str(tmp_path / "s.wtns")],
                             capture_output=True, text=True, timeout=120)
        assert res.stdout == printed


@pytest.mark.parametrize("doc, message", [
    ({"p": [{"x": 3, "y": 5}, {"x": 7}]}, "inputs missing: the circuit takes 4 input values, the input sets 3 "
                                          "(signals given: 'p[0].x', 'p[0].y', 'p[1].x')"),
    ({"p": [{"x": 3, "y": 5}, {"x": 7, "y": 11, "z": 1}]}, "input 'p[1].z' is not an input signal of the circuit"),
    ({"p": [{"x": 3, "y": 5}, 7]}, "input p[0]: a JSON object is not a field element"),
    ({"p": [{"x": 3, "y": 5}, {"x": 7, "y": "seven"}]}, "input p[1].y: 'seven' is not an integer"),
])
def test_bad_bus_inputs_name_the_field(doc, message):
    with pytest.raises(InputError) as exc:
        WitnessCalculator(BUS_WASM).calculate(doc)
    assert str(exc.value).startswith(message)


def test_concurrent_calculations_keep_their_own_results_and_errors(checks):
    """Each calculation has its own instance: threads mixing good and failing inputs each get their own outcome."""
    good = checks.calculate({"grid": GRID, "x": 2})
    outcomes: dict[int, object] = {}

    def run(i: int) -> None:
        doc = {"grid": GRID, "x": 2} if i % 2 else REJECTED["circom assert"][0]
        try:
            outcomes[i] = checks.calculate(doc)
        except InputError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, outcome in outcomes.items():
        if i % 2:
            assert np.array_equal(outcome, good)
        else:
            assert isinstance(outcome, InputError) and "line: 16" in str(outcome)
    assert len(outcomes) == 8


def test_inputs_are_set_by_one_call_per_signal_not_per_value(checks, monkeypatch):
    """A value set from Python costs two wasmtime calls (~45 µs: 3 s for 65,536 input values, 10× snarkjs); the values
    of a signal go in at once, set inside WebAssembly (SET_INPUTS_WAT). The witness is the one value by value gives."""
    from cuzk.witness import wasm

    calls: list[str] = []
    call_export = wasm._Run.call_export
    monkeypatch.setattr(wasm._Run, "call_export", lambda run, func, name, *args: (calls.append(name), call_export(run, func, name, *args))[1])
    w = checks.calculate({"grid": GRID, "x": 2})  # 6 + 1 values
    assert calls.count("setInputSignal") == 2 and "writeSharedRWMemory" not in calls, calls
    monkeypatch.undo()
    run = wasm._Run(checks)
    run.call("init", 0)
    for name, values in (("grid", [v for row in GRID for v in row]), ("x", [2])):
        h = wasm.fnv1a_64(name)
        for i, value in enumerate(values):  # circom_runtime's witness_calculator.js, value by value
            for j in range(checks.n32):
                run.call("writeSharedRWMemory", j, wasm._i32(value >> (32 * j) & 0xFFFFFFFF))
            run.call("setInputSignal", wasm._i32(h >> 32), wasm._i32(h & 0xFFFFFFFF), i)
    assert np.array_equal(run.witness(checks.witness_size, checks.n32), w)

def test_not_a_witness_generator(tmp_path):
    junk = tmp_path / "junk.wasm"
    junk.write_bytes(b"not wasm at all")
    with pytest.raises(FormatError, match="not a WebAssembly module"):
        WitnessCalculator(junk)
    empty = tmp_path / "empty.wasm"
    empty.write_bytes(b"\0asm\1\0\0\0")  # a valid module with nothing in it
    with pytest.raises(FormatError, match="lacks the exports .*getWitness.*not a witness generator of circom 2"):
        WitnessCalculator(empty)
    with pytest.raises(FormatError, match="cannot open"):
        WitnessCalculator(tmp_path / "absent.wasm")
    with pytest.raises(FormatError, match=f"^{tmp_path}: cannot open: Is a directory$"):  # was "[Errno 21] ..."
        WitnessCalculator(tmp_path)


def test_compiled_generators_are_cached_on_disk_for_the_next_process(tmp_path):
    """wasmtime's module cache (under $XDG_CACHE_HOME) holds the compiled generator once a process has used it."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    code = "import sys; from cuzk.witness import WitnessCalculator; WitnessCalculator(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(CHECKS_WASM)], env=env, check=True, timeout=120)
    assert any(p.is_file() for p in (tmp_path / "wasmtime").rglob("*"))


def test_signal_hash_is_circoms_fnv1a():
    # Values from circom_runtime's fnvHash("a") and fnvHash("in").
    assert fnv1a_64("a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64("in") == 0x08B73807B55C4BBE


def test_cli_wtns_calculate_errors_are_one_line(tmp_path, capsys):
    out = tmp_path / "w.wtns"
    assert cli_main(["wtns", "calculate", str(CHECKS_WASM), str(tmp_path / "absent.json"), str(out)]) == 1
    assert capsys.readouterr().err == f"error: {tmp_path / 'absent.json'}: cannot open: No such file or directory\n"
    bad = tmp_path / "input.json"
    bad.write_text('{"grid": [[2, 1, 1], [1, 1, 1]], "x": "two"}')
    assert cli_main(["wtns", "calculate", str(CHECKS_WASM), str(bad), str(out)]) == 1
    assert capsys.readouterr().err == "error: input x: 'two' is not an integer (decimal, or 0x/0o/0b)\n"
    assert not out.exists()
