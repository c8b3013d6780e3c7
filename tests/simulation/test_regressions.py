"""Schedules that broke an invariant, kept as they were drawn (shrunk: the operations whose
removal keeps the violation), each named for the bug it shows.

A bug fixed: the schedule must pass. A bug open: ``xfail(strict=True)`` with what it is, and
the cause the checker diagnoses for it in :data:`OPEN`: ``test_schedules.py`` counts a seed
that loses a write through an open cause as known instead of failing (every seed of another
cause, or of none the checker can name, fails it). Fixing the bug turns its regression into a
pass, which fails the strict ``xfail`` until the marker and the cause go.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from typing import Any

import pytest

from actors import liveness, replicas
from actors.link import Route
from actors.replicas import ReplicaError, ReplicaSet
from replication.config_writer import TEND_EVERY, ConfigWriter, NotCommitted
from replication import placement
from tests.simulation import configuration
from tests.simulation.configuration import SimConfiguration
from tests.simulation.controller import Controller
from tests.simulation.invariants import Checker, Violation
from tests.simulation.world import SECOND, World
from tests.simulation.run import Sim, run
from tests.simulation.schedule import Configure, Corrupt, CrashProcess, Cut, Isolate, Pause, PowerCut, Rejoin
from tests.simulation.schedule import RestartAll, Schedule, Write

#: the causes of lost writes (``Violation.cause``: ``invariants.STALE``, ``invariants.SHORT``) of
#: the bugs still open -> their regressions, which raise it through :func:`fails_through`
OPEN: dict[str, tuple[str, ...]] = {}


@pytest.fixture
def trusting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scripted controller without the safeguards it shares with ``ReplicaSet``
    (``Controller.careful``), which would keep these schedules off the path the replicas must
    refuse by themselves. (The runs otherwise use the real managers: ``ManagedController``.)"""
    monkeypatch.setattr(Controller, "careful", False)
    monkeypatch.setattr(Sim, "controller_class", Controller)


def fails_through(cause: str, schedule: Schedule) -> None:
    """Run ``schedule``; a violation must be a lost write through ``cause`` (else the test fails
    rather than xfails: another bug)."""
    try:
        run(schedule)
    except Violation as e:
        assert e.kind == "lost write" and e.cause == cause, f"{e}: not through {cause}"
        raise


def test_a_backup_follows_no_older_primary_after_a_newer_placement() -> None:
    """F4 (fixed in ``ReplicaState.become_backup``): partition 1 was placed at epoch 2 and, a
    few milliseconds later, at epoch 3 with the same nodes; the backup took ``become_backup(3)``
    while the epoch-2 primary's follow and prime were on the way, kept that stream, and was
    primed from it at epoch 3. A placement at a newer epoch now drops an older follower."""
    run(Schedule(
        seed=632,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='always',
        ops=(
            Write(608, 'node-1', 'k/4'),
            Write(609, 'node-1', 'k/8'),
            Write(679, 'node-2', 'k/0'),
            Write(1049, 'node-1', 'k/6'),
            Write(1270, 'node-1', 'k/7'),
            Write(1364, 'node-1', 'k/6'),
            Write(1477, 'node-2', 'k/1'),
            Write(1766, 'node-1', 'k/9'),
            Write(1849, 'node-2', 'k/6'),
            Write(2116, 'node-1', 'k/0'),
            Write(2254, 'node-1', 'k/7'),
            Write(2268, 'node-2', 'k/6'),
            Write(3011, 'node-1', 'k/0'),
            Write(3315, 'node-1', 'k/1'),
            Write(3532, 'node-2', 'k/6'),
            Write(3588, 'node-1', 'k/8'),
            Write(3970, 'node-2', 'k/4'),
            Isolate(4068, 'node-1', 1293),
            Write(4744, 'node-1', 'k/4'),
            Write(5095, 'node-1', 'k/2'),
            Write(5397, 'node-2', 'k/0'),
            Write(5894, 'node-2', 'k/7'),
            CrashProcess(5911, 'partition-0@node-2'),
            Write(6497, 'node-2', 'k/3'),
            CrashProcess(6501, 'partition-1@node-1'),
            Write(6741, 'node-1', 'k/5'),
            Rejoin(7815, 'node-2'),
        ),
        faults_end_ms=10000,
        spike_rate=0.01,
        loss_rate=0.01,
    ))


@pytest.mark.usefixtures("trusting")
def test_a_backup_never_primed_is_not_promoted_after_a_restart() -> None:
    """Fixed by :class:`~replication.replica.AwaitPrime` (a backup's journal is marked as
    awaiting its prime, durably, before anything else of ``become_backup``). Write 1 is
    acknowledged at epoch 2 by partition 0's primary on node-1 and its backup on node-0
    (node-2's raylet restarted). node-2 is back and rebalancing moves the backup there at
    epoch 3: node-2 follows (its journal is epoch 1's, without write 1), but node-1 is cut off
    before it hears that it is the primary at 3, so node-2 is never primed. node-2 loses power
    and comes back; node-1 is lost, and ``after_loss`` makes the backup the map names, node-2,
    the primary at epoch 4. Its new replica is idle, and took over without write 1 while the
    mark was not there: now it refuses, and the partition is placed again from a copy that
    holds write 1. (The careful scripted controller now places a partition with a node back
    from its replicas' positions instead, and never asks.)"""
    run(Schedule(
        seed=1561,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=3,
        policy='always',
        ops=(
            Rejoin(1611, 'node-2'),
            Write(2564, 'node-1', 'k/3'),
            Isolate(2673, 'node-1', 6904),
            PowerCut(5983, 'node-2', 129),
        ),
        faults_end_ms=10000,
        loss_rate=0.001,
    ))


def test_a_journal_never_primed_at_its_epoch_does_not_outrank_a_whole_one() -> None:
    """Fixed by :class:`~replication.replica.AwaitPrime` (a backup saves the epoch it follows
    only once primed: ``EPOCH`` is the epoch of the state a journal holds). Write 1 is
    acknowledged at epoch 1 (partition 0's primary on node-1, its backup on node-2). node-1's
    raylet restarts, so node-2 takes over at epoch 2 with a backup on node-0 (the head, for
    want of workers), and they acknowledge write 2. node-1 is back and the backup moves there
    at epoch 3: node-1 follows (its journal is still the one of epoch 1, without write 2), but
    node-2, cut off from the head, has not heard that it is the primary at 3 when the whole
    instance restarts. ``initial`` preferred node-1's journal, which said epoch 3, to node-2's
    and node-0's (epoch 2, with write 2) and made it the primary; it now says epoch 1."""
    run(Schedule(
        seed=2003,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='always',
        ops=(
            Write(4176, 'node-2', 'k/0'),
            Rejoin(4542, 'node-1'),
            Write(5646, 'node-2', 'k/1'),
            Cut(6122, 'node-0', 'node-2', 1584),
            RestartAll(7303),
        ),
        faults_end_ms=10000,
    ))


@pytest.mark.usefixtures("trusting")
def test_a_copy_whose_last_record_recovery_cut_does_not_lead() -> None:
    """Fixed in recovery (``journal_format._check_frame``: only a frame cut short is a torn
    tail; a whole last frame that fails its checksum is damage). Partition 1's primary on
    node-2 acknowledges write 9 with its backup on node-1. node-2 loses power (under
    ``always``: nothing lost) and node-1's raylet restarts; a bad sector then takes the last
    record of node-2's journal, write 9, which recovery cut off as a torn tail. When they are
    back, node-0 and node-1 have been made backups, never primed (they cannot lead), so the
    scripted controller let the last primary, node-2, back idle with its journal, lead
    without write 9, which node-1's journal holds. Now node-2's journal is set aside (it
    cannot lead), and the partition is placed from the journals: node-1 leads and primes it.
    (The careful scripted controller now sees node-1's longer journal without that.)"""
    run(Schedule(
        seed=3129,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='always',
        ops=(
            Write(865, 'node-2', 'k/5'),
            Write(1193, 'node-2', 'k/5'),
            Write(1296, 'node-2', 'k/6'),
            Write(2020, 'node-1', 'k/5'),
            Write(2496, 'node-2', 'k/6'),
            Write(3065, 'node-1', 'k/6'),
            Write(3169, 'node-1', 'k/4'),
            Write(3421, 'node-2', 'k/6'),
            Write(4258, 'node-1', 'k/7'),
            PowerCut(4956, 'node-2', 1839),
            Rejoin(5310, 'node-1'),
            Corrupt(6214, 'node-2', 1),
        ),
        faults_end_ms=10000,
    ))


def test_a_dialler_whose_synack_stalled_past_the_timeout_is_told_it_failed() -> None:
    """Fixed in the network model (``network.Stream.never_established``). Partition 0's primary
    on node-1 dials its backup on node-2; the SYN gets there, and node-1 and node-2 are cut
    before the SYNACK comes back. The server's end broke at its retransmission timeout, but
    the dialler was told neither ``connected`` nor ``failed``: the primary waited for that
    connection for good, its backup never primed (no convergence 60 s after the faults). A
    real dialler is still sending its SYN then, and its connect completes or times out; now
    it is told ``failed`` and the primary tries again after ``RETRY_MS``."""
    run(Schedule(
        seed=46570,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=3,
        policy='always',
        ops=(
            Cut(5, 'node-2', 'node-1', 4851),
        ),
        faults_end_ms=10000,
        spike_rate=0.01,
        loss_rate=0.01,
    ))


def test_writes_only_a_damaged_journal_held_are_lost_with_it() -> None:
    """A wrong invariant (fixed in ``Checker.set_aside``: :data:`~tests.simulation.invariants.ONLY_COPY`).
    Partition 0's primary on node-1 acknowledges writes 1-16 with its backup on node-0;
    node-1's raylet restarts, so node-0 takes over alone at epoch 2 (no other node alive) and
    acknowledges write 17, which only its journal holds. The whole instance restarts, and
    node-0 is cut off before the new placement (epoch 3, a backup on node-1) takes; then the
    record of write 17 in node-0's journal goes bad (the drawn seed: four writes of epoch 2,
    the third one's record bad). Recovery sets node-0's journal aside (it never reads past
    damage), and node-1's copy, of epoch 1, leads at epoch 4: the write is gone from every
    copy, as it would be under any protocol. The checker took it for a write lost through a
    stale copy; it now excuses the writes a damaged journal set aside was the only copy of,
    under any fsync policy (never one that no copy held before)."""
    run(Schedule(
        seed=43961,
        nodes=('node-0', 'node-1'),
        partitions=1,
        policy='always',
        ops=(
            Write(141, 'node-1', 'k/7'),
            Write(802, 'node-1', 'k/2'),
            Write(1080, 'node-1', 'k/0'),
            Write(1566, 'node-1', 'k/4'),
            Write(1583, 'node-1', 'k/5'),
            Write(1637, 'node-0', 'k/1'),
            Write(2238, 'node-0', 'k/8'),
            Write(2490, 'node-0', 'k/4'),
            Write(2541, 'node-0', 'k/9'),
            Write(2546, 'node-1', 'k/0'),
            Write(3469, 'node-1', 'k/6'),
            Write(3595, 'node-1', 'k/0'),
            Write(3674, 'node-1', 'k/1'),
            Write(3758, 'node-0', 'k/1'),
            Write(4414, 'node-0', 'k/0'),
            Write(4503, 'node-1', 'k/1'),
            Rejoin(4535, 'node-1'),
            Write(4608, 'node-0', 'k/4'),
            RestartAll(5846),
            Isolate(6162, 'node-0', 3493),
            Corrupt(7677, 'node-0', 0),
        ),
        faults_end_ms=10000,
    ))


# -- found in the real control plane ----------------------------------------------------------
#
# Since the runs use the real managers (``ReplicaSet``, ``PartitionManager``, ``Liveness`` over
# ``SimCluster``), the seeds below found these bugs in them. Each test also brings its bug back
# (``regressed``: the old code, patched in) and checks that the schedule then fails, so that it
# keeps proving something.


def regressed(schedule: Schedule, monkeypatch: pytest.MonkeyPatch, *patches: tuple[Any, str, Any]) -> str:
    """What ``schedule`` breaks with ``patches`` (the bug back), as ``type: message``."""
    with monkeypatch.context() as m:
        for target, name, value in patches:
            m.setattr(target, name, value)
        try:
            run(schedule)
        except (Violation, Exception) as e:
            return f"{type(e).__name__}: {e}"
    raise AssertionError("the schedule passes with the bug back: it no longer shows it")


def test_a_start_cut_off_once_leaves_no_copy_unable_to_lead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in ``ReplicaSet.start`` (seed 23). The start is slow (latency spikes); partition 1's
    backup on node-1 is told to follow at epoch 1, which marks its journal as awaiting a prime
    before anything is written, and then node-2, where its primary was to be, rejoins: its
    replica is dead, and the start fails. serve stops what it made and starts again: node-1's
    empty journal, marked, is the only copy of partition 1, so it leads; but ``start`` passed
    what the journal held only when it held something, so the replica refused as a backup
    never primed, at every start, for good. It now passes ``()`` (weighed: no journal), and a
    replica whose journal still holds nothing takes over."""
    schedule = Schedule(
        seed=23,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='always',
        ops=(
            Rejoin(1127, 'node-2'),
        ),
        faults_end_ms=10000,
        spike_rate=0.01,
        loss_rate=0.001,
    )
    run(schedule)
    place = ReplicaSet._place
    broken = regressed(schedule, monkeypatch, (ReplicaSet, "_place", lambda self, p, before, weighed=None: place(
        self, p, before, None if weighed == () else weighed)))
    assert "the controller is not running" in broken, broken


def test_a_restarted_controller_places_a_partition_none_of_whose_replicas_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in ``ReplicaSet.adopt`` (seed 115). The head is isolated for 7 s and its controller
    crashes meanwhile: the head declares node-1 and node-2 lost, so their raylets restart when
    the cut heals and every replica goes with them. The restarted controller then found no
    replica of either partition and failed to start (``ReplicaError``), again at every restart,
    for good. A partition it cannot adopt is now unsettled: placed again from its replicas and
    every alive node's journal, waiting while a node Ray knows is absent."""
    schedule = Schedule(
        seed=115,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='interval:100',
        ops=(
            Isolate(5645, 'node-0', 7192),
            CrashProcess(6019, 'controller'),
        ),
        faults_end_ms=10000,
    )
    run(schedule)

    def from_replicas(count: int, standing: Any) -> Any:
        try:
            return placement.from_replicas(count, standing)
        except ValueError as e:
            raise ReplicaError(str(e)) from None

    broken = regressed(schedule, monkeypatch, (replicas, "from_replicas", from_replicas))
    assert "the controller is not running" in broken, broken


def test_a_restart_whose_probe_was_lost_is_still_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in ``Liveness.poll`` and ``PartitionManager.settle`` (found as seed 156; the same
    operations under seed 21 since the start makes every replica before placing them, which
    shifted which messages the loss takes). With 1 % of messages lost, the controller's first
    ``incarnation`` probe of partition 0's replica on node-2 was lost: Liveness waited for its
    answer for good and never saw the replica restart at 7 s, idle, while the map still named it;
    the partition never had a primed backup again (without the loss, the bug back passes). A
    probe unanswered for 30 s is now sent again, and every 5 s the manager asks each replica the
    map names where it stands, bringing back one that says it is idle."""
    schedule = Schedule(
        seed=21,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=1,
        policy='always',
        ops=(
            Write(65, 'node-2', 'k/8'),
            Write(109, 'node-1', 'k/8'),
            Write(377, 'node-1', 'k/3'),
            CrashProcess(7011, 'partition-0@node-2'),
        ),
        faults_end_ms=10000,
        loss_rate=0.01,
    )
    run(schedule)
    broken = regressed(schedule, monkeypatch, (replicas, "DRIFT_EVERY", 1e12), (liveness, "STALE", 1e12))
    assert "no convergence" in broken, broken
    with pytest.raises(AssertionError, match="no longer shows it"):  # the lost message is what shows it
        regressed(dataclasses.replace(schedule, loss_rate=0.0), monkeypatch, (replicas, "DRIFT_EVERY", 1e12),
                  (liveness, "STALE", 1e12))


def test_a_replica_that_restarts_while_the_instance_starts_is_brought_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in ``Liveness.baseline`` (seed 208). Partition 1's replica on node-1 crashes 279 ms
    after the start placed it, before the controller learned each replica's incarnation: the
    baseline failed for it, its first answer after the restart became its baseline, and the
    restart was never seen -- its backup stayed unprimed. A replica restarting at the baseline is
    now marked so, and its first answer counts as a restart (the drift check would find it too:
    it is off here, to show the baseline's part)."""
    schedule = Schedule(
        seed=208,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='always',
        ops=(
            CrashProcess(279, 'partition-1@node-1'),
        ),
        faults_end_ms=10000,
        spike_rate=0.01,
    )
    run(schedule)

    def baseline(self: liveness.Liveness, actors: dict[str, Any], timeout: float) -> None:
        found = self._cluster.outcomes([self._cluster.call(h, "incarnation") for h in actors.values()], timeout)
        for name, (token, error) in zip(actors, found):
            if error is not None:
                raise error
            self._known[name] = token

    broken = regressed(schedule, monkeypatch, (replicas, "DRIFT_EVERY", 1e12),
                       (liveness.Liveness, "baseline", baseline))
    assert "is not primed" in broken, broken


def test_a_route_names_a_replica_after_a_placement_that_failed_before_making_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in ``ReplicaSet.route`` (seed 3428). Partition 0's primary on node-1 restarts, and its
    backup on node-2 takes over, with node-1 as the new backup; node-2 is then cut off from the
    head (one way) and declared lost, and the controller crashes. Its successor finds no replica
    of partition 0 that can lead, and when node-2 rejoins places it again with the primary there
    -- a step that fails (the replica on node-1 is restarting) before node-2's replica is made.
    The map named a primary without a replica, and ``route`` raised ``KeyError`` (in the real
    controller, its ``check`` and every link asking). It now makes an idle replica there, which
    refuses links until the partition is placed again."""
    schedule = Schedule(
        seed=3428,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='interval:100',
        ops=(
            Write(63, 'node-1', 'k/2'),
            CrashProcess(1671, 'partition-0@node-1'),
            Cut(3918, 'node-1', 'node-2', 3399),
            Cut(4288, 'node-0', 'node-2', 4895, False),
            CrashProcess(7187, 'controller'),
        ),
        faults_end_ms=10000,
    )
    run(schedule)

    def route(self: ReplicaSet, index: int) -> Route:
        p = self.placements[index]
        return Route(self.since[index], self.replicas[(index, p.primary)][1], p.primary)

    broken = regressed(schedule, monkeypatch, (ReplicaSet, "route", route))
    assert broken.startswith("KeyError"), broken


#
# The configuration log in the simulator (``tests/simulation/configuration.py``: the real writer,
# ``replication.config_writer.ConfigWriter``, and the real copies) found these.


def _tend_without(part: str) -> Any:
    """``ConfigWriter.tend`` without one of its parts (the bug back)."""
    tend = ConfigWriter.tend

    def tend_without(self: ConfigWriter, nodes: Any, renewed: Any = ()) -> Any:
        if not self.ready and part == "recovery":
            return
        if self.ready and part == "catch-up":
            if list(nodes) != self.nodes or renewed:
                yield from self.set_nodes(nodes, renewed)
            return
        yield from tend(self, nodes, renewed)

    return tend_without


def test_a_change_refused_is_cut_back_before_it_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in ``ConfigWriter.append`` (seed 875). Two nodes; node-1 is paused past the head's
    failure detector and the controller restarts meanwhile. A security change is stored on node-0's
    copy, node-1's copy is gone (its node left): no majority, and the writer answered "not made" at
    once. The restarted controller then recovers the log from node-0's copy alone (node-1 is no
    longer a node: a majority of one), which held the refused entry, and took it as committed: a
    change answered "not made" was made. The writer now cuts a refused entry back on every copy
    that may hold it, and refuses only once each has confirmed (else a recovery decides)."""
    schedule = Schedule(
        seed=875,
        nodes=('node-0', 'node-1'),
        partitions=2,
        policy='always',
        ops=(
            Cut(1316, 'node-1', 'node-0', 2134, False),
            Write(3136, 'node-1', 'k/3'),
            CrashProcess(3209, 'controller'),
            Write(3243, 'node-0', 'k/5'),
            Pause(3314, 'node-1', 2234),
            Configure(4429, 'security'),
        ),
        faults_end_ms=10000,
        loss_rate=0.01,
        config_log=True,
    )
    run(schedule)

    def undo_at_once(self: ConfigWriter, entry: Any, held: Any, stored: int) -> Any:
        self.copies = {}
        raise NotCommitted("not made")
        yield

    broken = regressed(schedule, monkeypatch, (ConfigWriter, "_undo", undo_at_once))
    assert "refused configuration change made" in broken, broken


def test_a_writer_that_lost_track_of_a_change_recovers_once_a_majority_is_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in ``ConfigWriter.tend`` (seed 4). node-2 is paused and node-1 isolated while a change is
    appended: it reaches no majority, and the writer can neither tell whether the copies that did
    not answer stored it nor recover (only its own node answers): the outcome is unknown and the
    writer is left unrecovered. It did not restart, so Liveness saw nothing, and nothing started it
    again: it refused every change for good. The controller's check now tends the writer with the
    copies it keeps, and a writer not recovered recovers from them."""
    schedule = Schedule(
        seed=4,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=3,
        policy='interval:100',
        ops=(
            Pause(800, 'node-2', 5812),
            Isolate(1767, 'node-1', 6145),
            Configure(2245, 'session_trees'),
        ),
        faults_end_ms=10000,
        spike_rate=0.01,
        config_log=True,
    )
    run(schedule)
    broken = regressed(schedule, monkeypatch, (ConfigWriter, "tend", _tend_without("recovery")))
    assert "the configuration log's writer has not recovered" in broken, broken


def test_a_copy_that_missed_a_change_is_caught_up_without_another_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in ``ConfigWriter.tend`` (seed 25). node-1's copy crashes as a change is appended: the
    change commits on the other two, and node-1's copy misses it. A copy was caught up only before
    the next change, and none came: it stayed behind for good (one more node lost, and the log
    would have had no majority holding the change). Each check now catches up a copy that missed
    an entry."""
    schedule = Schedule(
        seed=25,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='always',
        ops=(
            CrashProcess(6412, 'config-agent@node-1'),
            Configure(6446, 'session_trees'),
        ),
        faults_end_ms=10000,
        config_log=True,
    )
    run(schedule)
    broken = regressed(schedule, monkeypatch, (ConfigWriter, "tend", _tend_without("catch-up")))
    assert "the configuration copy on node-1 is not caught up" in broken, broken


def test_a_writer_restarted_unseen_recovers_from_the_copies_it_is_tended_with(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in the controller's tending (seed 1949; first found as 515). The writer crashes at once,
    and with 0.1% of messages lost the liveness probe that would have seen its restart is lost: Ray
    started it again empty, knowing no copies, and nothing started it (Liveness sends a probe again
    only after 30 s, and then finds the new incarnation as its first answer): every change was
    refused for good. Tending now carries the copies the controller keeps, and a writer that has not
    recovered recovers from them. (The same carrying mends a lost ``set_agents``, seeds 8526 and
    6223: ``test_config_writer.py``'s tending test.)"""
    schedule = Schedule(
        seed=1949,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='always',
        ops=(
            CrashProcess(216, 'configuration-log'),
        ),
        faults_end_ms=10000,
        spike_rate=0.01,
        loss_rate=0.001,
        config_log=True,
    )
    run(schedule)

    def tended_with_its_own(self: SimConfiguration, cluster: Any, nodes: Any) -> None:
        """Tending with the copies the writer has (none, once restarted), not the controller's."""
        if self.writer is None:
            return
        if self.copies_on(nodes):
            cluster.call(self.writer, "set_agents", dict(self.agents))
        elif self.sim.world.now_ns - self.tended_ns >= TEND_EVERY * SECOND:
            self.tended_ns = self.sim.world.now_ns
            cluster.call(self.writer, "tend", dict(self.writer.agents))

    broken = regressed(schedule, monkeypatch, (SimConfiguration, "follow_nodes", tended_with_its_own))
    assert "the configuration log's writer has not recovered" in broken, broken


def test_the_writers_start_is_asked_again_when_its_answer_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed in ``ControllerActor._start_config_log`` (seed 143). No fault but 1% of messages lost:
    the answer to the writer's start was lost, and the controller waited its whole start bound
    (120 s) for it. It now asks again every ``LOG_START_ATTEMPT`` (30 s) within that bound."""
    schedule = Schedule(
        seed=143,
        nodes=('node-0', 'node-1', 'node-2'),
        partitions=2,
        policy='always',
        ops=(
        ),
        faults_end_ms=10000,
        loss_rate=0.01,
        config_log=True,
    )
    run(schedule)
    broken = regressed(schedule, monkeypatch, (configuration, "LOG_START_ATTEMPT", 1e9))
    assert "the controller is not running" in broken, broken


class _Replica:
    """What the checker reads of a replica acknowledging a write."""

    def __init__(self, name: str, node: str, epoch: int, held: set[int]) -> None:
        self.name, self.index, self.running, self.held = name, 0, True, held
        self.node = SimpleNamespace(name=node)
        self.state = SimpleNamespace(epoch=epoch)

    def __repr__(self) -> str:
        return self.name


def test_a_primary_replaced_may_acknowledge_late_what_its_backup_confirmed_before() -> None:
    """The checker's rule, refined (seed 4997, when the configuration log began to run and shifted
    the timing): two nodes; nothing from node-0 reaches node-1 for 5 s. Partition 0's primary on
    node-1 sends a write to its backup on node-0, which stores it and confirms; the confirmation
    waits in the cut. node-1 is declared lost, node-0's replica takes over at epoch 2 (holding the
    write) and acknowledges writes of its own; the cut heals while node-1 is paused, and when it
    runs again its old primary reads the confirmation and acknowledges the write, late. The write
    is safe -- the new primary holds it -- but the checker required an acknowledging replica to
    hold every write acknowledged so far, the newer epoch's too. It now requires those of its epoch
    or older, and the write to be held by the newest primary (the convergence still requires the
    final primary to hold every acknowledged write). The schedule no longer draws those timings
    since the configuration log changed, so the rule is tested on its own."""
    checker = Checker(World(4997), 1, [])
    new = _Replica("partition-0@node-0#2/1", "node-0", 2, {10, 25})
    old = _Replica("partition-0@node-1#1/1", "node-1", 1, {10})
    checker.replicas += [old, new]
    checker.acknowledged(new, 25, "k/0")  # type: ignore[arg-type]
    checker.acknowledged(old, 10, "k/2")  # type: ignore[arg-type]  # late: the new primary holds it
    with pytest.raises(Violation, match=r"lacks acknowledged writes \[25\]"):
        checker.holds(old, "under the old rule")  # type: ignore[arg-type]  # every write acknowledged so far
    old.held.add(11)  # confirmed by the backup before it took over, which then lost it: lost
    with pytest.raises(Violation, match="acknowledges write 11 late, which the newer primary .* lacks"):
        checker.acknowledged(old, 11, "k/3")  # type: ignore[arg-type]
    lagging = _Replica("partition-0@node-1#1/1", "node-1", 2, {10})  # at the newer epoch: it must hold 25
    with pytest.raises(Violation, match="two primaries|lacks acknowledged writes"):
        checker.acknowledged(lagging, 12, "k/4")  # type: ignore[arg-type]
