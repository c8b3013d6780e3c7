"""Throttling password logins: how long an attempt waits, or that it is refused for now.

A :class:`LoginGuard` answers every login attempt that names a principal
with an :class:`Admission`: wait ``wait`` seconds, then check the password
if ``admitted``, else answer AUTHENTICATION_FAILED without checking it. It
counts failures under three kinds of key, each with its own :class:`Backoff`:

``(principal, address)`` -- one client guessing one principal's password
    Strict: 3 free failures, then 0.25 s doubling up to 30 s. A success
    clears it: a user's own typos are forgiven once they get it right.
``address`` -- one client trying many principals (password spraying)
    10 free failures (people behind one NAT share an address), then the same
    doubling. A success does not clear it: otherwise logging in to one valid
    account would buy fresh guesses at every other principal.
``principal`` -- many clients guessing one principal
    10 free failures, then the same doubling. A success from one address does
    not clear it, so guessing from other addresses stays slowed. Instead an
    address that has logged in as a principal is *trusted* for it and no
    longer waits on this counter: guessing a principal from elsewhere cannot
    lock its owner out of the places it logs in from.

Names that are not principals are counted exactly as principals are, so
nothing the guard does tells which names exist.

The rules, per key, with ``n`` the failures counted on it:

* **Counting.** :meth:`LoginGuard.admit` counts an admitted attempt as a
  failure at once, and :meth:`LoginGuard.succeeded` takes it back. So there
  is no ``failed()``: an attempt nobody reports on stays a failure, and
  attempts racing on parallel connections see each other -- each waits
  behind the ones admitted before it, and parallelism buys no guesses.
* **Delay.** The attempt after the last failure waits
  ``d(n) = 0`` while ``n < free``, else ``min(cap, base * 2 ** (n - free))``
  after that failure; with several keys it waits for the slowest.
* **Refusal.** An attempt that would wait more than ``max_wait`` (5 s, half
  the client's default 10 s connect timeout, so the answer always arrives)
  is refused for now. It is not counted (nothing was checked), and should be
  answered after ``max_wait`` like an attempt that waited, with the same
  error: it only takes longer. At the cap, one attempt per key is checked
  every 30 s: at most 120 guesses an hour at one principal from untrusted
  addresses, however many connections or addresses guess.
* **Decay.** One failure is forgiven for every ``forgive_after`` (60 s)
  without a failure. ``n`` stops growing where ``d(n)`` reaches the cap
  (10 for the pair, 17 for the others), so after a burst the wait halves
  every minute and the count is back to zero within 10 (17) minutes.
* **Memory.** Each kind of key, and the trusted pairs, hold at most
  ``max_tracked`` (10,000) keys; the key whose failure was counted longest
  ago is forgotten first. A flood of new addresses therefore pushes out old
  addresses, never a principal's count (new names push out the names that
  failed longest ago); names longer than 64 characters are kept as a digest.
  Together about 10 MB at most.

A guard lives in one process (a gateway); each gateway guards its own
logins. It reads time only through the ``clock`` it is given (seconds,
monotonic).

:func:`describe_failure` writes the log line for a failed login. It is never
given the password, and a name that is not a principal is logged only as a
fingerprint: it may be a password typed into the wrong field.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["Admission", "Backoff", "LoginFailure", "LoginGuard", "describe_failure"]


@dataclass(frozen=True)
class Backoff:
    """How failures on one kind of key slow the next attempt (see the module docstring)."""

    free: int = 3
    base: float = 0.25
    cap: float = 30.0
    forgive_after: float = 60.0

    def __post_init__(self) -> None:
        if self.free < 0:
            raise ValueError(f"free failures must not be negative, got {self.free}")
        if not 0 < self.base <= self.cap < self.forgive_after:
            raise ValueError(
                "a backoff needs 0 < base <= cap < forgive_after "
                f"(got base {self.base}, cap {self.cap}, forgive_after {self.forgive_after})"
            )

    @property
    def saturation(self) -> int:
        """The count at which the delay reaches the cap; counts stop there."""
        n, step = self.free, self.base
        while step < self.cap:
            n, step = n + 1, step * 2
        return n

    def delay(self, failures: int) -> float:
        """The wait, after the last failure, for the attempt after ``failures`` failures."""
        if failures < self.free:
            return 0.0
        return min(self.cap, self.base * 2.0 ** min(failures - self.free, 64))


@dataclass(frozen=True)
class Admission:
    """What to do with one attempt: wait ``wait`` seconds, then check the
    password if ``admitted``; otherwise the attempt is refused for now and
    is answered AUTHENTICATION_FAILED, exactly as a wrong password is."""

    wait: float
    admitted: bool


class LoginFailure(enum.Enum):
    """Why a login failed, as logged (no free text: nothing the client sent)."""

    WRONG_CREDENTIALS = "wrong password or unknown principal"
    REFUSED = "refused for now after too many failures"
    ANONYMOUS_NOT_ALLOWED = "anonymous sessions are not allowed"


class _Count:
    __slots__ = ("failures", "last")

    def __init__(self, failures: int, last: float) -> None:
        self.failures = failures
        self.last = last  # when the last failure was (or, for a waiting attempt, will be) counted


class _Counts:
    """Failure counts under one kind of key, at most ``limit`` keys."""

    def __init__(self, backoff: Backoff, limit: int) -> None:
        self.backoff = backoff
        self.limit = limit
        self._saturation = backoff.saturation
        self._by_key: OrderedDict[Hashable, _Count] = OrderedDict()  # oldest failure first

    def __len__(self) -> int:
        return len(self._by_key)

    def failures(self, key: Hashable, now: float) -> int:
        count = self._by_key.get(key)
        return 0 if count is None else self._decayed(count, now)

    def _decayed(self, count: _Count, now: float) -> int:
        quiet = now - count.last
        forgiven = int(quiet // self.backoff.forgive_after) if quiet > 0 else 0
        return max(0, count.failures - forgiven)

    def wait(self, key: Hashable, now: float) -> float:
        count = self._by_key.get(key)
        if count is None:
            return 0.0
        delay = self.backoff.delay(self._decayed(count, now))
        if delay == 0:
            return 0.0  # within the free failures, even while an earlier attempt waits
        # forgiveness needs forgive_after > cap of quiet, so a decayed count never waits
        return max(0.0, count.last + delay - now)

    def fail(self, key: Hashable, now: float, at: float) -> None:
        """Count a failure at ``at`` (``now``, or later for an attempt that waits)."""
        count = self._by_key.get(key)
        if count is None:
            self._by_key[key] = _Count(1, at)
            if len(self._by_key) > self.limit:
                self._by_key.popitem(last=False)
        else:
            count.failures = min(self._saturation, self._decayed(count, now) + 1)
            count.last = at
            self._by_key.move_to_end(key)

    def take_back(self, key: Hashable) -> None:
        """Uncount one failure (the attempt turned out to succeed)."""
        count = self._by_key.get(key)
        if count is not None:
            count.failures -= 1
            if count.failures <= 0:
                del self._by_key[key]

    def clear(self, key: Hashable) -> None:
        self._by_key.pop(key, None)


_LONGEST_NAME = 64


def _key(name: str) -> str | bytes:
    """The name itself, or a digest of it when long, so that keys stay small
    (bytes, so that no short name can stand for a long one)."""
    if len(name) <= _LONGEST_NAME:
        return name
    return hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class LoginGuard:
    """Decides how long each login attempt waits (see the module docstring).

    For every attempt with a principal: call :meth:`admit` before checking
    the password; wait ``wait`` seconds; if ``admitted``, check it and, when
    it is right, call :meth:`succeeded`. Anonymous attempts (no principal)
    have no password to guess and are not guarded.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        pair: Backoff = Backoff(free=3),
        address: Backoff = Backoff(free=10),
        principal: Backoff = Backoff(free=10),
        max_wait: float = 5.0,
        max_tracked: int = 10_000,
    ) -> None:
        if max_wait < 0 or max_tracked < 1:
            raise ValueError("max_wait must be >= 0 and max_tracked >= 1")
        self._clock = clock
        self.max_wait = max_wait
        self._pairs = _Counts(pair, max_tracked)
        self._addresses = _Counts(address, max_tracked)
        self._principals = _Counts(principal, max_tracked)
        self._trusted: OrderedDict[tuple[str | bytes, str | bytes], None] = OrderedDict()  # latest success last
        self._max_trusted = max_tracked

    def admit(self, principal: str, address: str) -> Admission:
        """The fate of an attempt to log in as ``principal`` from ``address``;
        an admitted attempt counts as a failure until :meth:`succeeded`."""
        now = self._clock()
        p, a = _key(principal), _key(address)
        trusted = (p, a) in self._trusted
        wait = max(
            self._pairs.wait((p, a), now),
            self._addresses.wait(a, now),
            0.0 if trusted else self._principals.wait(p, now),
        )
        if wait > self.max_wait:
            return Admission(self.max_wait, admitted=False)
        at = now + wait
        self._pairs.fail((p, a), now, at)
        self._addresses.fail(a, now, at)
        self._principals.fail(p, now, at)
        return Admission(wait, admitted=True)

    def succeeded(self, principal: str, address: str) -> None:
        """The admitted attempt was right: clear the pair, take the attempt
        back from the address and the principal, and trust the address for
        the principal. Failures from elsewhere stay counted."""
        p, a = _key(principal), _key(address)
        self._pairs.clear((p, a))
        self._addresses.take_back(a)
        self._principals.take_back(p)
        self._trusted.pop((p, a), None)
        self._trusted[(p, a)] = None
        while len(self._trusted) > self._max_trusted:
            self._trusted.popitem(last=False)

    def failures(self, principal: str, address: str) -> tuple[int, int, int]:
        """The failures counted now for the pair, the address and the principal."""
        now = self._clock()
        p, a = _key(principal), _key(address)
        return self._pairs.failures((p, a), now), self._addresses.failures(a, now), self._principals.failures(p, now)

    def tracked(self) -> int:
        """How many keys the guard holds (counts of every kind and trusted pairs)."""
        return len(self._pairs) + len(self._addresses) + len(self._principals) + len(self._trusted)


# -- logging ---------------------------------------------------------------------

#: makes fingerprints unlinkable across processes, so they cannot be
#: matched against digests of guessed passwords
_FINGERPRINT_KEY = secrets.token_bytes(16)


def _printable(text: str, limit: int = _LONGEST_NAME) -> str:
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return shown + ("…" if len(text) > limit else "")


def describe_failure(principal: str | None, address: str, reason: LoginFailure, *, known: bool) -> str:
    """The log line for a failed login.

    ``known`` says whether ``principal`` names a principal: a name that does
    not is shown as a fingerprint (stable within this process), since it may
    be a password typed into the wrong field. Names and addresses are
    shortened and their control characters escaped.
    """
    if not principal:
        who = "an anonymous session"
    elif known:
        who = f"principal '{_printable(principal)}'"
    else:
        digest = hashlib.blake2b(principal.encode("utf-8", "surrogatepass"), key=_FINGERPRINT_KEY, digest_size=6)
        who = f"an unknown principal (fingerprint {digest.hexdigest()})"
    return f"login failed for {who} from {_printable(address) or 'an unknown address'}: {reason.value}"
