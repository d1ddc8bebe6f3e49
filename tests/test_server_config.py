"""Daemon configuration: defaults ← TOML file ← CUZK_* environment ← flags, and clear errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuzk.config import ConfigError, DaemonConfig, client_target, load_config, normalize_address
from cuzk.memory.units import GiB, MiB

TOKEN = "0123456789abcdef-token"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_listen_on_the_unix_socket_in_the_data_dir(tmp_path):
    cfg = load_config(env={"XDG_DATA_HOME": str(tmp_path)})
    assert cfg.data_dir == tmp_path / "cuzk"
    assert cfg.listen_addresses() == [f"unix:{tmp_path / 'cuzk' / 'cuzk.sock'}"]
    assert cfg.tcp_addresses() == [] and cfg.token is None and cfg.budget is None


def test_file_then_environment_then_flags(tmp_path):
    toml = write(tmp_path / "cuzk.toml", f'''
data_dir = "{tmp_path}/from-file"
budget = "4GiB"
max_request = "64MiB"
http = "127.0.0.1:9999"
[keys]
sha = "{tmp_path}/sha.zkey"
[engine]
synth_workers = 2
[supervisor]
max_fruitless_restarts = 7
min_budget = "128MiB"
''')
    cfg = load_config(toml, env={})
    assert cfg.data_dir == tmp_path / "from-file" and cfg.budget == 4 * GiB and cfg.max_request == 64 * MiB
    assert cfg.keys == {"sha": f"{tmp_path}/sha.zkey"} and cfg.engine == {"synth_workers": 2}
    assert cfg.supervisor.max_fruitless_restarts == 7 and cfg.supervisor.min_budget == 128 * MiB

    env = {"CUZK_BUDGET": "2GiB", "CUZK_DATA_DIR": str(tmp_path / "from-env"), "CUZK_HTTP": ""}
    cfg = load_config(toml, env=env)
    assert cfg.budget == 2 * GiB and cfg.data_dir == tmp_path / "from-env" and cfg.http is None
    assert cfg.max_request == 64 * MiB  # untouched by the environment

    cfg = load_config(toml, overrides={"budget": "1GiB", "data_dir": None}, env=env)
    assert cfg.budget == 1 * GiB and cfg.data_dir == tmp_path / "from-env"  # a flag left unset changes nothing


def test_config_file_from_the_environment(tmp_path):
    toml = write(tmp_path / "c.toml", 'budget = "3GiB"\n')
    assert load_config(env={"CUZK_CONFIG": str(toml)}).budget == 3 * GiB


def test_tcp_needs_a_token_and_takes_one_from_a_file(tmp_path):
    with pytest.raises(ConfigError, match="needs a bearer token"):
        load_config(overrides={"listen": ["127.0.0.1:7750"]}, env={})
    token_file = write(tmp_path / "token", TOKEN + "\n")
    cfg = load_config(overrides={"listen": ["127.0.0.1:7750", f"unix:{tmp_path}/s.sock"], "token_file": str(token_file)}, env={})
    assert cfg.token == TOKEN
    assert cfg.tcp_addresses() == ["127.0.0.1:7750"]
    with pytest.raises(ConfigError, match="at least 16 characters"):
        load_config(overrides={"token": "short"}, env={})
    with pytest.raises(ConfigError, match="cannot read token_file"):
        load_config(overrides={"token_file": str(tmp_path / "missing")}, env={})


@pytest.mark.parametrize("text, message", [
    ('bugdet = "1GiB"\n', "bugdet: unknown setting"),
    ('budget = "lots"\n', "budget: not a byte size"),
    ('[supervisor]\nretries = 3\n', "supervisor.retries: unknown setting"),
    ('listen = ["nowhere"]\n', "neither unix:PATH nor HOST:PORT"),
    ('budget = \n', "not valid TOML"),
    ('[keys]\nsha = 3\n', None),
])
def test_bad_values_name_the_setting_and_the_file(tmp_path, text, message):
    toml = write(tmp_path / "bad.toml", text)
    if message is None:  # a number where a path belongs is taken as its text, not rejected
        assert load_config(toml, env={}).keys == {"sha": "3"}
        return
    with pytest.raises(ConfigError, match=message) as info:
        load_config(toml, env={})
    assert str(toml) in str(info.value)


@pytest.mark.parametrize("text, message", [
    ('[keys]\nsha = "/k.zkey"\n[engine.wasm]\nsah = "/k.wasm"\n', r"^\[engine.wasm\] 'sah': no key of that name in \[keys\]$"),
    ('[engine.r1cs]\nsha = "/k.r1cs"\n', r"^\[engine.r1cs\] 'sha': no key of that name in \[keys\]$"),
])
def test_files_of_a_key_that_is_not_configured_are_refused(tmp_path, text, message):
    """An [engine.wasm] or [engine.r1cs] entry whose name is no configured key (a typo) was silently unused."""
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path / "c.toml", text), env={})
    both = '[engine.keys]\nsha = "/k.zkey"\n[engine.wasm]\nsha = "/k.wasm"\n'  # keys may sit in [engine.keys] too
    assert load_config(write(tmp_path / "ok.toml", both), env={}).engine["wasm"] == {"sha": "/k.wasm"}


def test_socket_path_too_long_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="longer than 107 bytes"):
        load_config(overrides={"data_dir": str(tmp_path / ("d" * 120))}, env={})


def test_json_round_trip_is_what_the_engine_process_sees(tmp_path):
    cfg = load_config(overrides={"data_dir": str(tmp_path), "budget": "1GiB", "listen": ["127.0.0.1:1", "unix:/tmp/x.sock"],
                                 "token": TOKEN}, env={})
    cfg.engine["synth_workers"] = 3
    again = DaemonConfig.from_json(cfg.to_json())
    assert again == cfg


def test_client_target_precedence(tmp_path):
    toml = write(tmp_path / "c.toml", f'listen = ["127.0.0.1:7001"]\ntoken = "{TOKEN}"\n')
    assert client_target(None, toml, env={}) == ("127.0.0.1:7001", TOKEN)
    assert client_target(None, toml, env={"CUZK_DAEMON": "127.0.0.1:7002"}) == ("127.0.0.1:7002", TOKEN)
    assert client_target("unix:/run/x.sock", None, env={"CUZK_TOKEN": TOKEN}) == ("unix:/run/x.sock", TOKEN)


def test_the_address_without_config_is_the_configurations_without_reading_it(tmp_path):
    """A one-shot `cuzk prove` finds its local daemon without loading the configuration (addresses.address_without_config):
    the address client_target gives where no configuration file is needed, else None (the configuration is read)."""
    from cuzk.addresses import address_without_config

    home = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    for extra in ({}, {"CUZK_DATA_DIR": str(tmp_path / "data")}, {"CUZK_DATA_DIR": "~/data/../d"}, {"CUZK_DATA_DIR": ""},
                  {"XDG_DATA_HOME": str(tmp_path / "share")}, {"CUZK_HTTP": "127.0.0.1:0", "CUZK_BUDGET": "1GiB"}):
        env = {**home, **extra}
        assert address_without_config(None, env) == client_target(None, None, env)[0]
    for extra in ({"CUZK_DAEMON": "run/x.sock"}, {"CUZK_DAEMON": "127.0.0.1:7002", "CUZK_CONFIG": "c.toml"}):
        env = {**home, **extra}
        assert address_without_config(None, env) == client_target(None, None, {**env, "CUZK_CONFIG": ""})[0]
    for extra in ({"CUZK_LISTEN": "127.0.0.1:7001"}, {"CUZK_CONFIG": "c.toml"}, {"CUZK_DATA_DIR": "/" + "d" * 120}):
        assert address_without_config(None, {**home, **extra}) is None
    assert address_without_config(tmp_path / "c.toml", home) is None
    write((tmp_path / "config" / "cuzk").mkdir(parents=True) or tmp_path / "config" / "cuzk" / "cuzk.toml", "")
    assert address_without_config(None, home) is None


@pytest.mark.parametrize("path", ["w.wtns", "link/../w.wtns", "./a//b", "/abs/../x", ""])
def test_paths_are_made_absolute_as_pathlib_does_keeping_dot_dot_for_the_kernel(path):
    """A witness or key path goes to the daemon as the client named it, made absolute: `..` after a symlink is not the
    parent lexically, so folding it (os.path.abspath) could name another file."""
    from cuzk.addresses import absolute_path

    assert Path(absolute_path(path)) == Path(path).absolute()
    assert ".." not in path or ".." in absolute_path(path)


@given(st.sampled_from(["unix:", "unix://", ""]), st.lists(st.text("abc_", min_size=1, max_size=8), min_size=1, max_size=4))
def test_unix_addresses_normalise_to_absolute_paths(prefix, parts):
    path = "/" + "/".join(parts) + ".sock"
    assert normalize_address(prefix + path) == "unix:" + path


def test_budget_over_limit_from_file_environment_and_flag_needs_a_budget(tmp_path):
    toml = write(tmp_path / "cuzk.toml", 'budget = "4GiB"\nbudget_over_limit = true\n')
    assert load_config(toml, env={}).budget_over_limit is True
    assert load_config(overrides={"budget": "4GiB", "budget_over_limit": True}, env={}).budget_over_limit is True
    cfg = load_config(env={"CUZK_BUDGET": "4GiB", "CUZK_BUDGET_OVER_LIMIT": "yes"})
    assert cfg.budget_over_limit is True and DaemonConfig.from_json(cfg.to_json()) == cfg
    assert load_config(env={}).budget_over_limit is False
    with pytest.raises(ConfigError, match="needs a budget"):
        load_config(env={"CUZK_BUDGET_OVER_LIMIT": "1"})
    with pytest.raises(ConfigError, match="budget_over_limit: expected true or false"):
        load_config(env={"CUZK_BUDGET": "4GiB", "CUZK_BUDGET_OVER_LIMIT": "maybe"})


def test_witness_paths_is_on_by_default_and_can_be_turned_off(tmp_path):
    assert load_config(env={}).witness_paths is True
    assert load_config(write(tmp_path / "cuzk.toml", "witness_paths = false\n"), env={}).witness_paths is False
    cfg = load_config(env={"CUZK_WITNESS_PATHS": "no"})
    assert cfg.witness_paths is False and DaemonConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ConfigError, match="witness_paths: expected true or false"):
        load_config(env={"CUZK_WITNESS_PATHS": "sometimes"})
