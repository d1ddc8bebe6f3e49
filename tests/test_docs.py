"""docs/configuration.md: its example cuzk.toml parses, and it names every setting the code reads."""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from pathlib import Path

from cuzk.config import _SIMPLE, _TABLES, load_config
from cuzk.engine.config import EngineConfig
from cuzk.engine.supervisor import SupervisorPolicy

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
INTERNAL = {"data_dir", "heartbeat", "budget_bytes", "budget_over_limit"}  # [engine] fields the daemon sets itself


def _example() -> str:
    (block,) = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    return block


def test_the_example_config_is_valid(tmp_path):
    path = tmp_path / "cuzk.toml"
    path.write_text(_example())
    config = load_config(path, env={})
    assert config.http == "127.0.0.1:9750" and config.engine["verify"] is True
    assert EngineConfig.from_mapping(tmp_path, config.engine).proofs_per_device == "auto"


def test_the_example_names_every_setting():
    named = set(re.findall(r"^#?\s*([a-z_0-9]+) = ", _example(), re.M)) | set(re.findall(r"^\[(?:engine\.)?([a-z0-9_]+)\]", _example(), re.M))
    expected = _SIMPLE | _TABLES | {f.name for f in fields(SupervisorPolicy)} | {f.name for f in fields(EngineConfig)} - INTERNAL
    assert expected - named == set()
    assert tomllib.loads(_example())["supervisor"]["max_fruitless_restarts"] == SupervisorPolicy().max_fruitless_restarts
