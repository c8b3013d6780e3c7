"""A gateway's connection limits: in total and per client address."""

from __future__ import annotations

from actors.connections import Connections
from cluster.config import InstanceConfig
from sessions.registry import SessionRegistry


def connections(**settings: int) -> Connections:
    config = InstanceConfig(**settings)  # type: ignore[arg-type]
    return Connections("g", SessionRegistry(), config, lambda *a: None, lambda s: None)


class _Stream:
    """Stands for an open connection in the gateway's set."""


def test_each_address_holds_at_most_its_share() -> None:
    c = connections(max_connections_per_address=2)
    assert c.admit_connection("10.0.0.1") is None
    assert c.admit_connection("10.0.0.1") is None
    refusal = c.admit_connection("10.0.0.1")
    assert refusal == "2 connections from this address; at most 2 (max_connections_per_address)"
    assert c.admit_connection("10.0.0.2") is None  # another address is not affected
    c.connection_closed("10.0.0.1")
    assert c.admit_connection("10.0.0.1") is None
    for _ in range(2):
        c.connection_closed("10.0.0.1")
    c.connection_closed("10.0.0.2")
    assert c.per_address == {}  # nothing kept for addresses with no connection


def test_the_gateway_holds_at_most_max_connections() -> None:
    c = connections(max_connections=3)
    for i in range(3):
        assert c.admit_connection(f"10.0.0.{i}") is None
        c.streams.add(_Stream())  # type: ignore[arg-type]
    refusal = c.admit_connection("10.0.0.9")
    assert refusal is not None and "at most 3 (max_connections)" in refusal
    assert "10.0.0.9" not in c.per_address
