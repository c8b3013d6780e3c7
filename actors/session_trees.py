"""SessionTreeActor: the owner of the branch mapping tables.

It validates and versions the tables, commits each new version to the
replicated configuration log (:mod:`actors.configuration`) and pushes every new version to the gateways, which
resolve session paths with it locally, one resolution per group of sessions
that agree on the properties the filters read (``sessions/trees.py``,
``sessions/registry.py``). Permission checks happen at the gateway, which
knows the requesting session.
"""

from __future__ import annotations

from typing import Any

import ray
from actors import configuration
from actors.supervision import announce_start, new_incarnation

from sessions.trees import BranchMappingTable, SessionTrees


class SessionTreeActor:
    def __init__(self, config_log: Any) -> None:
        self.config_log = config_log
        stored = ray.get(config_log.get_documents.remote(), timeout=60).get("session_trees")
        self.trees = SessionTrees.from_wire(stored) if stored is not None else SessionTrees()
        self._gateways: list[Any] = []
        #: seconds the slowest gateway spent re-evaluating its sessions for the last change
        self.last_reevaluation = 0.0
        self._incarnation = new_incarnation()
        announce_start()

    def incarnation(self) -> str:
        """A token made when this process started: a new one means Ray restarted it."""
        return self._incarnation

    def set_gateways(self, gateways: list[Any]) -> None:
        self._gateways = gateways

    def set_config_log(self, config_log: Any) -> None:
        """The configuration log's new writer (a controller that took the instance over made
        it again: the old one went with the head and Ray gave it up)."""
        self.config_log = config_log

    def snapshot(self) -> list[Any]:
        return self.trees.to_wire()

    def put(self, table: list[Any]) -> int:
        """Replace (or, when it has no mappings, remove) a table; return the new version."""
        return self._commit(self.trees.put(BranchMappingTable.from_wire(table)))

    def remove(self, session_tree_branch: str) -> int:
        return self._commit(self.trees.remove(session_tree_branch))

    def _commit(self, trees: SessionTrees) -> int:
        # committed on a majority of the nodes first: a change the log refuses is not made
        configuration.commit_sync(self.config_log, "session_trees", trees.to_wire())
        self.trees = trees
        wire = trees.to_wire()
        times = ray.get([g.set_session_trees.remote(wire) for g in self._gateways], timeout=600)
        self.last_reevaluation = max(times, default=0.0)
        return trees.version

    def reevaluation_seconds(self) -> float:
        return self.last_reevaluation


def remote_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1)(SessionTreeActor)
