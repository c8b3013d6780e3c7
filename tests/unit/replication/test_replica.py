"""The replication state machine (replication/replica.py): every input in every role, then random
histories of two and three replicas over a modelled network, checked against an oracle of what
each backup held when it acknowledged."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replication.replica import (
    DROP_LINKS,
    NOTHING,
    RELEASE,
    STOP_CONNECTING,
    Abort,
    Address,
    AwaitPrime,
    Connect,
    DropLinks,
    Image,
    NotCaughtUp,
    Refuse,
    Release,
    ReplicaState,
    Role,
    SaveEpoch,
    Send,
    StaleEpoch,
    StopConnecting,
)
from topics.protocol import Follow, Hello, Prime, ProtocolError, Replicate, Superseded

B = Address("b", 2, "secret-b")


def typed(effects: Any) -> list[tuple[type, Any]]:
    """Effects with their types: effects of the same fields compare equal (``SaveEpoch(3) ==
    AwaitPrime(3)``, ``RELEASE == DROP_LINKS``), as the tuples they are."""
    return [(type(effect), effect) for effect in effects]


class Stream:
    """A stream token: compared by identity, named for failure messages."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Stream({self.name})"


Replica = ReplicaState[Stream, str]


def replica(role: Role = Role.PRIMARY, epoch: int = 1, sequence: int = 0, states: int = 3, *,
            journaled: bool = True, chunk: int = 2) -> Replica:
    return ReplicaState("partition 0", role=role, epoch=epoch, sequence=sequence, journaled=journaled,
                        image=lambda: Image([[i] for i in range(states)], 77), prime_chunk=chunk, retry_ms=200)


def released(r: Replica) -> list[str]:
    out = []
    while (w := r.release()) is not None:
        out.append(w)
    return out


def connected(r: Replica, name: str = "s1") -> tuple[Stream, tuple[Any, ...]]:
    """Connect the attempt under way: the stream and the frames written on it."""
    s = Stream(name)
    (send,) = r.connected(r.connecting, s)
    assert isinstance(send, Send) and send.stream is s
    return s, send.frames


def with_backup(**options: Any) -> tuple[Replica, Stream]:
    """A primary at epoch 2 whose backup is connected and has acknowledged its prime."""
    r = replica(**options)
    r.set_backup(2, B)
    s, _ = connected(r)
    assert r.acknowledged(s, r.prime_id) and r.caught_up
    return r, s


#: answers a batch wrote at once (not held)
released_now: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    released_now.clear()


def batch(r: Replica, answer: str, changes: int = 1, journaled: int = 1) -> Replicate | None:
    """A batch on a primary, as the shell runs it: replicate (or journal alone), then hold its answer."""
    frame = None
    if r.replicating:
        frame = r.replicate(1000, [[answer]] * changes, list(range(journaled, changes)), [], 5, journaled)
    else:
        r.appended(journaled)
    if not r.hold(answer):
        released_now.append(answer)
    return frame


# -- the primary alone ---------------------------------------------------------------------------


def test_a_primary_alone_answers_at_once_and_numbers_its_journal() -> None:
    r = replica(sequence=10)
    assert r.accepts_batches() and not r.replicating and r.role == "primary"
    assert batch(r, "w1", changes=3, journaled=2) is None
    assert released_now == ["w1"] and r.sequence == 12 and r.acknowledged_sequence() == 12
    assert r.acknowledged(Stream("x"), 1) is False and r.release() is None
    assert r.backup_lost(Stream("x")) == NOTHING and r.superseded(Stream("x"), 9) == NOTHING


def test_an_unjournaled_replica_numbers_nothing() -> None:
    r = replica(sequence=10, journaled=False)
    assert r.sequence == 0
    r.set_backup(1, B)
    _, frames = connected(r)
    assert [f.sequence for f in frames[1:]] == [0, 0]
    frame = batch(r, "w", changes=2, journaled=0)
    assert frame is not None and frame.first == 0 and r.sequence == 0 and r.acknowledged_sequence() == 0


def test_a_handover_with_nothing_waiting_is_done_at_once_and_stops_applying() -> None:
    r = replica()
    assert r.handover() is False and r.handing_over and r.drained
    assert not r.accepts_batches()
    assert r.hold("moved") is False  # a MOVED answer goes out at once when nothing waits


# -- the primary with a backup -------------------------------------------------------------------


def test_set_backup_primes_it_in_chunks_then_connects() -> None:
    r = replica(sequence=4, states=5)
    effects = r.set_backup(2, B)
    assert typed(effects) == typed([SaveEpoch(2), Connect(B, 0, 1)])
    assert r.epoch == 2 and r.backup == B and r.stream is None and not r.caught_up
    assert r.pending == [Prime(1, 4, [[0], [1]], False, 77), Prime(2, 4, [[2], [3]], False, 77),
                         Prime(3, 4, [[4]], True, 77)]
    assert r.prime_id == 3 and r.sent == 3


def test_an_empty_state_is_one_final_prime_chunk() -> None:
    r = replica(states=0)
    r.set_backup(1, B)
    assert r.pending == [Prime(1, 0, [], True, 77)]


def test_frames_wait_for_the_stream_then_follow_the_follow() -> None:
    r = replica(sequence=4, states=1)
    r.set_backup(2, B)
    assert batch(r, "w1", changes=2, journaled=1) is None  # waits behind the prime
    assert r.pending[-1] == Replicate(2, 5, 1000, [["w1"], ["w1"]], [1], [], 5) and r.sequence == 5
    s, frames = connected(r)
    assert frames[0] == Follow("secret-b", 2) and [f.id for f in frames[1:]] == [1, 2]
    assert r.pending == [] and r.stream is s and r.connecting == 0
    frame = batch(r, "w2")
    assert frame is not None and frame.id == 3 and frame.first == 6  # written now, on the stream


def test_answers_wait_for_the_acknowledgement_of_their_frame_and_go_out_in_order() -> None:
    r, s = with_backup()
    for w in ("w1", "w2", "w3"):
        batch(r, w)
    assert released_now == [] and r.waiting() == 3 and r.lag() == 3
    assert not r.hold("moved-later") is False  # held behind them, though it replicated nothing
    first = r.outbox[0][0]
    assert r.acknowledged(s, first + 1)
    assert released(r) == ["w1", "w2"]
    assert r.acknowledged(s, first + 1) is False  # stale
    assert r.acknowledged(Stream("other"), first + 2) is False  # a stream this primary left
    with pytest.raises(ProtocolError, match="never sent"):
        r.acknowledged(s, r.sent + 1)
    assert r.acknowledged(s, r.sent) and released(r) == ["w3", "moved-later"] and r.drained


def test_caught_up_once_the_final_prime_chunk_is_acknowledged() -> None:
    r = replica(states=4)
    r.set_backup(1, B)
    s, _ = connected(r)
    assert not r.acknowledged(s, 1) and not r.caught_up and r.acked == 1  # nothing to release yet
    assert r.acknowledged(s, r.prime_id) and r.caught_up


def test_a_failed_connection_is_tried_again_and_stale_attempts_change_nothing() -> None:
    r = replica()
    r.set_backup(1, B)
    attempt = r.connecting
    assert r.connect_failed(attempt) == [Connect(B, 200, attempt + 1)]
    assert r.connect_failed(attempt) == NOTHING
    late = Stream("late")
    assert r.connected(attempt, late) == [Abort(late)] and r.stream is None
    s, _ = connected(r)
    assert r.stream is s


def test_a_lost_backup_stream_is_primed_again_and_its_final_ack_releases_what_waited() -> None:
    r, s = with_backup(sequence=7)
    batch(r, "w1")
    batch(r, "w2")
    held = [i for i, _ in r.outbox]
    assert r.backup_lost(Stream("old")) == NOTHING
    effects = r.backup_lost(s)
    assert effects == [Connect(B, 200, r.connecting)] and r.stream is None and not r.caught_up
    assert min(f.id for f in r.pending) > max(held)  # the prime carries what the answers reveal
    assert all(isinstance(f, Prime) and f.sequence == 9 for f in r.pending)
    s2, _ = connected(r, "s2")
    assert r.acknowledged(s, r.sent) is False  # the old stream's ack counts for nothing
    assert released(r) == []
    assert r.acknowledged(s2, r.prime_id) and released(r) == ["w1", "w2"]


def test_answers_that_waited_go_out_only_with_the_final_prime_chunk() -> None:
    """A primed backup (its store is the old prime's) whose stream broke is primed again; if
    its primary died after the first chunk's acknowledgement, it would be promoted without the
    answered writes. The random histories below found it (the first chunk's acknowledgement
    released what waited); now nothing goes out before the final chunk's."""
    r, s = with_backup(states=3)  # two chunks of two
    batch(r, "w1")
    r.backup_lost(s)
    s2, frames = connected(r, "s2")
    assert [type(f) for f in frames[1:]] == [Prime, Prime]
    assert not r.acknowledged(s2, frames[1].id)
    assert released(r) == []
    assert r.acknowledged(s2, frames[2].id) and released(r) == ["w1"]


def test_going_on_alone_releases_everything_that_waited() -> None:
    r, s = with_backup()
    batch(r, "w1")
    batch(r, "w2")
    assert typed(r.set_backup(3, None)) == typed([SaveEpoch(3), Abort(s), RELEASE])
    assert released(r) == ["w1", "w2"] and r.backup is None and r.acked == r.sent
    batch(r, "w3")
    assert released_now == ["w3"]


def test_set_backup_while_connecting_stops_the_attempt() -> None:
    r = replica()
    r.set_backup(1, B)
    assert r.set_backup(1, None) == [STOP_CONNECTING, RELEASE] and r.connecting == 0 and r.pending == []


def test_a_stale_placement_is_refused_before_anything_changes() -> None:
    r, s = with_backup()
    batch(r, "w1")
    before = (r.epoch, r.backup, r.stream, r.sent, r.acked, list(r.outbox))
    commands: list[Callable[[], object]] = [
        lambda: r.set_backup(1, None), lambda: r.become_backup(1), lambda: r.become_primary(1, None, None)]
    for command in commands:
        with pytest.raises(StaleEpoch, match="partition 0 is at epoch 2, not 1"):
            command()
        assert (r.epoch, r.backup, r.stream, r.sent, r.acked, list(r.outbox)) == before


def test_acknowledged_sequence_follows_the_backup() -> None:
    r, s = with_backup(sequence=10)
    assert r.acknowledged_sequence() == 10  # nothing waits: all of it
    batch(r, "w1", changes=2, journaled=2)  # records 11, 12
    batch(r, "w2", changes=1, journaled=0)  # volatile only: no record
    batch(r, "w3", changes=1, journaled=1)  # record 13
    assert r.acknowledged_sequence() == 0  # as before the extraction: no batch acknowledged yet
    assert r.acknowledged(s, r.outbox[0][0]) and r.acknowledged_sequence() == 12
    assert r.acknowledged(s, r.sent) and r.acknowledged_sequence() == 13


# -- fencing ---------------------------------------------------------------------------------------


def test_a_superseded_primary_goes_idle_and_drops_what_waited() -> None:
    r, s = with_backup()
    batch(r, "w1")
    assert r.superseded(s, 2) == NOTHING  # not newer
    assert r.superseded(Stream("old"), 5) == NOTHING  # not the current stream
    assert r.superseded(s, 5) == [Abort(s), DROP_LINKS]
    assert r.role is Role.IDLE and r.epoch == 2 and r.backup is None and r.stream is None
    assert r.outbox == deque() and r.acked == r.sent and released(r) == []
    assert not r.accepts_batches() and r.hold("moved") is False
    assert r.acknowledged(s, r.sent) is False and r.superseded(s, 6) == NOTHING


def test_a_backup_answers_a_follow_of_an_older_epoch_superseded() -> None:
    r = replica(role=Role.BACKUP, epoch=5)
    old = Stream("old")
    assert r.follow(old, 4) == [Refuse(old, Superseded(5))] and r.follower is None
    with pytest.raises(ProtocolError, match="this replica follows no primary"):
        r.from_primary(old, Prime(1, 0, [], True))


@pytest.mark.parametrize("role", [Role.PRIMARY, Role.IDLE])
def test_only_a_backup_follows(role: Role) -> None:
    r = replica(role=role, epoch=3)
    old = Stream("old")
    assert r.follow(old, 2) == [Refuse(old, Superseded(3))]  # fenced, whatever the role
    with pytest.raises(ProtocolError, match=f"cannot be followed by a {role.value} of epoch 3"):
        r.follow(Stream("p"), 3)


# -- commands --------------------------------------------------------------------------------------


def test_a_demoted_primary_drops_its_links_unless_it_handed_over() -> None:
    r, s = with_backup()
    batch(r, "w1")
    assert typed(r.become_backup(3)) == typed([AwaitPrime(3), Abort(s), DROP_LINKS])
    assert r.role is Role.BACKUP and not r.primed and r.outbox == deque() and r.acked == r.sent
    assert released(r) == []

    r, s = with_backup()
    assert r.handover() is False
    assert typed(r.become_backup(3)) == typed([SaveEpoch(3), Abort(s)]) and not r.handing_over  # drained: whole


def test_a_backup_saves_no_epoch_before_its_prime_but_awaits_it() -> None:
    """Its journal holds an older state (or none) until the prime: it is marked first, and no
    SaveEpoch says that it holds the new epoch's state. A primary that handed over and drained
    saves it, unmarked: its journal holds the state the new primary starts from."""
    demoted, _ = with_backup()
    batch(demoted, "w1")  # not drained: the new primary may not hold w1
    for r in (replica(role=Role.IDLE, epoch=1), demoted):
        effects = r.become_backup(3)
        assert type(effects[0]) is AwaitPrime and effects[0].epoch == 3
        assert not [e for e in effects if type(e) is SaveEpoch] and r.epoch == 3
    drained, _ = with_backup()
    assert drained.handover() is False
    effects = drained.become_backup(3)
    assert typed(effects[:1]) == typed([SaveEpoch(3)]) and not [e for e in effects if type(e) is AwaitPrime]


def test_a_handover_waits_until_the_outbox_drains() -> None:
    r, s = with_backup()
    batch(r, "w1")
    batch(r, "w2")
    assert r.handover() is True and not r.drained and not r.accepts_batches()
    assert r.hold("moved") is True  # behind the answers it must not overtake
    assert r.acknowledged(s, r.outbox[0][0]) and released(r) == ["w1"] and not r.drained
    assert r.acknowledged(s, r.sent) and released(r) == ["w2", "moved"] and r.drained


def test_a_handover_that_times_out_leaves_the_primary_handing_over() -> None:
    """The shell gives up waiting; nothing tells the state machine (F3, fixed in step 7)."""
    r, _ = with_backup()
    batch(r, "w1")
    assert r.handover() is True
    assert r.handing_over and not r.accepts_batches() and r.role is Role.PRIMARY


def test_become_primary_refuses_an_unprimed_backup_and_a_damaged_journal() -> None:
    r = replica(role=Role.BACKUP)
    with pytest.raises(NotCaughtUp, match="partition 0's backup was never primed"):
        r.become_primary(2, None, None)
    r = replica(role=Role.IDLE)
    with pytest.raises(NotCaughtUp, match="partition 0: its journal was damaged"):
        r.become_primary(2, None, "its journal was damaged")
    assert r.role is Role.IDLE and r.epoch == 1
    r = replica(role=Role.PRIMARY)
    r.become_primary(2, None, "its journal was damaged")  # already the primary: it holds the partition
    assert r.role is Role.PRIMARY


def test_a_primed_backup_takes_over_and_drops_its_primary_stream() -> None:
    r = replica(role=Role.BACKUP, epoch=2, sequence=0)
    s = Stream("p")
    r.follow(s, 2)
    r.from_primary(s, Prime(1, 9, [[1]], True))
    assert r.prime_part(Prime(1, 9, [[1]], True), ["state"]) == (["state"], [])
    r.primed_at(9)
    effects = r.become_primary(3, B, None)
    assert typed(effects[:2]) == typed([SaveEpoch(3), Abort(s)]) and isinstance(effects[-1], Connect)
    assert r.role is Role.PRIMARY and r.since == 3 and r.follower is None and r.sequence == 9
    assert all(isinstance(f, Prime) and f.sequence == 9 for f in r.pending)
    r.become_primary(4, None, None)
    assert r.since == 3  # still the primary since epoch 3


def test_an_idle_replica_becomes_primary_alone() -> None:
    r = replica(role=Role.IDLE, epoch=0)
    assert not r.accepts_batches()
    assert typed(r.become_primary(1, None, None)) == typed([SaveEpoch(1), RELEASE])
    assert r.accepts_batches() and r.since == 1


def test_stop_drops_the_backup_stream_or_the_attempt() -> None:
    r, s = with_backup()
    assert r.stop() == [Abort(s)] and r.backup == B
    r = replica()
    r.set_backup(1, B)
    assert r.stop() == [STOP_CONNECTING]


# -- the backup ------------------------------------------------------------------------------------


def primed_backup(sequence: int = 9) -> tuple[Replica, Stream]:
    r = replica(role=Role.IDLE)
    assert typed(r.become_backup(2)) == typed([AwaitPrime(2)]) and r.role is Role.BACKUP and not r.primed
    s = Stream("p")
    assert r.follow(s, 2) == NOTHING and r.follower is s
    for n, final in enumerate((False, True), 1):
        frame = Prime(n, sequence, [[n]], final)
        r.from_primary(s, frame)
        got = r.prime_part(frame, [f"state-{n}"])
        assert got == ((["state-1", "state-2"], []) if final else None)
        assert r.primed is False
    r.primed_at(sequence)
    assert r.primed and r.sequence == sequence and r.priming is None
    return r, s


def test_a_backup_is_primed_in_chunks_and_continues_its_primary_numbering() -> None:
    r, s = primed_backup(9)
    frame = Replicate(3, 10, 0, [[1], [2]], [], [])
    r.from_primary(s, frame)
    r.journal_from(10, 2)
    assert r.sequence == 11
    r.journal_from(0, 0)  # nothing journaled: nothing to check
    with pytest.raises(ProtocolError, match="record 13 follows record 11"):
        r.journal_from(13, 1)
    with pytest.raises(ProtocolError, match="record 11 follows record 11"):
        r.journal_from(11, 1)  # a duplicate
    assert r.sequence == 11


def test_a_backup_refuses_a_replicated_batch_before_a_complete_prime() -> None:
    r = replica(role=Role.IDLE)
    r.become_backup(2)
    s = Stream("p")
    r.follow(s, 2)
    with pytest.raises(ProtocolError, match="before the prime is complete"):
        r.from_primary(s, Replicate(1, 1, 0, [], []))
    r.prime_part(Prime(1, 0, [], False), [])
    with pytest.raises(ProtocolError, match="before the prime is complete"):
        r.from_primary(s, Replicate(2, 1, 0, [], []))


def test_a_backup_refuses_other_frames_and_other_streams() -> None:
    r, s = primed_backup()
    with pytest.raises(ProtocolError, match="does not send Hello"):
        r.from_primary(s, Hello("gw", "x"))
    with pytest.raises(ProtocolError, match="follows no primary on this stream"):
        r.from_primary(Stream("other"), Replicate(3, 10, 0, [], []))


def test_a_new_follower_replaces_the_old_and_starts_a_new_prime() -> None:
    r, s = primed_backup()
    s2 = Stream("p2")
    r.prime_part(Prime(3, 9, [[1]], False), ["partial"])
    assert r.follow(s2, 3) == [Abort(s)] and r.follower is s2 and r.priming is None
    with pytest.raises(ProtocolError):
        r.from_primary(s, Replicate(4, 10, 0, [], []))
    r.follower_lost(s)  # the old stream's end: nothing
    assert r.follower is s2
    r.follower_lost(s2)
    assert r.follower is None and r.priming is None


def test_become_backup_keeps_a_follower_of_its_epoch_but_unprimes_it() -> None:
    """The stream of a primary that followed at the placement's epoch stays; its batches are
    refused, but a new prime from it is taken."""
    r, s = primed_backup()
    assert typed(r.become_backup(2)) == typed([AwaitPrime(2)])  # its journal awaits the new prime
    assert r.follower is s and not r.primed
    with pytest.raises(ProtocolError, match="before the prime is complete"):
        r.from_primary(s, Replicate(3, 10, 0, [], []))
    r.from_primary(s, Prime(4, 9, [], True))
    assert r.prime_part(Prime(4, 9, [], True), []) == ([], [])
    r.primed_at(9)
    assert r.primed and r.epoch == 2


def test_become_backup_at_a_newer_epoch_drops_an_older_follower() -> None:
    """F4: a follower of epoch 2 is dropped by the placement at epoch 3, so that a prime in
    flight on it never primes the backup at epoch 3 (seed 632 of the simulator)."""
    r, s = primed_backup()
    assert typed(r.become_backup(3)) == typed([AwaitPrime(3), Abort(s)])
    assert r.follower is None and not r.primed and r.priming is None
    with pytest.raises(ProtocolError, match="follows no primary"):
        r.from_primary(s, Prime(4, 9, [], True))


def test_a_backup_refuses_an_older_placement_and_keeps_following() -> None:
    r, s = primed_backup()
    with pytest.raises(StaleEpoch):
        r.become_backup(1)
    assert r.follower is s and r.primed


# -- random histories ------------------------------------------------------------------------------


class Held(NamedTuple):
    serial: int  # the order the shell held or wrote it in
    id: int  # sent when held
    token: int | None  # the batch's change, if it made one


class Link:
    """A modelled TCP stream from a primary to a backup: ordered, lossless until closed."""

    def __init__(self, number: int, primary: str, backup: str) -> None:
        self.name = f"{primary}->{backup}#{number}"
        self.primary, self.backup = primary, backup
        self.down: deque[Any] = deque()  # frames to the backup
        #: to the primary, with what the backup held (None: a partial prime, F5)
        self.up: deque[tuple[Any, frozenset[int] | None]] = deque()
        self.open = True
        self.following = False  # the backup took its follow
        self.ignored = False  # the backup refused it: what follows is dropped

    def __repr__(self) -> str:
        return self.name


class Node:
    def __init__(self, name: str, journaled: bool, role: Role) -> None:
        self.name = name
        self.address = Address(name, 1, f"secret-{name}")
        self.tokens: set[int] = set()  # what its store holds
        self.state: ReplicaState[Link, Held] = ReplicaState(
            f"partition {name}", role=role, epoch=0, sequence=0, journaled=journaled,
            image=lambda: Image([[t] for t in sorted(self.tokens)], 0), prime_chunk=2, retry_ms=200)
        self.connect: Connect | None = None
        self.saved = 0  # the durable epoch
        self.awaiting: int | None = None  # the epoch its journal awaits a prime at (AwaitPrime)
        self.serials = 0
        self.released = 0  # the last serial written
        self.last_id = 0  # the last frame id seen leaving
        self.dropped: set[int] = set()  # serials dropped unanswered: never to be written
        self.fenced = False


class World:
    """Replicas driven as the shell and the controller drive them, over modelled streams."""

    def __init__(self, names: str, journaled: bool) -> None:
        self.nodes = {n: Node(n, journaled, Role.IDLE) for n in names}
        self.links: list[Link] = []
        self.epoch = 1
        self.tokens = 0
        #: (primary, frame id) -> the primary's journal sequence once it made the frame
        self.sequence_at: dict[tuple[str, int], int] = {}
        self.lost: list[Link] = []
        self.stats = {"acked": 0, "alone": 0, "fenced": 0, "primed": 0, "partial": 0}
        a, b = self.nodes[names[0]], self.nodes[names[1]]
        self.run(b, b.state.become_backup(1))
        self.run(a, a.state.become_primary(1, b.address, None))

    # -- effects

    def run(self, node: Node, effects: Any) -> None:
        for effect in effects:
            match effect:
                case SaveEpoch(epoch):
                    assert epoch >= node.saved, "an epoch went back"
                    node.saved, node.awaiting = epoch, None
                case AwaitPrime(epoch):
                    assert epoch >= node.saved, "a backup awaits a prime of an older epoch"
                    node.awaiting = epoch
                case Connect():
                    node.connect = effect
                case StopConnecting():
                    node.connect = None
                case Send(link, frames):
                    assert link.primary == node.name and type(frames[0]) is Follow
                    assert frames[0].epoch <= node.state.epoch
                    for frame in frames[1:]:
                        assert isinstance(frame, (Prime, Replicate))
                        self.leaving(node, frame)
                    link.down.extend(frames)
                case Abort(link):
                    self.close(link)
                case Refuse(link, answer):
                    link.ignored = True
                    link.up.append((answer, None))
                case Release():
                    self.stats["alone"] += 1
                    self.release(node, None, None)
                case DropLinks():
                    pass
                case _:
                    raise AssertionError(effect)

    def leaving(self, node: Node, frame: Prime | Replicate) -> None:
        assert frame.id > node.last_id, f"frame ids went back: {frame.id} after {node.last_id}"
        assert frame.id <= node.state.sent
        node.last_id = frame.id

    def close(self, link: Link) -> None:
        if link.open:
            link.open = False
            self.lost.append(link)

    def settle(self) -> None:
        """Each end of a closed stream hears of it (as connection_lost comes later)."""
        while self.lost:
            link = self.lost.pop(0)
            primary = self.nodes[link.primary]
            self.run(primary, primary.state.backup_lost(link))
            self.nodes[link.backup].state.follower_lost(link)

    def release(self, node: Node, ack: int | None, held: frozenset[int] | None) -> None:
        """``ack``: the id acknowledged (None: the controller let the primary go on alone);
        ``held``: what the backup held then (None: it had part of a prime, see F5)."""
        while (h := node.state.release()) is not None:
            assert h.serial not in node.dropped, "an answer dropped unanswered went out"
            assert not node.fenced, "a fenced primary released an answer"
            assert h.serial > node.released, "answers overtook each other"
            node.released = h.serial
            if ack is not None:
                assert h.id <= ack, f"released {h} before its frame was acknowledged ({ack})"
                if held is None:
                    self.stats["partial"] += 1
                else:
                    assert h.token is None or h.token in held, f"released {h}: the backup did not hold it"

    def hold(self, node: Node, token: int | None) -> None:
        node.serials += 1
        h = Held(node.serials, node.state.sent, token)
        if node.state.hold(h):
            return
        assert not node.state.outbox, "an answer went out ahead of one that waits"
        assert token is None or not node.state.replicating, "a change answered before the backup had it"
        node.released = h.serial

    # -- inputs

    def batch(self, node: Node, changes: int, journaled: int, recent: bool) -> None:
        state = node.state
        if not state.accepts_batches():
            self.hold(node, None)  # MOVED
            return
        token = None
        if changes:
            self.tokens += 1
            token = self.tokens
            node.tokens.add(token)
        journaled = min(journaled, changes) if state.journaled else 0
        if state.replicating:
            if changes or recent:
                frame = state.replicate(0, [[token, i] for i in range(changes)], list(range(journaled, changes)),
                                        [["m"]] if recent else [], 0, journaled)
                self.sequence_at[node.name, state.sent] = state.sequence
                if frame is not None:
                    assert state.stream is not None and state.stream.open
                    self.leaving(node, frame)
                    state.stream.down.append(frame)
        else:
            state.appended(journaled)
        self.hold(node, token)

    def connect(self, node: Node, ok: bool) -> None:
        effect, node.connect = node.connect, None
        if effect is None:
            return
        assert effect.address.host != node.name
        if not ok:
            self.run(node, node.state.connect_failed(effect.attempt))
            return
        link = Link(len(self.links), node.name, effect.address.host)
        self.links.append(link)
        self.run(node, node.state.connected(effect.attempt, link))

    def down(self, link: Link) -> None:
        """The next frame on ``link`` to its backup."""
        frame = link.down.popleft()
        node = self.nodes[link.backup]
        state = node.state
        if link.ignored:
            return
        try:
            if type(frame) is Follow:
                assert frame.secret == node.address.secret and not link.following
                effects = state.follow(link, frame.epoch)
                link.following = state.follower is link
                self.run(node, effects)
                return
            if not link.following:
                raise ProtocolError("not a follower")
            state.from_primary(link, frame)
            if type(frame) is Replicate:
                node.tokens.update(c[0] for c in frame.changes)
                journaled = len(frame.changes) - len(frame.volatile)
                if journaled:
                    before = state.sequence
                    state.journal_from(frame.first, journaled)
                    assert not state.journaled or (frame.first == before + 1 and state.sequence == before + journaled)
                expected = self.sequence_at[link.primary, frame.id]
            else:
                got = state.prime_part(frame, [s[0] for s in frame.states])
                if got is None:  # acknowledged; the backup holds none of it yet, and nothing is released
                    link.up.append((frame, None))
                    return
                node.tokens = set(got[0])
                if node.awaiting is not None:  # the journal's reset records the epoch it awaited
                    node.saved, node.awaiting = node.awaiting, None
                state.primed_at(frame.sequence)
                self.stats["primed"] += 1
                expected = frame.sequence
            # the backup's journal continues its primary's numbering exactly
            assert state.sequence == (expected if state.journaled else 0)
        except ProtocolError:
            self.close(link)
            return
        link.up.append((frame, frozenset(node.tokens)))

    def up(self, link: Link) -> None:
        """The next frame on ``link`` to its primary."""
        frame, held = link.up.popleft()
        node = self.nodes[link.primary]
        state = node.state
        if type(frame) is Superseded:
            waiting = {h.serial for _, h in state.outbox}
            effects = state.superseded(link, frame.epoch)
            if effects:
                node.dropped |= waiting
                self.stats["fenced"] += 1
                node.fenced = True
                assert not state.outbox and state.role is Role.IDLE
            self.run(node, effects)
            self.close(link)
            return
        try:
            fresh = state.acknowledged(link, frame.id)
        except ProtocolError:
            self.close(link)
            return
        if fresh:
            self.stats["acked"] += 1
            self.release(node, frame.id, held)

    def command(self, node: Node, kind: str, delta: int, backup: Node | None) -> None:
        state = node.state
        epoch = max(0, self.epoch + delta - 1)
        before = (state.role, state.epoch, state.backup, state.stream, state.follower, state.sent, state.acked,
                  list(state.outbox), state.primed, state.handing_over, state.since, state.sequence)
        address = backup.address if backup is not None and backup is not node else None
        demoted = kind == "become_backup" and state.role is Role.PRIMARY
        waiting = {h.serial for _, h in state.outbox}
        try:
            if kind == "become_primary":
                effects = state.become_primary(epoch, address, None)
            elif kind == "become_backup":
                effects = state.become_backup(epoch)
            else:
                effects = state.set_backup(epoch, address)
        except (StaleEpoch, NotCaughtUp):
            after = (state.role, state.epoch, state.backup, state.stream, state.follower, state.sent, state.acked,
                     list(state.outbox), state.primed, state.handing_over, state.since, state.sequence)
            assert after == before, "a refused command changed the state"
            return
        if demoted:
            node.dropped |= waiting
        self.epoch = max(self.epoch, epoch)
        if kind != "become_backup":
            node.fenced = False  # the controller placed it again
        self.run(node, effects)

    def check(self) -> None:
        for node in self.nodes.values():
            state = node.state
            ids = [i for i, _ in state.outbox]
            # what waits is past the acknowledgements, or waits for the final chunk of a prime under way
            assert ids == sorted(ids) and all(i > state.acked or state.acked < state.prime_id for i in ids[:1])
            assert state.acked <= state.sent and state.prime_id <= state.sent
            assert not state.caught_up or state.acked >= state.prime_id
            assert state.stream is None or state.connecting == 0
            # durable: the epoch, or, while its journal awaits a prime, the epoch awaited
            assert (node.saved if node.awaiting is None else node.awaiting) == state.epoch, "an epoch not saved"
            assert node.awaiting is None or (state.role is Role.BACKUP and not state.primed)


PICK = st.integers(0, 5)  # which of the candidates (modulo their number)
#: op kinds, repeated by weight: mostly traffic, sometimes the controller
KINDS = ["deliver"] * 10 + ["batch"] * 5 + ["connect"] * 3 + ["break", "failover", "rebalance", "command", "handover"]
COMMANDS = ["become_primary", "become_backup", "set_backup"]
#: (kind, pick, count or epoch delta, count or command, flag, pick or None)
OPS = st.tuples(st.sampled_from(KINDS), PICK, st.integers(0, 3), st.integers(0, 3), st.booleans(),
                st.one_of(st.none(), PICK))


def pick(candidates: list[Any], i: int) -> Any:
    return candidates[i % len(candidates)] if candidates else None


def play(names: str, journaled: bool, ops: list[tuple[Any, ...]]) -> World:
    """Each op picks among what it can act on: batches go to a primary that applies (MOVED
    elsewhere), deliveries to a stream with a frame in flight, connections to one under way.
    ``failover`` and ``rebalance`` are the controller's sequences; the single commands, with
    epochs one behind to one ahead, are anyone's."""
    world = World(names, journaled)
    nodes = list(world.nodes.values())
    for kind, i, n, m, flag, other in ops:
        if kind == "batch":
            applying = [node for node in nodes if node.state.accepts_batches()]
            world.batch(pick(applying, i) if applying and i < 4 else pick(nodes, i), n, m, flag)
        elif kind == "connect":
            if (node := pick([node for node in nodes if node.connect is not None], i)) is not None:
                world.connect(node, flag or i < 4)
        elif kind == "deliver":
            flights = [(lk, "down") for lk in world.links if lk.open and lk.down]
            flights += [(lk, "up") for lk in world.links if lk.open and lk.up]
            if (flight := pick(flights, i)) is not None:
                (world.down if flight[1] == "down" else world.up)(flight[0])
        elif kind == "break":
            if (link := pick([lk for lk in world.links if lk.open], i)) is not None:
                world.close(link)
        elif kind == "handover":
            pick(nodes, i).state.handover()
        elif kind == "failover":  # a primed backup takes over; its old primary is not told
            if (node := pick([nd for nd in nodes if nd.state.role is Role.BACKUP and nd.state.primed], i)):
                backup = pick([nd for nd in nodes if nd is not node and nd.state.role is not Role.PRIMARY], n)
                if backup is not None and flag:
                    world.command(backup, "become_backup", 2, None)
                    world.command(node, "become_primary", 1, backup)
                else:
                    world.command(node, "become_primary", 2, None)
        elif kind == "rebalance":  # a primary hands over to its caught-up backup and follows it
            node = pick([nd for nd in nodes if nd.state.role is Role.PRIMARY and nd.state.caught_up], i)
            if node is not None and node.state.backup is not None:
                node.state.handover()
                world.command(node, "become_backup", 2, None)
                world.command(world.nodes[node.state.backup.host] if node.state.backup else node,
                              "become_primary", 1, node)
        else:
            world.command(pick(nodes, i), COMMANDS[m % 3], n % 3, None if other is None else pick(nodes, other))
        world.settle()
        world.check()
    return world


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["ab", "abc"]), st.booleans(), st.lists(OPS, min_size=20, max_size=120))
def test_random_histories_keep_the_replication_invariants(names: str, journaled: bool, ops: list[Any]) -> None:
    """Nothing is released before the backup acknowledged its frame (and held what it reveals)
    unless the controller let the primary go on alone; a fenced or demoted primary releases
    nothing that waited; answers never overtake each other; frame ids only grow; a backup's
    journal numbering has no gap and equals its primary's; refused commands change nothing."""
    play(names, journaled, ops)


def test_the_history_model_replicates_acknowledges_and_fences() -> None:
    """The model itself: a scripted history reaches the states the random ones are about."""
    deliver = ("deliver", 0, 0, 0, False, None)
    ops: list[tuple[Any, ...]] = [("connect", 0, 0, 0, True, None)] + [deliver] * 4
    ops += [("batch", 0, 2, 1, False, None), deliver, deliver]
    ops += [("failover", 0, 0, 0, False, None), ("batch", 0, 1, 1, False, None), ("connect", 0, 0, 0, True, None)]
    ops += [deliver] * 4 + [("batch", 4, 1, 1, False, None)]
    world = play("ab", True, ops)
    a, b = world.nodes["a"], world.nodes["b"]
    assert world.stats["acked"] >= 2 and world.stats["primed"] == 1 and world.stats["fenced"] == 1
    assert a.state.role is Role.IDLE and b.state.role is Role.PRIMARY and b.state.epoch == 2
    assert a.dropped == {2} and a.released == 3  # the held answer never went out; the MOVED one did
    assert b.state.sequence == 1 and a.tokens >= b.tokens


def test_a_prime_carries_the_recent_messages_after_the_states_in_chunks() -> None:
    r = ReplicaState("p0", role=Role.IDLE, epoch=0, sequence=4, journaled=True,
                     image=lambda: Image([[0], [1], [2]], 90, [["m", i] for i in range(5)]), prime_chunk=2)
    r.become_primary(1, None, None)
    r.set_backup(2, B)
    frames = list(r.pending)
    assert [(f.states, list(f.recent), f.final) for f in frames] == [
        ([[0], [1]], [], False), ([[2]], [], False), ([], [["m", 0], ["m", 1]], False),
        ([], [["m", 2], ["m", 3]], False), ([], [["m", 4]], True)]
    assert all(f.position == 90 for f in frames) and r.prime_id == frames[-1].id
    backup = ReplicaState("p0", role=Role.IDLE, epoch=0, sequence=0, journaled=True, image=lambda: Image([], 0))
    backup.become_backup(2)
    stream = Stream("from-primary")
    backup.follow(stream, 2)
    got = None
    for f in frames:
        backup.from_primary(stream, f)
        got = backup.prime_part(f, [s[0] for s in f.states], list(f.recent))
    assert got == ([0, 1, 2], [["m", i] for i in range(5)])
