"""The replication state machine of one partition replica, without I/O.

:class:`ReplicaState` decides everything primary/backup replication decides: the
replica's role and placement epoch, the ids of the frames to the backup, which answers
wait in the *outbox* and when they go out, the prime of a new backup, which primary a
backup follows, fencing, and a mirror of the journal's last sequence (so it numbers
``Replicate.first`` and ``Prime.sequence`` and checks a backup's records for gaps). A
shell (``actors.partition.Partition``, a simulated replica) owns the store, the journal,
the streams and the timers, feeds the state machine what happened, and carries out what
it answers, in order. Streams (``S``) are opaque tokens compared by identity; a batch's
answers (``W``) are opaque values released in order. Time is never read here.

Two kinds of calls:

* **Commands and stream events** (the controller's placement, a connection made or
  lost, a follow, a fence) return effects (:data:`Effect`), to be carried out in order:
  a :class:`SaveEpoch` or :class:`AwaitPrime` first, before anything else happens.
* **The data path** (once per batch and per acknowledgement) is direct and allocates
  nothing it need not: :meth:`ReplicaState.hold`, :meth:`~ReplicaState.replicate`,
  :meth:`~ReplicaState.appended`, :meth:`~ReplicaState.acknowledged` with
  :meth:`~ReplicaState.release`, and on a backup :meth:`~ReplicaState.from_primary`,
  :meth:`~ReplicaState.journal_from`, :meth:`~ReplicaState.prime_part` and
  :meth:`~ReplicaState.primed_at`.

The primary numbers every :class:`Prime` chunk and :class:`Replicate` frame with one
counter (``sent``) that never goes back, across backups. An answer held when ``sent``
was ``i`` goes out once the backup acknowledged ``i`` (it then holds what the answer
reveals) or once the controller says the primary goes on alone (``set_backup(None)``).
A new backup's prime gets ids above every held answer (the prime carries their state), so
the prime's acknowledgements release them: already the first chunk's, though the backup
holds the prime only once the final chunk is loaded (a known gap, kept as it is for now:
``test_answers_that_waited_go_out_only_with_the_final_prime_chunk``). A fenced or demoted
primary drops what waits: its fate is unknown.

Exceptions (the commands raise them before changing anything)::

    Exception
    ├── StaleEpoch       a placement older than the one the replica follows
    └── NotCaughtUp      a replica that does not hold the partition cannot be its primary
    topics.protocol.ProtocolError   a frame from a peer that breaks the protocol (the stream drops)
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeAlias, TypeVar

from topics.protocol import Follow, Prime, ProtocolError, Replicate, Superseded

#: topic states per :class:`~topics.protocol.Prime` frame
PRIME_CHUNK = 1000
#: milliseconds between attempts to reach a backup
RETRY_MS = 200

S = TypeVar("S")  # a stream: the primary's to its backup, or a backup's from its primary
W = TypeVar("W")  # a batch's answer and events, released in order


class Role(enum.StrEnum):
    """What a replica does now (a str: what ``position()`` and ``stats()`` say)."""

    PRIMARY = "primary"
    BACKUP = "backup"
    IDLE = "idle"


class Address(NamedTuple):
    """Where a backup listens for its primary, and the secret a follow says."""

    host: str
    port: int
    secret: str


class Image(NamedTuple):
    """The primary's whole state, taken between two batches: a new backup's prime."""

    states: list[list[Any]]  # encoded TopicStates
    position: int  # the newest message position
    recent: Sequence[list[Any]] = ()  # the recent messages (encoded events), oldest first


class StaleEpoch(Exception):
    """A placement older than the one this replica already follows."""


class NotCaughtUp(Exception):
    """A backup that does not hold its primary's state cannot take over."""


# -- effects: what the shell carries out, in order ---------------------------------------------


class SaveEpoch(NamedTuple):
    """Record ``epoch`` durably, before any other effect of the same call."""

    epoch: int


class AwaitPrime(NamedTuple):
    """Mark the journal durably as awaiting a prime from a primary of ``epoch``, before any
    other effect of the same call (:meth:`~replication.journal.Journal.await_prime`): a
    backup saves no epoch before it holds that epoch's state (a primary that handed over and
    drained holds it already: it saves it, unmarked). Until the prime's
    :meth:`~replication.journal.Journal.reset` lifts the mark and records ``epoch``, the
    journal keeps the epoch of the state it holds, and its replica, restarted, may become
    a primary only when told that no copy of the partition is newer."""

    epoch: int


class Connect(NamedTuple):
    """Connect to the backup at ``address`` after ``delay_ms``; then tell
    :meth:`ReplicaState.connected` or :meth:`ReplicaState.connect_failed` with ``attempt``."""

    address: Address
    delay_ms: int
    attempt: int


class StopConnecting(NamedTuple):
    """Give up the connection attempt under way (its outcome is never told)."""


class Send(NamedTuple, Generic[S]):
    """Write ``frames`` on ``stream``, in order (one write)."""

    stream: S
    frames: tuple[Follow | Prime | Replicate, ...]


class Abort(NamedTuple, Generic[S]):
    """Drop ``stream`` now."""

    stream: S


class Refuse(NamedTuple, Generic[S]):
    """Answer ``answer`` on ``stream``, ignore everything it sends after, and close it
    (not abort: the answer must get there)."""

    stream: S
    answer: Superseded


class Release(NamedTuple):
    """Write what :meth:`ReplicaState.release` hands out, until it says ``None``."""


class DropLinks(NamedTuple):
    """Drop every link: what they have in flight has an unknown fate."""


Effect: TypeAlias = (SaveEpoch | AwaitPrime | Connect | StopConnecting | Send[S] | Abort[S] | Refuse[S] | Release
                     | DropLinks)
NOTHING: tuple[()] = ()
STOP_CONNECTING = StopConnecting()
RELEASE = Release()
DROP_LINKS = DropLinks()


class ReplicaState(Generic[S, W]):
    """One replica's replication state. ``name`` goes into error messages ("partition 3");
    ``sequence`` is the journal's last record after recovery (0 and never used when not
    ``journaled``); ``image`` takes the primary's whole state now (called only while a command
    or :meth:`backup_lost` starts a backup's prime: between two batches)."""

    def __init__(
        self, name: str, *, role: Role, epoch: int, sequence: int, journaled: bool,
        image: Callable[[], Image], prime_chunk: int = PRIME_CHUNK, retry_ms: int = RETRY_MS,
    ) -> None:
        self.name = name
        self.role = role
        #: the placement epoch of this replica's role (the shell keeps it durable: SaveEpoch; a
        #: backup's once it is primed: AwaitPrime)
        self.epoch = epoch
        #: the epoch at which this replica last became the primary
        self.since = epoch
        #: a handover stops the primary applying (its batches are answered MOVED)
        self.handing_over = False
        self.journaled = journaled
        #: the journal's last sequence, as this state machine has numbered it
        self.sequence = sequence if journaled else 0
        self._image = image
        self.prime_chunk = prime_chunk
        self.retry_ms = retry_ms
        # -- the primary's side
        self.backup: Address | None = None
        #: the stream to the backup, once connected
        self.stream: S | None = None
        self.caught_up = False
        self.sent = 0  # the id of the last frame to the backup
        self.acked = 0  # the last id the backup acknowledged
        self.prime_id = 0  # the id of the final chunk of the last prime
        #: (sent when held, the answers): what waits for the backup, in order
        self.outbox: deque[tuple[int, W]] = deque()
        #: frames for the backup before its stream is up (written after the follow)
        self.pending: list[Prime | Replicate] = []
        self.connecting = 0  # the attempt under way (0: none)
        self._attempts = 0
        self._follow_epoch = 0
        #: (frame id, journal sequence after its batch): how far the backup holds the journal
        self.journaled_at: deque[tuple[int, int]] = deque()
        self._acked_sequence = 0
        # -- the backup's side
        self.follower: S | None = None
        self._follower_epoch = 0  # the epoch the follower's primary followed at
        self.primed = False
        #: the prime's states so far (the shell's decoded items), while one comes in
        self.priming: list[Any] | None = None
        self._priming_recent: list[Any] = []

    # -- queries -------------------------------------------------------------------------------

    def accepts_batches(self) -> bool:
        """Whether batches apply here; otherwise each is answered MOVED (through :meth:`hold`)."""
        return self.role is Role.PRIMARY and not self.handing_over

    @property
    def replicating(self) -> bool:
        """A primary with a backup: every batch goes through :meth:`replicate`."""
        return self.backup is not None

    @property
    def drained(self) -> bool:
        """Nothing waits for the backup: a handover may finish."""
        return not self.outbox

    @property
    def follower_epoch(self) -> int:
        """On a backup, the epoch its primary followed at: that primary's epoch as long as the
        stream lives (a primary whose epoch moves primes its backup again on a new follow), so
        the epoch the backup journals the primary's records under."""
        return self._follower_epoch

    def lag(self) -> int:
        return self.sent - self.acked

    def waiting(self) -> int:
        return len(self.outbox)

    def acknowledged_sequence(self) -> int:
        """The last journal sequence whose batch the backup acknowledged (every one, with no
        backup): what the history may export (a replaced primary's tail never gets there)."""
        if not self.journaled:
            return 0
        marks = self.journaled_at
        while marks and marks[0][0] <= self.acked and self.acked >= self.prime_id:
            self._acked_sequence = marks.popleft()[1]
        return self.sequence if not marks else self._acked_sequence

    # -- the primary's data path ---------------------------------------------------------------

    def hold(self, writes: W) -> bool:
        """A batch's answer and events: True when they wait for the backup (after every
        earlier answer); False when the shell writes them now."""
        if self.sent > self.acked:
            self.outbox.append((self.sent, writes))
            return True
        return False

    def replicate(
        self, now_ms: int, changes: list[list[Any]], volatile: list[int], recent: list[list[Any]],
        position: int, journaled: int,
    ) -> Replicate | None:
        """A batch applied on a primary with a backup (:attr:`replicating`) changed something
        or made messages; ``journaled`` of its changes go to the journal (the shell appends
        them before it writes the frame). The frame to write on :attr:`stream` now, or None
        when it waits for the stream (it follows the prime)."""
        first = self.sequence + 1 if self.journaled and changes else 0
        self.sequence += journaled
        self.sent += 1
        frame = Replicate(self.sent, first, now_ms, changes, volatile, recent, position)
        if self.journaled and self.sequence >= first:
            self.journaled_at.append((self.sent, self.sequence))
        if self.stream is not None:
            return frame
        self.pending.append(frame)
        return None

    def appended(self, count: int) -> None:
        """A primary without a backup journaled ``count`` records."""
        self.sequence += count

    def acknowledged(self, stream: S, id: int) -> bool:
        """The backup applied and journaled everything up to ``id``. True when that is news:
        then hand out what :meth:`release` gives. ProtocolError for an id never sent."""
        if stream is not self.stream or id <= self.acked:
            return False  # from a stream this primary left, or stale
        if id > self.sent:
            raise ProtocolError(f"the backup acknowledged {id}, which was never sent")
        self.acked = id
        if id < self.prime_id:
            # a prime's first chunks: the backup holds nothing new until the final one is loaded
            # and journaled (it may still be a primed backup of an older prime, and be promoted)
            return False
        self.caught_up = True
        return True

    def release(self) -> W | None:
        """The oldest answers the backup has acknowledged (or that may go out alone), or None:
        none while a prime is under way, whose final chunk holds what they changed."""
        outbox = self.outbox
        if outbox and outbox[0][0] <= self.acked and self.acked >= self.prime_id:
            return outbox.popleft()[1]
        return None

    # -- the primary's stream to its backup ----------------------------------------------------

    def connected(self, attempt: int, stream: S) -> Sequence[Effect[S]]:
        """Connection ``attempt`` made ``stream``: the follow, then every frame that waited."""
        backup = self.backup
        if attempt != self.connecting or backup is None:
            return [Abort(stream)]
        self.connecting = 0
        self.stream = stream
        frames, self.pending = (Follow(backup.secret, self._follow_epoch), *self.pending), []
        return [Send(stream, frames)]

    def connect_failed(self, attempt: int) -> Sequence[Effect[S]]:
        """Connection ``attempt`` failed: try again after ``retry_ms``."""
        if attempt != self.connecting or self.backup is None:
            return NOTHING
        return [self._connect(self.backup, self.retry_ms)]

    def backup_lost(self, stream: S) -> Sequence[Effect[S]]:
        """The stream to the backup closed: start over with a new prime after ``retry_ms``."""
        if stream is not self.stream:
            return NOTHING
        self.stream = None
        self.caught_up = False
        if self.backup is None:
            return NOTHING
        return self._start_backup(self.retry_ms)

    def superseded(self, stream: S, epoch: int) -> Sequence[Effect[S]]:
        """The backup refused to follow: it is at ``epoch``, under another primary (this one
        was paused or cut off meanwhile). Fenced: this replica goes idle, stops replicating,
        answers nothing that waited for the backup and drops its links. Nothing when the
        stream is not the current one, this replica is no primary, or ``epoch`` is not newer."""
        if stream is not self.stream or self.role is not Role.PRIMARY or epoch <= self.epoch:
            return NOTHING
        self.role = Role.IDLE
        effects = self._drop_backup()
        self.backup = None
        self.outbox.clear()
        self.acked = self.sent
        effects.append(DROP_LINKS)
        return effects

    def stop(self) -> Sequence[Effect[S]]:
        """The replica closes: drop the stream to the backup (the placement stays)."""
        return self._drop_backup()

    # -- the controller's commands -------------------------------------------------------------

    def become_primary(self, epoch: int, backup: Address | None, damage: str | None) -> Sequence[Effect[S]]:
        """Take over as the partition's primary at ``epoch``, replicating to ``backup``.
        NotCaughtUp for a backup never primed, or (unless already the primary) when
        ``damage`` says why this replica's journal holds nothing to trust; StaleEpoch."""
        if self.role is Role.BACKUP and not self.primed:
            raise NotCaughtUp(f"{self.name}'s backup was never primed: it cannot take over")
        if damage is not None and self.role is not Role.PRIMARY:
            raise NotCaughtUp(f"{self.name}: {damage}")
        effects = self._move_to(epoch)
        follower, self.follower = self.follower, None
        if follower is not None:
            effects.append(Abort(follower))  # the old primary's stream: fenced off
        self.priming = None
        if self.role is not Role.PRIMARY:
            self.since = epoch
        self.role = Role.PRIMARY
        self.handing_over = False
        effects.extend(self.set_backup(epoch, backup))
        return effects

    def become_backup(self, epoch: int) -> Sequence[Effect[S]]:
        """Follow the primary that will connect with ``epoch`` (or a newer one). A primary
        demoted without a :meth:`handover` drops its links (what they have in flight fails:
        its fate is unknown); after one, they stay and are told MOVED. The current follower
        stream stays if its primary followed at ``epoch`` or later (its frames are refused
        until a new prime: not primed); one of an older epoch is dropped, so that no frame
        from it applies at the new epoch (a prime in flight on it would otherwise prime
        this backup from a primary the placement may have left). The epoch is not saved
        but awaited (:class:`AwaitPrime`): the journal holds an older state, or none, until
        the prime. A primary that handed over and drained saves it (:class:`SaveEpoch`): its
        journal holds all its backup does, the state the new primary starts ``epoch`` from,
        and it may have to lead from it again if the handover is cut off."""
        drained = self.role is Role.PRIMARY and self.handing_over and not self.outbox
        saved = self._move_to(epoch)
        effects: list[Effect[S]] = saved if drained else [AwaitPrime(epoch)]
        follower = self.follower
        if follower is not None and self._follower_epoch < epoch:
            self.follower = None
            self.priming = None
            effects.append(Abort(follower))
        if self.role is Role.PRIMARY:
            effects.extend(self._drop_backup())
            self.backup = None
            self.outbox.clear()
            self.acked = self.sent
            if not self.handing_over:
                effects.append(DROP_LINKS)
        self.role = Role.BACKUP
        self.primed = False
        self.handing_over = False
        return effects

    def set_backup(self, epoch: int, backup: Address | None) -> Sequence[Effect[S]]:
        """The placement at ``epoch``: replicate to ``backup`` (primed with the whole state
        first), or to none (what waited for the old backup goes out now). StaleEpoch."""
        effects = self._move_to(epoch)
        effects.extend(self._drop_backup())
        self.backup = backup
        if backup is None:
            self.acked = self.sent
            effects.append(RELEASE)
            return effects
        effects.extend(self._start_backup(0))
        return effects

    def handover(self) -> bool:
        """Stop applying (batches are answered MOVED). True when answers wait for the
        backup: the handover is done once they are released and :attr:`drained`."""
        self.handing_over = True
        return bool(self.outbox)

    # -- the backup's side ---------------------------------------------------------------------

    def follow(self, stream: S, epoch: int) -> Sequence[Effect[S]]:
        """A primary of ``epoch`` connected on ``stream`` (the shell checked the secret).
        One of an older epoch is refused (:class:`Superseded`: it learns that it was fenced
        and stops); ProtocolError unless this replica is a backup. A new follower replaces
        the old one, whose stream is dropped."""
        if epoch < self.epoch:
            return [Refuse(stream, Superseded(self.epoch))]
        if self.role is not Role.BACKUP:
            raise ProtocolError(
                f"{self.name}: a primary of epoch {epoch} cannot be followed by a {self.role} of epoch {self.epoch}"
            )
        old, self.follower = self.follower, stream
        self._follower_epoch = epoch
        self.priming = None
        return [Abort(old)] if old is not None else NOTHING

    def follower_lost(self, stream: S) -> None:
        if stream is self.follower:
            self.follower = None
            self.priming = None

    def from_primary(self, stream: S, frame: object) -> None:
        """Check a frame on a primary's stream before the shell decodes or applies it.
        ProtocolError: the stream is not the current follower, this replica is no backup,
        a :class:`Replicate` comes before a complete prime, or it is neither frame."""
        if stream is not self.follower or self.role is not Role.BACKUP:
            raise ProtocolError("this replica follows no primary on this stream any more")
        kind = type(frame)
        if kind is Replicate:
            if self.priming is not None or not self.primed:
                raise ProtocolError("a replicated batch before the prime is complete")
        elif kind is not Prime:
            raise ProtocolError(f"a primary does not send {kind.__name__}")

    def journal_from(self, first: int, count: int) -> None:
        """A backup journals ``count`` records of a :class:`Replicate` under its primary's
        numbers, from ``first``: ProtocolError unless they follow the last one (the stream
        drops; the primary primes again)."""
        if not self.journaled or not count:
            return
        if first != self.sequence + 1:
            raise ProtocolError(f"{self.name}: record {first} follows record {self.sequence}")
        self.sequence += count

    def prime_part(
        self, frame: Prime, states: Sequence[Any], recent: Sequence[Any] = (),
    ) -> tuple[list[Any], list[Any]] | None:
        """A chunk of the prime (checked by :meth:`from_primary`), its ``states`` and
        ``recent`` messages decoded by the shell. With the final chunk, every state and
        message of the prime: the shell loads them in a new store and resets the journal
        after ``frame.sequence``, then says :meth:`primed_at`."""
        priming = self.priming if self.priming is not None else []
        priming.extend(states)
        messages = self._priming_recent if self.priming is not None else []
        messages.extend(recent)
        if not frame.final:
            self.priming, self._priming_recent = priming, messages
            return None
        self.priming, self._priming_recent = None, []
        return priming, messages

    def primed_at(self, sequence: int) -> None:
        """The prime is loaded and journaled: the backup holds its primary's state, and its
        journal continues the primary's numbering after ``sequence``."""
        if self.journaled:
            self.sequence = sequence
        self.primed = True

    # -- inside --------------------------------------------------------------------------------

    def _move_to(self, epoch: int) -> list[Effect[S]]:
        if epoch < self.epoch:
            raise StaleEpoch(f"{self.name} is at epoch {self.epoch}, not {epoch}")
        if epoch == self.epoch:
            return []
        self.epoch = epoch
        return [SaveEpoch(epoch)]

    def _drop_backup(self) -> list[Effect[S]]:
        self.caught_up = False
        self.pending = []
        effects: list[Effect[S]] = []
        if self.connecting:
            self.connecting = 0
            effects.append(STOP_CONNECTING)
        stream, self.stream = self.stream, None
        if stream is not None:
            effects.append(Abort(stream))
        return effects

    def _start_backup(self, delay_ms: int) -> list[Effect[S]]:
        """Take the whole state now as the backup's prime (between two batches) and connect;
        every later batch follows it on the same stream."""
        effects = self._drop_backup()
        backup = self.backup
        assert backup is not None
        image = self._image()
        states, recent, chunk = image.states, image.recent, self.prime_chunk
        chunks: list[tuple[list[list[Any]], Sequence[list[Any]]]] = [
            (states[i:i + chunk], ()) for i in range(0, len(states), chunk)]
        chunks += [([], recent[i:i + chunk]) for i in range(0, len(recent), chunk)]
        for n, (part, messages) in enumerate(chunks or [([], ())], 1):
            self.sent += 1
            self.pending.append(
                Prime(self.sent, self.sequence, part, n >= len(chunks), image.position, messages))
        self.prime_id = self.sent
        self._follow_epoch = self.epoch
        effects.append(self._connect(backup, delay_ms))
        return effects

    def _connect(self, backup: Address, delay_ms: int) -> Connect:
        self._attempts += 1
        self.connecting = self._attempts
        return Connect(backup, delay_ms, self.connecting)
