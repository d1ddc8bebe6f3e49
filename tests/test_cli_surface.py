"""The command line's surface: --version, the JIT cache's place, and the rough edges new users met (issue 17)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib.metadata import version

import pytest

from cuzk.cli import main as cli_main
from cuzk.jit_cache import CACHE_ENV, build_key, cache_dir, use_cache_dir


def test_version_comes_from_the_installed_package(capsys):
    with pytest.raises(SystemExit) as done:
        cli_main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"cuzk {version('cuzk')}\n"


def test_the_jit_cache_is_keyed_by_the_build_and_a_users_choice_wins(tmp_path):
    key = build_key()
    assert key.startswith(version("cuzk") + "-") and cache_dir(tmp_path) == tmp_path / "numba-cache" / key
    # A fresh interpreter: the data directory's folder is used unless NUMBA_CACHE_DIR says otherwise.
    code = ("import sys, os; from cuzk.jit_cache import use_cache_dir; print(use_cache_dir(sys.argv[1])); "
            "import numba; print(numba.config.CACHE_DIR)")
    env = {k: v for k, v in os.environ.items() if k != CACHE_ENV}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(cache_dir(tmp_path))] * 2
    env[CACHE_ENV] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(tmp_path / "mine")] * 2
    # Once numba is imported it has read its configuration: nothing changes, and the caller hears so.
    import numba  # noqa: F401

    saved = os.environ.pop(CACHE_ENV)
    try:
        assert use_cache_dir(tmp_path) is None and CACHE_ENV not in os.environ
    finally:
        os.environ[CACHE_ENV] = saved


def test_a_build_retires_the_caches_of_builds_unused_for_two_weeks(tmp_path):
    from cuzk.jit_cache import LAST_USED, RETIRE_AFTER_S, retire_other_builds

    root, now = tmp_path / "numba-cache", time.time()
    folders = {name: root / name for name in ("stale", "stale-unstamped", "recent", "recent-unstamped", "now")}
    for name, folder in folders.items():
        folder.mkdir(parents=True)
        (folder / "kernel.nbc").write_bytes(b"x")
        age = RETIRE_AFTER_S + 60 if name.startswith("stale") else RETIRE_AFTER_S - 3600
        if name.endswith("unstamped"):
            os.utime(folder, (now - age, now - age))
        else:
            (folder / LAST_USED).touch()
            os.utime(folder / LAST_USED, (now - age, now - age))
    (root / "a-file").write_text("not a build")
    retired = retire_other_builds(folders["now"], now=now)
    assert sorted(retired) == [folders["stale"], folders["stale-unstamped"]]
    assert sorted(p.name for p in root.iterdir()) == ["a-file", "now", "recent", "recent-unstamped"]
    assert now - (folders["now"] / LAST_USED).stat().st_mtime < 60 and (folders["now"] / "kernel.nbc").exists()


@pytest.mark.slow
def test_a_daemon_keeps_its_kernels_under_its_data_directory(monkeypatch):
    """Without NUMBA_CACHE_DIR, a daemon compiles cold into <data_dir>/numba-cache/<build> (minutes: slow)."""
    import json
    import urllib.request

    from conftest import wait_for
    from test_daemon import DaemonProcess, _healthz

    monkeypatch.delenv(CACHE_ENV)
    daemon = DaemonProcess({})
    try:
        def status():
            return json.loads(urllib.request.urlopen(f"http://{daemon.http}/status", timeout=10).read())["server"]

        wait_for(lambda: status()["state"] == "serving", 1800, "the cold JIT warm-up")
        assert _healthz(daemon) == (200, "serving") and status()["warmup"]["error"] is None
        assert any((daemon.data_dir / "numba-cache" / build_key()).rglob("*.nbi"))
    finally:
        daemon.stop()
        daemon.cleanup()


EXAMPLE = __import__("cuzk.bench.workload", fromlist=["example_dir"]).example_dir()


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_output_paths_are_checked_before_anything_is_read(tmp_path, capsys):
    missing_dir = tmp_path / "no" / "proof.json"
    # The key does not exist either: the output's error comes first, so nothing was computed.
    assert cli_main(["prove", str(tmp_path / "none.zkey"), str(tmp_path / "none.wtns"), str(missing_dir), str(tmp_path / "p.json")]) == 1
    assert _one_error_line(capsys) == f"error: {missing_dir}: cannot write: no such directory {missing_dir.parent}\n"
    assert cli_main(["prove", str(EXAMPLE / "circuit.zkey"), str(EXAMPLE / "witness.wtns"), str(tmp_path / "p.json"), str(tmp_path)]) == 1
    assert _one_error_line(capsys) == f"error: {tmp_path}: cannot write: it is a directory\n"
    assert not (tmp_path / "p.json").exists()
    assert cli_main(["zkey", "export", "verificationkey", str(EXAMPLE / "circuit.zkey"), str(missing_dir)]) == 1
    assert "cannot write: no such directory" in _one_error_line(capsys)
    assert cli_main(["setup", str(EXAMPLE / "circuit.r1cs"), str(missing_dir.with_suffix(".zkey"))]) == 1
    assert "cannot write: no such directory" in _one_error_line(capsys)


def test_an_output_that_is_an_input_or_another_output_is_refused_before_anything_is_written(tmp_path, capsys):
    """`cuzk prove key.zkey w.wtns key.zkey public.json` wrote the proof over the key: as root no permission stops it."""
    key, wtns = tmp_path / "circuit.zkey", tmp_path / "witness.wtns"
    key.write_bytes((EXAMPLE / "circuit.zkey").read_bytes())
    wtns.write_bytes((EXAMPLE / "witness.wtns").read_bytes())
    os.symlink(key, tmp_path / "link.zkey")
    public = str(tmp_path / "public.json")
    for outputs, what in [((str(key), public), f"{key}: cannot write: it is the input {key}"),
                          ((public, str(tmp_path / "link.zkey")), f"{tmp_path / 'link.zkey'}: cannot write: it is the input {key}"),
                          ((public, str(tmp_path / "." / "public.json")),
                           f"{tmp_path / '.' / 'public.json'}: cannot write: it is also the output {public}")]:
        assert cli_main(["prove", "--local", str(key), str(wtns), *outputs]) == 1
        assert _one_error_line(capsys) == f"error: {what}\n"
    assert key.read_bytes() == (EXAMPLE / "circuit.zkey").read_bytes() and not os.path.exists(public)
    assert cli_main(["zkey", "export", "verificationkey", str(key), str(key)]) == 1
    assert "cannot write: it is the input" in _one_error_line(capsys)
    assert cli_main(["setup", str(EXAMPLE / "circuit.r1cs"), str(EXAMPLE / "circuit.r1cs")]) == 1
    assert "cannot write: it is the input" in _one_error_line(capsys)
    assert key.read_bytes() == (EXAMPLE / "circuit.zkey").read_bytes()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_an_output_that_cannot_be_written_is_one_line_naming_it(tmp_path, capsys):
    """A write that fails after the checks (a full disk) was "[Errno 28] No space left on device": no file named."""
    assert cli_main(["zkey", "export", "verificationkey", str(EXAMPLE / "circuit.zkey"), "/dev/full"]) == 1
    assert _one_error_line(capsys) == "error: /dev/full: cannot write: No space left on device\n"
    args = ["prove", "--local", str(EXAMPLE / "circuit.zkey"), str(EXAMPLE / "witness.wtns")]
    assert cli_main([*args, "/dev/full", str(tmp_path / "public.json")]) == 1
    assert _one_error_line(capsys) == "error: /dev/full: cannot write: No space left on device\n"


def test_a_proof_from_a_key_with_points_off_their_curve_names_the_key(tmp_path, capsys):
    """The self-check refuses such a proof as malformed: its error was "proof A is not on the bn128 G1 curve" alone,
    as if the proof were the user's."""
    from cuzk.formats.binfile import BinFile

    data = (EXAMPLE / "circuit.zkey").read_bytes()
    with BinFile(EXAMPLE / "circuit.zkey", "zkey", 2) as f:
        at = next(s.offset for s in f.sections if s.type == 5) + 64 + 3  # the x of the second A point
    bad = tmp_path / "bad.zkey"
    bad.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
    out = [str(tmp_path / "proof.json"), str(tmp_path / "public.json")]
    assert cli_main(["prove", "--local", str(bad), str(EXAMPLE / "witness.wtns"), *out]) == 1
    assert _one_error_line(capsys) == ("error: the proof does not verify against the key's verification data; nothing "
                                       f"written (proof A is not on the bn128 G1 curve: the key {bad} is corrupt)\n")
    assert not any(map(os.path.exists, out))


@pytest.mark.parametrize("command", [["prove", "k.zkey", "w.wtns", "p.json", "pub.json"], ["await", "job", "p.json", "pub.json"]])
@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_a_timeout_is_a_positive_number_of_seconds(command, value, capsys):
    """`--timeout -1` was taken, and the proof waited for 1 ms ("still proving after 0.001 s"), the job left running."""
    with pytest.raises(SystemExit) as done:
        cli_main([*command, "--timeout", value])
    assert done.value.code == 2
    assert f"argument --timeout: '{value}' is not a positive number of seconds" in capsys.readouterr().err


def test_zkey_export_verificationkey_is_export_vkey(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert cli_main(["zkey", "export", "verificationkey", str(EXAMPLE / "circuit.zkey"), str(a)]) == 0
    assert cli_main(["zkey", "export-vkey", str(EXAMPLE / "circuit.zkey"), str(b)]) == 0
    assert a.read_bytes() == b.read_bytes() == (EXAMPLE / "verification_key.json").read_bytes()


def test_setup_takes_one_ptau_in_snarkjs_order_or_by_flag(tmp_path, capsys):
    r1cs, zkey = str(EXAMPLE / "circuit.r1cs"), str(tmp_path / "k.zkey")
    assert cli_main(["setup", r1cs, "a.ptau", zkey, "--ptau", "b.ptau"]) == 1
    assert "the ptau is given twice" in _one_error_line(capsys)
    assert cli_main(["setup", r1cs, "a.ptau", zkey, "extra.zkey"]) == 1
    assert "setup takes <circuit.r1cs> [<pot.ptau>] <out.zkey>" in _one_error_line(capsys)


def test_prove_with_a_daemon_that_was_never_there_fails_at_once(tmp_path, capsys):
    out = [str(tmp_path / "proof.json"), str(tmp_path / "public.json")]
    args = ["prove", "--daemon", f"unix:{tmp_path}/none.sock", str(EXAMPLE / "circuit.zkey"), str(EXAMPLE / "witness.wtns"), *out]
    assert cli_main(args) == 1
    assert "the socket file does not exist" in _one_error_line(capsys)


def test_keep_daemon_is_refused_with_the_flags_that_prove_here(tmp_path, capsys):
    out = [str(EXAMPLE / "circuit.zkey"), str(EXAMPLE / "witness.wtns"), str(tmp_path / "proof.json"), str(tmp_path / "public.json")]
    for flags in (["--local"], ["--backend", "cpu"], ["--no-verify"]):
        assert cli_main(["prove", "--keep-daemon", *flags, *out]) == 1
        assert "--keep-daemon proves on a local daemon" in _one_error_line(capsys)
    assert cli_main(["prove", "--keep-daemon", "--idle-exit", "-1", *out]) == 1
    assert "--idle-exit takes a positive number of seconds" in _one_error_line(capsys)
    assert cli_main(["daemon", "--idle-exit", "0"]) == 1
    assert "--idle-exit takes a positive number of seconds" in _one_error_line(capsys)


def test_prove_with_a_daemon_that_does_not_answer_says_it_is_waiting(tmp_path, capsys):
    import socket

    path = tmp_path / "quiet.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))  # the file of a daemon that is gone (or restarting): nothing accepts on it
        args = ["prove", "--daemon", f"unix:{path}", "--timeout", "1", str(EXAMPLE / "circuit.zkey"), str(EXAMPLE / "witness.wtns"),
                str(tmp_path / "proof.json"), str(tmp_path / "public.json")]
        assert cli_main(args) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"waiting for the cuzk daemon at unix:{path}: nothing answers yet") and len(err) == 2
    assert err[1].startswith("error: no cuzk daemon answers")


def _prove_on_a_terminal(tmp_path, *flags) -> str:
    """Run a local `cuzk prove` with its stderr on a pseudo-terminal; what it printed there."""
    import pty

    leader, follower = pty.openpty()
    args = [sys.executable, "-m", "cuzk.cli", "prove", "--local", *flags, str(EXAMPLE / "circuit.zkey"), str(EXAMPLE / "witness.wtns"),
            str(tmp_path / "proof.json"), str(tmp_path / "public.json")]
    proc = subprocess.Popen(args, stderr=follower, stdout=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(600) == 0
    return b"".join(chunks).decode(errors="replace")


def test_a_local_proof_shows_its_steps_on_a_terminal_only(tmp_path, capfd):
    assert "proving: 2^" in _prove_on_a_terminal(tmp_path)
    assert _prove_on_a_terminal(tmp_path, "--quiet") == ""
    assert cli_main(["prove", "--local", str(EXAMPLE / "circuit.zkey"), str(EXAMPLE / "witness.wtns"), str(tmp_path / "proof.json"),
                     str(tmp_path / "public.json")]) == 0
    assert capfd.readouterr().err == ""  # not a terminal: nothing


def test_a_socket_without_a_daemon_behind_it_means_proving_here(tmp_path, capsys, monkeypatch):
    import socket

    from cuzk.formats.json_io import read_proof, read_public, read_vkey
    from cuzk.prover.verify import verify

    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))  # a daemon's socket file left behind: nothing answers on it
        monkeypatch.setenv("CUZK_DAEMON", f"unix:{path}")
        proof, public = tmp_path / "proof.json", tmp_path / "public.json"
        assert cli_main(["prove", str(EXAMPLE / "circuit.zkey"), str(EXAMPLE / "witness.wtns"), str(proof), str(public)]) == 0
    assert capsys.readouterr().err == ""  # no waiting, no message: the proof was made in this process
    vkey = read_vkey(EXAMPLE / "verification_key.json")
    assert verify(vkey, read_public(public, curve=vkey.curve), read_proof(proof, curve=vkey.curve))


def test_the_command_table_names_every_command_and_each_gets_its_own_parser():
    """`main` builds only the named command's parser (a daemon client's prove skips the others' modules): the table
    must name every command the full parser has, so none is left to the slower path."""
    import re

    from cuzk.cli import COMMANDS, build_parser

    def listed(parser) -> set[str]:
        return set(re.search(r"\{([^}]*)\}", parser.format_usage()).group(1).split(","))

    assert listed(build_parser()) == {name for names, _ in COMMANDS for name in names}
    for names, _ in COMMANDS:
        assert listed(build_parser(names[0])) == set(names)


PROVE_FILES = ["k.zkey", "w.wtns", "proof.json", "public.json"]


@pytest.mark.parametrize("argv", [
    PROVE_FILES,
    ["--keep-daemon", *PROVE_FILES],
    [*PROVE_FILES, "-v", "--priority", "HIGH", "--timeout", "2.5", "--idle-exit=30", "--keep-daemon"],
    ["--no-verify", "--backend", "cpu", "-q", *PROVE_FILES[:2], "--daemon", "unix:/x.sock", *PROVE_FILES[2:],
     "--config", "c.toml", "--token=t", "--tls-ca", "ca.pem", "--r1cs", "c.r1cs", "--local", "--no-progress"],
    ["-", *PROVE_FILES[1:], "--verbose", "--quiet", "--priority", "low", "--priority", "critical"],
])
def test_a_plain_prove_command_line_reads_as_the_parser_reads_it(argv):
    """A one-shot `cuzk prove` or `fullprove` reads its plain command lines from the parser's own table
    (cli_args.parse_plain), without argparse: the same values as the parser's, every default included."""
    from cuzk.cli import _plain_prove, build_parser

    assert vars(_plain_prove(["prove", *argv])) == vars(build_parser("prove").parse_args(["prove", *argv]))
    full = ["input.json", *argv]  # fullprove's files: the input, then the wasm in the witness's place
    assert vars(_plain_prove(["fullprove", *full])) == vars(build_parser("fullprove").parse_args(["fullprove", *full]))


@pytest.mark.parametrize("argv", [
    ["--keep", *PROVE_FILES],  # an abbreviation argparse accepts
    ["-h"], ["--priority", "bogus", *PROVE_FILES], ["--timeout", "soon", *PROVE_FILES], ["--timeout", "-1", *PROVE_FILES],
    PROVE_FILES[:3], [*PROVE_FILES, "extra"], ["--", *PROVE_FILES], ["-vq", *PROVE_FILES], ["--verbose=yes", *PROVE_FILES],
    [*PROVE_FILES, "--daemon"], ["--unknown", *PROVE_FILES],
])
def test_every_other_command_line_is_left_to_the_parser(argv):
    """Whatever the plain reading does not take, argparse reads (or explains): no second set of rules."""
    from cuzk.cli import _plain_prove

    assert _plain_prove(["prove", *argv]) is None
    assert _plain_prove(["fullprove", "input.json", *argv]) is None
