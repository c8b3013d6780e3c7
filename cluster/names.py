"""Every Ray name canopy uses, in one place."""

from __future__ import annotations

DEFAULT_NAMESPACE = "canopy"
CONTROLLER = "controller"
SESSION_TREES = "session-trees"
VIEWS = "views"
CONFIG_LOG = "configuration-log"


def partition(index: int) -> str:
    return f"partition-{index}"


def gateway(index: int) -> str:
    return f"gateway-{index}"
