"""Where ``canopy serve`` works, and how it reads the relative paths of its settings
(serve itself, against a real Ray: tests/e2e/test_serve.py and test_serve_workdir.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cluster import serve
from cluster.config import ConfigError, ServerConfig


def test_serve_works_where_canopys_packages_are_and_goes_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with serve._working_in(serve.CODE_ROOT):
        assert Path.cwd().resolve() == serve.CODE_ROOT
        assert (Path.cwd() / "cluster" / "serve.py").is_file() and (Path.cwd() / "sessions").is_dir()
    assert Path.cwd().resolve() == tmp_path.resolve()


def test_relative_paths_are_taken_from_where_serve_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "keys/token")
    absolute = serve._absolute_paths(ServerConfig(data_dir="d", history_dir="h"))
    here = tmp_path.resolve()
    assert (absolute.data_dir, absolute.history_dir) == (str(here / "d"), str(here / "h"))
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(here / "keys" / "token")
    assert serve._absolute_paths(ServerConfig(history_dir="s3://bucket/h")).history_dir == "s3://bucket/h"
    assert serve._absolute_paths(ServerConfig()).history_dir is None  # <data_dir>/history
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "~/token")  # not relative to the working directory: as given
    serve._absolute_paths(ServerConfig())
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == "~/token"


def test_a_tls_file_that_cannot_serve_is_a_configuration_error(tmp_path: Path) -> None:
    """What ``canopy serve`` reports as one line, naming the file (the checks: tests/unit/actors/test_tls.py)."""
    missing = tmp_path / "nowhere.pem"
    with pytest.raises(ConfigError, match=f"^{re.escape(f'tls_cert {missing}: no such file')}$"):
        serve._checked_tls(ServerConfig(tls_cert=str(missing), tls_key=str(tmp_path / "server.key")))
    config = ServerConfig()
    assert serve._checked_tls(config) is config  # without TLS nothing is loaded


class FakeNetwork:
    """What :class:`serve.Partitions` asks of :class:`cluster.netns.Network`, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def partition(self, node: str, peers: object, direction: str) -> None:
        self.calls.append(("partition", node, peers, direction))

    def delay(self, node: str, peers: object, direction: str, delay_ms: int) -> None:
        self.calls.append(("delay", node, peers, direction, delay_ms))

    def heal(self, node: str) -> str | None:
        self.calls.append(("heal", node))
        return "12 packets delivered late" if any(c[:2] == ("delay", node) for c in self.calls) else None


def test_a_partition_with_a_delay_delays_instead_of_cutting_and_says_what_it_did() -> None:
    network, said = FakeNetwork(), []
    cuts = serve.Partitions(network, said.append, lambda node: None)
    cuts.start('{"node": "node-1", "seconds": 1e-6, "peers": null, "direction": "in", "delay_ms": 200}')
    cuts.start('{"node": "node-2", "seconds": 1e-6, "peers": ["node-0"], "direction": "both", "delay_ms": null}')
    assert network.calls == [("delay", "node-1", None, "in", 200), ("partition", "node-2", ["node-0"], "both")]
    assert "network delay: node-1 delayed by 200 ms from every other node (what it receives arrives 200 ms late)" in said[0]
    assert "network partition: node-2 cut off from node-0" in said[1]
    cuts.tick([{"name": "node-1", "raylet_pid": 1}, {"name": "node-2", "raylet_pid": 2}])
    assert network.calls[2:] == [("heal", "node-1"), ("heal", "node-2")]
    assert said[2] == "canopy: network delay removed: node-1 (200 ms): 12 packets delivered late"
    assert said[3] == "canopy: network partition healed: node-2 reaches the other nodes again"
