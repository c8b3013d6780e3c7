"""Shared subscriptions (``$share/NAME/filter``): each message to one member of the group.

Every member of a group is subscribed to the filter itself and so is offered every message;
:meth:`SharedGroup.takes` decides, the first time any member is offered a message, which
member delivers it (the next eligible member in turn: connected ones before those whose
session is kept without a connection), and tells each member offered it whether it is that
one. A message is known by a *token*: an object all members are offered, the same for one
message (the gateway passes the value's bytes or the time series event, which every session's
delivery of one update shares). The decision is kept until every member was offered the
message, for at most :data:`PENDING` messages (the oldest decision is dropped first: a member
that lags that far may deliver a message another member decided on again, or not at all).

Across gateways, :class:`ShareDirectory` decides which gateway's members a message goes to.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

M = TypeVar("M")

#: messages whose decision waits for members still to be offered them
PENDING = 10_000


class SharedGroup(Generic[M]):
    """The members of one shared subscription (share name and filter) at one gateway."""

    def __init__(self, pending: int = PENDING, key: tuple[str, str] = ("", "")) -> None:
        #: (share name, topic filter)
        self.key = key
        self.members: list[M] = []
        self._next = 0
        self._pending = pending
        #: id(token) -> [token, the member that delivers it, how many members were offered it]
        self._decided: dict[int, list[object]] = {}

    def join(self, member: M) -> None:
        if member not in self.members:
            self.members.append(member)

    def leave(self, member: M) -> None:
        if member in self.members:
            self.members.remove(member)

    def replace(self, old: M, new: M) -> None:
        """``new`` holds ``old``'s session now (a resumed session): it takes its place."""
        self.members = [new if m == old else m for m in self.members]
        for decision in self._decided.values():
            if decision[1] == old:
                decision[1] = new

    def takes(self, member: M, token: object, eligible: Callable[[M], bool]) -> bool:
        """Whether ``member``, offered the message ``token``, is the one to deliver it. Call
        once per member and message."""
        key = id(token)
        decision = self._decided.get(key)
        if decision is None or decision[0] is not token:
            candidates = [m for m in self.members if eligible(m)] or self.members or [member]
            owner = candidates[self._next % len(candidates)]
            self._next += 1
            decision = self._decided[key] = [token, owner, 0]
            if len(self._decided) > self._pending:
                del self._decided[next(iter(self._decided))]
        offered = int(decision[2]) + 1  # type: ignore[call-overload]
        decision[2] = offered
        if offered >= len(self.members):
            self._decided.pop(key, None)
        return decision[1] == member

    def __len__(self) -> int:
        return len(self.members)


class ShareDirectory:
    """Which gateways have members of which shared subscriptions, so that each message goes
    to one member in the whole cluster, not one per gateway.

    Every gateway with members announces the groups it has (:meth:`heard`, at least every
    ``ttl`` / 3 seconds and whenever its set changes); a gateway not heard from for ``ttl``
    seconds (6) is taken to have none. A message on ``path`` for a group goes to the gateway
    :meth:`owns` names: of the gateways with members of the group (this one included), in
    order of their names, the one at the path's hash (CRC-32) modulo how many there are. Every
    gateway computes the same answer from the same announcements, so each message of a topic
    goes to one gateway (and there to one member, :class:`SharedGroup`); all of one topic's
    messages go to the same gateway while the members' gateways stay the same. While an
    announcement is on its way a message may go to two gateways, or, just after a gateway's
    last member left or its gateway was lost, to none (until ``ttl``). Time is read only
    through ``clock`` (seconds, monotonic).
    """

    def __init__(self, me: str, clock: Callable[[], float], ttl: float = 6.0) -> None:
        self.me = me
        self.ttl = ttl
        self._clock = clock
        #: gateway -> (the groups it has members of, when it said so)
        self._heard: dict[str, tuple[frozenset[tuple[str, str]], float]] = {}
        self._owners: dict[tuple[str, str], tuple[str, ...]] = {}  # cached: group -> its gateways, ordered
        self._cached_until = 0.0

    def heard(self, gateway: str, groups: Iterable[tuple[str, str]]) -> None:
        """``gateway`` has members of (exactly) ``groups`` now."""
        if gateway == self.me:
            return
        groups = frozenset(groups)
        previous = self._heard.get(gateway)
        self._heard[gateway] = (groups, self._clock())
        if previous is None or previous[0] != groups:
            self._owners.clear()

    def gateways(self, group: tuple[str, str]) -> tuple[str, ...]:
        """The gateways with members of ``group``, this one included, in order."""
        now = self._clock()
        if now >= self._cached_until:  # someone may have fallen silent: work it out again
            self._owners.clear()
            for gateway in [g for g, (_, at) in self._heard.items() if now - at > self.ttl]:
                del self._heard[gateway]
            soonest = min((at for _, at in self._heard.values()), default=now)
            self._cached_until = soonest + self.ttl if self._heard else now + self.ttl
        owners = self._owners.get(group)
        if owners is None:
            owners = self._owners[group] = tuple(sorted(
                {self.me, *(g for g, (groups, _) in self._heard.items() if group in groups)}
            ))
        return owners

    def owns(self, group: tuple[str, str], path: str) -> bool:
        """Whether this gateway delivers the message on ``path`` for ``group``."""
        owners = self.gateways(group)
        if len(owners) == 1:
            return True
        return owners[zlib.crc32(path.encode("utf-8", "surrogatepass")) % len(owners)] == self.me
