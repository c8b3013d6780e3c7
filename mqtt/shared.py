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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

M = TypeVar("M")

#: messages whose decision waits for members still to be offered them
PENDING = 10_000


class SharedGroup(Generic[M]):
    """The members of one shared subscription (share name and filter) at one gateway."""

    def __init__(self, pending: int = PENDING) -> None:
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
