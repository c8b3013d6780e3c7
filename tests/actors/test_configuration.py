"""The replicated configuration log over real Ray actors: three node copies
(SQLite files), the writer, majority commit, copies lost and caught up, a new
writer recovering the log and fencing the old one."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.configuration import NotCommitted, agent_class, log_class
from replication.config_log import ConfigLogStore
from replication.config_writer import OutcomeUnknown


def agents(tmp_path: Path, names: list[str]) -> dict[str, Any]:
    return {n: agent_class().remote(str(tmp_path / n)) for n in names}


def get(ref: Any) -> Any:
    return ray.get(ref, timeout=60)


def refused(ref: Any) -> BaseException:
    with pytest.raises(Exception) as caught:
        ray.get(ref, timeout=60)
    assert isinstance(caught.value, NotCommitted) or isinstance(getattr(caught.value, "cause", None), NotCommitted), \
        caught.value
    return caught.value


def kill(handle: Any) -> None:
    """Kill a copy and wait until it is gone (``ray.kill`` returns before the actor is dead, and a
    call made meanwhile may still run)."""
    ray.kill(handle, no_restart=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            ray.get(handle.state.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return
        assert time.monotonic() < deadline, "the killed copy still answers"
        time.sleep(0.05)


def unknown(ref: Any) -> None:
    with pytest.raises(OutcomeUnknown):
        ray.get(ref, timeout=60)


def on_disk(tmp_path: Path, name: str) -> dict[str, Any]:
    store = ConfigLogStore(tmp_path / name)
    try:
        return store.documents()
    finally:
        store.close()


def test_a_change_commits_on_a_majority_and_fails_whole_without_one(ray_node: Any, tmp_path: Path) -> None:
    copies = agents(tmp_path, ["n0", "n1", "n2"])
    writer = log_class().remote()
    try:
        assert get(writer.start.remote(copies)) == {}
        assert get(writer.append.remote("views", [{"name": "a"}])) == 2  # after the writer's own entry
        kill(copies["n2"])
        assert get(writer.append.remote("views", [{"name": "a"}, {"name": "b"}])) == 3  # 2 of 3
        kill(copies["n1"])
        # 1 of 3 stored it and is cut back; whether the two that died with the call had stored it
        # is not known (their files stay): only a recovery from a majority will say
        unknown(writer.append.remote("views", []))
        refused(writer.get_documents.remote())  # the writer recovers first
        position = get(writer.position.remote())
        assert position["committed"] == 3 and position["majority"] == 2
    finally:
        for handle in [writer, *copies.values()]:
            ray.kill(handle, no_restart=True)
    assert on_disk(tmp_path, "n0") == {"views": [{"name": "a"}, {"name": "b"}]}
    assert on_disk(tmp_path, "n2") == {"views": [{"name": "a"}]}  # it had left


def test_a_new_writer_recovers_the_log_catches_copies_up_and_fences_the_old_one(
    ray_node: Any, tmp_path: Path
) -> None:
    copies = agents(tmp_path, ["n0", "n1", "n2"])
    old = log_class().remote()
    new = log_class().remote()
    try:
        get(old.start.remote({"n0": copies["n0"], "n1": copies["n1"]}))  # n2 not in the cluster yet
        get(old.append.remote("security", {"version": 1}))
        get(old.append.remote("session_trees", [["t", 1]]))
        documents = get(new.start.remote(copies))  # all three: n2 is caught up
        assert documents == {"security": {"version": 1}, "session_trees": [["t", 1]]}
        refused(old.append.remote("security", {"version": 99}))  # a term behind: every copy refuses
        assert get(new.append.remote("security", {"version": 2})) == 5  # the new writer's own entry is 4
        kill(copies["n0"])
        kill(copies["n1"])
        unknown(new.append.remote("security", {"version": 3}))
    finally:
        for handle in [old, new, *copies.values()]:
            ray.kill(handle, no_restart=True)
    assert on_disk(tmp_path, "n2") == {"security": {"version": 2}, "session_trees": [["t", 1]]}
    assert on_disk(tmp_path, "n0")["security"] == {"version": 2}


def test_recovery_takes_the_most_up_to_date_copy_whole_and_every_copy_follows_it(
    ray_node: Any, tmp_path: Path
) -> None:
    copies = agents(tmp_path, ["n0", "n1", "n2"])
    first = log_class().remote()
    try:
        get(first.start.remote(copies))
        get(first.append.remote("views", ["committed"]))
        # a writer that died after storing on one copy only, never answered: its outcome unknown, and
        # that copy is the most up to date (the same commit point and last term, and longer)
        get(copies["n2"].store_entries.remote(1, [(3, 1, "views", json.dumps(["half"]))]))
        ray.kill(first, no_restart=True)
        second = log_class().remote()
        assert get(second.start.remote(copies)) == {"views": ["half"]}
        assert get(second.append.remote("views", ["next"])) == 5  # the second writer's own entry is 4
        ray.kill(second, no_restart=True)
    finally:
        for handle in copies.values():
            ray.kill(handle, no_restart=True)
    for name in ("n0", "n1", "n2"):
        assert on_disk(tmp_path, name) == {"views": ["next"]}, name


def test_the_json_documents_of_a_single_node_are_imported_once(ray_node: Any, tmp_path: Path) -> None:
    (tmp_path / "views.json").write_text(json.dumps([{"name": "old"}]))
    files = {"views": str(tmp_path / "views.json"), "security": str(tmp_path / "security.json")}
    copies = agents(tmp_path, ["n0"])
    writer = log_class().remote()
    try:
        assert get(writer.start.remote(copies, files)) == {"views": [{"name": "old"}]}
        assert not (tmp_path / "views.json").exists() and (tmp_path / "views.json.imported").exists()
        again = log_class().remote()
        assert get(again.start.remote(copies, files)) == {"views": [{"name": "old"}]}
        ray.kill(again, no_restart=True)
    finally:
        for handle in [writer, *copies.values()]:
            ray.kill(handle, no_restart=True)


def test_an_entry_stored_on_a_majority_survives_a_writer_that_died_before_committing_it(
    ray_node: Any, tmp_path: Path
) -> None:
    copies = agents(tmp_path, ["n0", "n1", "n2"])
    first = log_class().remote()
    try:
        get(first.start.remote(copies))
        get(first.append.remote("views", ["one"]))
        state = get(copies["n0"].state.remote())
        for name in ("n0", "n1"):  # stored by two of three, then the writer died: no commit anywhere
            get(copies[name].store_entries.remote(state.term, [(state.last + 1, state.term, "views",
                                                                json.dumps(["two"]))]))
        ray.kill(first, no_restart=True)
        second = log_class().remote()
        assert get(second.start.remote(copies)) == {"views": ["two"]}
        ray.kill(second, no_restart=True)
    finally:
        for handle in copies.values():
            ray.kill(handle, no_restart=True)
    for name in ("n0", "n1", "n2"):
        assert on_disk(tmp_path, name) == {"views": ["two"]}, name
