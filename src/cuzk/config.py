"""Daemon and client configuration: defaults, then a TOML file, then ``CUZK_*`` environment, then flags.

One resolved ``DaemonConfig`` is what the supervisor hands to the engine process (as JSON),
so the engine sees exactly what the operator asked for, whichever layer it came from.

The file (``--config``, ``$CUZK_CONFIG``, else ``$XDG_CONFIG_HOME/cuzk/cuzk.toml`` when it
exists) looks like this (every setting: docs/configuration.md)::

    data_dir = "/var/lib/cuzk"
    listen = ["unix:/var/lib/cuzk/cuzk.sock", "0.0.0.0:7750"]  # TCP needs a token
    token_file = "/etc/cuzk/token"                              # or: token = "..."
    tls_cert = "/etc/cuzk/server.pem"                           # TLS on the TCP listeners (PEM chain + key);
    tls_key = "/etc/cuzk/server.key"                            #   clients then pass --tls-ca (or $CUZK_TLS_CA)
    http = "127.0.0.1:9750"                                     # /metrics, /status, /healthz; "" turns it off
    budget = "24GiB"                                            # absent: derived from the real limit
    budget_over_limit = false                                   # true: trust budget over a lower detected limit (warns)
    max_request = "256MiB"
    witness_paths = true                                        # clients on the unix socket may name a .wtns file

    [keys]                                                      # names clients may use
    sha256 = "/srv/keys/sha256_32B.zkey"

    [engine]                                                    # passed to the engine as is
    verify = true

    [engine.wasm]                                               # circom witness generators: these keys take
    sha256 = "/srv/keys/sha256_32B.wasm"                        #   input JSON (gRPC input_json, POST /v1/prove/{key})

    [supervisor]
    max_fruitless_restarts = 5
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .addresses import (
    ENV_PREFIX,
    MAX_UNIX_PATH,
    SOCKET_NAME,
    ConfigError,
    data_dir_setting,
    default_config_file,
    default_data_dir,
    normalize_address,
)
from .memory.units import parse_size

DEFAULT_HTTP = "127.0.0.1:9750"


@dataclass
class SupervisorPolicy:
    """How the supervisor restarts the engine and when it gives up (the ``[supervisor]`` table; here, not in
    engine/supervisor.py, so that a client reading the configuration imports no supervisor)."""

    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    # Deaths in a row in which the engine made no progress; at this many the supervisor stops.
    max_fruitless_restarts: int = 5
    # A learned budget below this is useless: stop rather than restart into certain failure.
    min_budget: int = 64 << 20
    # Longest wait for the kernel's charged usage to fall after a death.
    settle_timeout_s: float = 30.0
    # An engine that stayed up this long made progress even if it finished no job.
    healthy_after_s: float = 120.0
    # Each OOM lowers the budget by at least this fraction, so a poor measurement still converges.
    min_oom_step: float = 0.05


@dataclass
class DaemonConfig:
    data_dir: Path = field(default_factory=lambda: Path(default_data_dir()))
    listen: list[str] = field(default_factory=list)  # empty: unix:<data_dir>/cuzk.sock
    token: str | None = None
    tls_cert: str | None = None  # PEM certificate chain for the TCP listeners (with tls_key); unix sockets stay plain
    tls_key: str | None = None
    http: str | None = DEFAULT_HTTP
    budget: int | None = None
    budget_over_limit: bool = False  # trust ``budget`` over a lower detected limit until an OOM kill teaches otherwise
    max_request: int = 256 << 20
    # Clients on the unix socket may send a witness file's path instead of its bytes: the daemon copies the
    # file itself (no gRPC copies). Only there: the socket's 0600 mode admits the daemon's own user alone.
    witness_paths: bool = True
    keys: dict[str, str] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)
    supervisor: SupervisorPolicy = field(default_factory=SupervisorPolicy)
    log_level: str = "info"

    @property
    def socket_path(self) -> Path:
        return self.data_dir / SOCKET_NAME

    def listen_addresses(self) -> list[str]:
        """Normalised gRPC addresses: ``unix:/abs/path`` or ``host:port``."""
        return [normalize_address(a) for a in (self.listen or [f"unix:{self.socket_path}"])]

    def tcp_addresses(self) -> list[str]:
        return [a for a in self.listen_addresses() if not a.startswith("unix:")]

    def validate(self) -> None:
        for address in self.listen_addresses():
            if address.startswith("unix:") and len(address[5:].encode()) > MAX_UNIX_PATH:
                raise ConfigError(f"unix socket path {address[5:]!r} is longer than {MAX_UNIX_PATH} bytes; choose a shorter data_dir or listen path")
        if self.tcp_addresses() and not self.token:
            raise ConfigError(f"listening on TCP ({', '.join(self.tcp_addresses())}) needs a bearer token: set token or token_file")
        if self.token is not None and (len(self.token) < 16 or any(c.isspace() for c in self.token)):
            raise ConfigError("token must be at least 16 characters without whitespace")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("TLS needs both tls_cert (PEM certificate chain) and tls_key (PEM private key)")
        if self.tls_cert is not None:
            if not self.tcp_addresses():
                raise ConfigError("tls_cert/tls_key secure TCP listeners, and none is configured (unix sockets stay plain)")
            for name in ("tls_cert", "tls_key"):
                path = Path(getattr(self, name))
                if not path.is_file():
                    raise ConfigError(f"{name} {str(path)!r} is not a readable file")
        if self.budget_over_limit and self.budget is None:
            raise ConfigError("budget_over_limit needs a budget to trust (set budget, e.g. --budget 4GiB)")
        if self.max_request < 1024:
            raise ConfigError(f"max_request {self.max_request} bytes is too small to carry any witness")
        for name, path in self.keys.items():
            if not isinstance(path, str) or not path:
                raise ConfigError(f"[keys] {name!r}: expected a .zkey path string, got {path!r}")
        keys = {**(self.engine.get("keys") or {}), **self.keys}
        for table in ("r1cs", "wasm"):  # files of keys configured here: another name's entry would be silently unused
            strays = sorted(set(self.engine.get(table) or {}) - set(keys))
            if strays:
                raise ConfigError(f"[engine.{table}] {', '.join(map(repr, strays))}: no key of that name in [keys]")

    def to_json(self) -> str:
        data = asdict(self)
        data["data_dir"] = str(self.data_dir)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> DaemonConfig:
        data = json.loads(text)
        data["data_dir"] = Path(data["data_dir"])
        data["supervisor"] = SupervisorPolicy(**data["supervisor"])
        return cls(**data)


def _read_token_file(path: str, source: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read token_file {path!r}: {exc.strerror}") from exc


_SIMPLE = {"data_dir", "listen", "token", "token_file", "tls_cert", "tls_key", "http", "budget", "budget_over_limit",
           "max_request", "witness_paths", "log_level"}
_TABLES = {"keys", "engine", "supervisor"}


def _apply(cfg: DaemonConfig, values: dict[str, Any], source: str) -> None:
    """Set each known key from ``values``; unknown keys are an error, naming ``source``."""
    policy_fields = {f.name: f for f in fields(SupervisorPolicy)}
    for key, value in values.items():
        where = f"{source}: {key}"
        if key not in _SIMPLE | _TABLES:
            raise ConfigError(f"{where}: unknown setting (known: {', '.join(sorted(_SIMPLE | _TABLES))})")
        try:
            if key == "data_dir":
                cfg.data_dir = Path(data_dir_setting(str(value)))
            elif key == "listen":
                items = [value] if isinstance(value, str) else list(value)
                cfg.listen = [normalize_address(str(a)) for a in items if str(a).strip()]
            elif key == "token":
                cfg.token = str(value) or None
            elif key == "token_file":
                cfg.token = _read_token_file(str(value), source) or None
            elif key == "http":
                cfg.http = str(value).strip() or None
                if cfg.http:
                    normalize_address(cfg.http)
            elif key in ("budget", "max_request"):
                size = None if value in (None, "", "auto") and key == "budget" else parse_size(value)
                setattr(cfg, key, size)
            elif key in ("tls_cert", "tls_key"):
                setattr(cfg, key, str(Path(str(value)).expanduser().absolute()) if str(value).strip() else None)
            elif key in ("budget_over_limit", "witness_paths"):
                setattr(cfg, key, _parse_bool(value))
            elif key == "log_level":
                cfg.log_level = str(value).lower()
            elif key == "keys":
                cfg.keys.update({str(k): str(Path(str(v)).expanduser()) for k, v in dict(value).items()})
            elif key == "engine":
                cfg.engine.update(dict(value))
            elif key == "supervisor":
                for name, item in dict(value).items():
                    if name not in policy_fields:
                        raise ConfigError(f"{where}.{name}: unknown setting (known: {', '.join(policy_fields)})")
                    current = getattr(cfg.supervisor, name)
                    setattr(cfg.supervisor, name, parse_size(item) if name == "min_budget" else type(current)(item))
        except (TypeError, ValueError) as exc:
            if str(exc).startswith(source):
                raise
            raise ConfigError(f"{where}: {exc}") from exc


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _env_values(env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(_SIMPLE):
        text = env.get(ENV_PREFIX + key.upper())
        if text is not None:
            out[key] = [a for a in text.split(",")] if key == "listen" else text
    return out


def load_config(
    config_file: str | os.PathLike | None = None,
    overrides: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> DaemonConfig:
    """Defaults ← TOML file ← ``CUZK_*`` environment ← ``overrides`` (flags; None values are skipped)."""
    env = dict(os.environ if env is None else env)
    cfg = DaemonConfig(data_dir=Path(default_data_dir(env)))
    file = config_file or default_config_file(env)
    if file:
        path = Path(file)
        import tomllib  # only here: a client without a config file (a one-shot prove) is spared ~5 ms of imports

        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        _apply(cfg, data, str(path))
    _apply(cfg, _env_values(env), "environment " + ENV_PREFIX + "*")
    _apply(cfg, {k: v for k, v in (overrides or {}).items() if v is not None}, "command line")
    cfg.validate()
    return cfg


def client_target(address: str | None = None, config_file: str | os.PathLike | None = None,
                  env: dict[str, str] | None = None) -> tuple[str, str | None]:
    """Where a client should connect, and with which token: the flag, else ``$CUZK_DAEMON``, else the config's first listen address."""
    env = dict(os.environ if env is None else env)
    address = address or env.get(ENV_PREFIX + "DAEMON")
    if address:
        cfg_token = env.get(ENV_PREFIX + "TOKEN")
        if cfg_token is None and (config_file or default_config_file(env)):
            cfg_token = load_config(config_file, env=env).token
        return normalize_address(address), cfg_token
    cfg = load_config(config_file, env=env)
    return cfg.listen_addresses()[0], cfg.token
