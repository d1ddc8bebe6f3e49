"""Where the daemon lives and listens by default, and how an address is written: the part of the configuration that a
one-shot ``cuzk prove`` needs to find its local daemon.

Kept apart from ``config`` (which reads it) because that module's dataclasses, pathlib and TOML parser cost a one-shot
call ~40 ms of imports on two cores, a third of a small circuit's whole proof; this one needs ``os`` alone.
"""

from __future__ import annotations

import os

ENV_PREFIX = "CUZK_"
SOCKET_NAME = "cuzk.sock"
# Unix socket paths live in a fixed 108-byte field (sun_path), terminating NUL included.
MAX_UNIX_PATH = 107


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the setting and where it came from."""


def absolute_path(path: str | os.PathLike) -> str:
    """``path`` made absolute as ``pathlib.Path.absolute`` makes it: joined to the working directory, its ``..`` left
    for the kernel to resolve (folding it away by hand, as ``os.path.abspath`` does, names another file after a symlink)."""
    path = os.fspath(path)
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def default_data_dir(env: dict[str, str] | None = None) -> str:
    base = (os.environ if env is None else env).get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                                                     "share")
    return os.path.join(base, "cuzk")


def data_dir_setting(value: str) -> str:
    """A ``data_dir`` as the configuration takes it (file, ``$CUZK_DATA_DIR``, flag): ``~`` expanded, made absolute."""
    return absolute_path(os.path.expanduser(value))


def default_config_file(env: dict[str, str]) -> str | None:
    if env.get(ENV_PREFIX + "CONFIG"):
        return env[ENV_PREFIX + "CONFIG"]
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    candidate = os.path.join(base, "cuzk", "cuzk.toml")
    return candidate if os.path.isfile(candidate) else None


def normalize_address(address: str) -> str:
    """``unix:PATH``, an absolute/relative socket path, or ``host:port`` → the form gRPC takes."""
    address = address.strip()
    if address.startswith("unix://"):
        return "unix:" + absolute_path(address[7:])
    if address.startswith("unix:"):
        return "unix:" + absolute_path(address[5:])
    if "/" in address or address.endswith(".sock"):
        return "unix:" + absolute_path(address)
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(f"address {address!r} is neither unix:PATH nor HOST:PORT")
    return address


def address_without_config(config_file: str | os.PathLike | None, env: dict[str, str]) -> str | None:
    """The daemon's address as ``config.client_target`` answers it, where that needs no configuration file:
    ``$CUZK_DAEMON``; else, with no ``config_file``, none at the default place and no ``$CUZK_LISTEN``, the unix socket
    in ``$CUZK_DATA_DIR`` or the default data directory. None where the configuration must be read."""
    if env.get(ENV_PREFIX + "DAEMON"):
        return normalize_address(env[ENV_PREFIX + "DAEMON"])
    if config_file or any(ENV_PREFIX + name in env for name in ("DAEMON", "LISTEN")) or default_config_file(env):
        return None
    data_dir = env.get(ENV_PREFIX + "DATA_DIR")
    socket = os.path.join(default_data_dir(env) if data_dir is None else data_dir_setting(data_dir), SOCKET_NAME)
    return "unix:" + socket if len(socket.encode()) <= MAX_UNIX_PATH else None  # too long: load_config says so
