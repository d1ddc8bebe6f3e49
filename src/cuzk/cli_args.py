"""Command-line arguments written as data, so that one table serves two readers: argparse, which builds a command's
parser from it (help, errors, abbreviations, every form), and ``parse_plain``, which reads the common plain forms of
a command line without importing argparse.

A one-shot ``cuzk prove`` on a local daemon pays for its imports on every proof, and argparse (with the re, gettext,
locale and shutil modules it loads while building a parser) costs ~15 ms of CPU on two cores, more than a tenth of a
small circuit's whole proof. ``parse_plain`` answers only where its answer is argparse's: any form it does not take
(an abbreviation, ``-h``, a bad value, a missing argument) is left to argparse, which then answers or explains.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own constant costs its import (~5 ms): type checkers treat this name alike
if TYPE_CHECKING:
    import argparse
    from typing import Any

def arg(*flags: str, **options: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """One ``parser.add_argument(*flags, **options)``; ``choices`` may be a function, called when needed (the job
    priorities' names come from the engine's enum, whose module a plain prove does not import unless asked)."""
    return flags, options


def add_arguments(parser: argparse.ArgumentParser, table: tuple) -> None:
    for flags, options in table:
        choices = options.get("choices")
        parser.add_argument(*flags, **({**options, "choices": choices()} if callable(choices) else options))


def _dest(flags: tuple[str, ...], options: dict[str, Any]) -> str:
    """argparse's name for the value: ``dest``, else the first long option (``--no-verify`` → ``no_verify``), else the
    first short one, else the positional's name."""
    if "dest" in options:
        return options["dest"]
    if not flags[0].startswith("-"):
        return flags[0]
    name = next((f for f in flags if f.startswith("--")), flags[0])
    return name.lstrip("-").replace("-", "_")


def parse_plain(argv: list[str], table: tuple) -> dict[str, Any] | None:
    """The values argparse would give ``argv`` for a parser built from ``table`` (single positionals, options that
    store a value, ``store_true`` / ``store_false`` flags), or None where argparse must decide: an option not written
    out whole (``--verb``), ``--opt=value`` of a flag, a value that starts with ``-`` or fails its type or choices,
    another action, ``-h``, ``--``, a wrong number of positionals. String defaults go through ``type``, as argparse's do."""
    values: dict[str, Any] = {}
    positionals: list[str] = []
    options: dict[str, tuple[str, dict[str, Any]]] = {}
    for flags, spec in table:
        dest = _dest(flags, spec)
        if not flags[0].startswith("-"):
            if "nargs" in spec or "action" in spec:
                return None
            positionals.append(dest)
            continue
        action = spec.get("action", "store")
        default = spec.get("default", {"store_true": False, "store_false": True}.get(action))
        if isinstance(default, str) and "type" in spec and action == "store":
            default = spec["type"](default)
        values[dest] = default
        options.update((flag, (dest, spec)) for flag in flags)
    given: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if not token.startswith("-") or token == "-":
            given.append(token)
            continue
        flag, has_value, value = token.partition("=")
        if flag not in options or not flag.startswith("--") and has_value:
            return None
        dest, spec = options[flag]
        action = spec.get("action", "store")
        if action in ("store_true", "store_false"):
            if has_value:
                return None
            values[dest] = action == "store_true"
            continue
        if action != "store" or "nargs" in spec:
            return None
        if not has_value:
            value = next(tokens, None)
            if value is None or value.startswith("-"):
                return None
        try:
            value = spec["type"](value) if "type" in spec else value
        except Exception:  # noqa: BLE001 (argparse reports the type's error in its own words)
            return None
        choices = spec.get("choices")
        if choices is not None and value not in (choices() if callable(choices) else choices):
            return None
        values[dest] = value
    if len(given) != len(positionals):
        return None
    values.update(zip(positionals, given))
    return values


def _priority_names() -> list[str]:
    from .engine.jobs import Priority

    return [level.name.lower() for level in Priority]


def priority_option(help_text: str | None = None) -> tuple[tuple[str, ...], dict[str, Any]]:
    """A job's priority by name, in any case (the engine's ``Priority``; "normal" unless given)."""
    return arg("--priority", default="normal", choices=_priority_names, type=str.lower, help=help_text)


def seconds(text: str) -> float:
    """A positive, finite number of seconds (an option's type: ``--timeout``). A negative one was a wait of 1 ms."""
    value = float(text)  # argparse answers a ValueError with "invalid seconds value: ..."
    if not 0 < value < float("inf"):
        import argparse

        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def client_options(daemon_help: str = "daemon address: unix:PATH, a socket path, or HOST:PORT "
                                      "(default: $CUZK_DAEMON, else the config)") -> tuple:
    """Where a client of the daemon finds it and how it proves who it is (``cuzk submit``, ``status``, ...; ``prove``)."""
    return (
        arg("--daemon", metavar="ADDR", help=daemon_help),
        arg("--token", help="bearer token for a TCP address (default: $CUZK_TOKEN, else the config)"),
        arg("--tls-ca", metavar="PEM", help="connect to a TCP address over TLS, trusting these CA certificates "
                                            "(the daemon's own certificate when self-signed; default: $CUZK_TLS_CA)"),
        arg("--config", help="config file (default: $CUZK_CONFIG, else ~/.config/cuzk/cuzk.toml)"),
    )
