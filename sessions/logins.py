"""Throttling password logins: how long an attempt waits, or that it is refused for now.

A :class:`LoginGuard` answers every login attempt that names a principal
with an :class:`Admission`: wait ``wait`` seconds, then check the password
if ``admitted``, else answer AUTHENTICATION_FAILED without checking it.
Every admitted attempt counts as a failure under three kinds of key, each
with its own :class:`Backoff`; ``n`` is the failures counted on a key:

``(principal, address)`` -- one client guessing one principal's password
    Strict: 3 free failures, then 0.25 s doubling up to 30 s. A success
    clears it: a user's own typos are forgiven once they get it right.
``principal`` -- many clients guessing one principal
    10 free failures, then the same doubling. A success from one address does
    not clear it, so guessing from other addresses stays slowed. Instead an
    address that has logged in as a principal is *trusted* for it and no
    longer waits on this counter: guessing a principal from elsewhere cannot
    lock its owner out of the places it logs in from.
``address`` -- one client trying many principals (password spraying)
    100 free failures (people behind one NAT or proxy share an address, and
    one of them guessing must not lock out the others), then the same
    doubling. How an attempt waits on it depends on its pair:

    * **suspect** -- the pair is in its backoff (3 failures or more counted
      from this address) and not trusted: the attempt waits the address's
      backoff after the address's last counted attempt, as on the other keys;
    * **paced** -- every other attempt (a principal that has not failed from
      here beyond its free typos, or is trusted here): it waits the address's
      backoff capped at ``pace`` (1 s), after the address's last paced
      attempt. Failures alone never make it wait longer or refuse it; only
      more than one paced attempt a second from the address, queued ahead of
      it, can.

    A success takes back its own attempt from the address and nothing more:
    it nets to nothing (once, at the count's ceiling, to one failure less),
    so a valid account of the guesser's own buys no guesses at others.

Names that are not principals are counted exactly as principals are, so
nothing the guard does tells which names exist.

The rules, per key:

* **Counting.** :meth:`LoginGuard.admit` counts an admitted attempt as a
  failure at once, and :meth:`LoginGuard.succeeded` takes it back. So there
  is no ``failed()``: an attempt nobody reports on stays a failure, and
  attempts racing on parallel connections see each other -- each waits
  behind the ones admitted before it, and parallelism buys no guesses.
* **Delay.** The attempt after the last failure waits
  ``d(n) = 0`` while ``n < free``, else ``min(cap, base * 2 ** (n - free))``
  after that failure (a paced attempt: ``min(d(n), pace)`` after the last
  paced one); with several keys it waits for the slowest.
* **Refusal.** An attempt that would wait more than ``max_wait`` (5 s, half
  the client's default 10 s connect timeout, so the answer always arrives)
  is refused for now. It is not counted (nothing was checked), and should be
  answered after ``max_wait`` like an attempt that waited, with the same
  error: it only takes longer. A client that waits as told sees, on one pair,
  waits of 0, 0, 0, 0.25, 0.5, 1, 2 and 4 s, then refusals until its next
  slot is less than 5 s away; a burst of parallel attempts has 7 admitted
  (after 0, 0, 0, 0.25, 0.75, 1.75 and 3.75 s) and the rest refused.
* **Decay.** One failure is forgiven for every ``forgive_after`` (60 s)
  without a failure on the key. ``n`` stops growing where ``d(n)`` reaches
  the cap (10 for the pair, 17 for the principal, 107 for the address), so
  after a burst the wait halves every minute and the count is back to zero
  within 10 (17, 107) minutes; an address is back under its 100 free
  failures within 8.
* **Memory.** Each kind of key, and the trusted pairs, hold at most
  ``max_tracked`` (10,000) keys; the key whose failure was counted longest
  ago is forgotten first, passing over (among the 64 oldest) keys that are
  being held back. A flood of new addresses therefore pushes out old
  addresses, never a principal's count (new names push out the names that
  failed longest ago, and fresh names, with one failure each, push out other
  fresh names before the count of a principal that is being guessed); names
  longer than 64 characters are kept as a digest.
  Together about 12 MB at most (64-character names).

What a guesser gets at most, at steady state, however many connections it
keeps busy (each admitted attempt queues behind the ones before it):

* **per principal, from one address**: one attempt every 30 s (0.033/s,
  120 an hour), after 3 free ones and 5 more within 8 s;
* **per principal, from any number of untrusted addresses together**: the
  same 120 an hour (the principal's count), after 10 free ones. An address
  trusted for the principal has only its pair's limit (120 an hour), but
  to be trusted it needed the password;
* **per address, at any principals**: one attempt a second (3,600 an hour,
  1/``pace``), after 100 free ones. Suspect attempts add nothing to it: one
  waits 30 s after the address's last attempt of either kind, so they are
  refused while paced ones flow, and alone get one every 30 s.
  Guessing one password at 10,000 principals from one address takes about
  three hours; spread over many addresses, only the per-principal limits
  hold.

What a user behind a guessing address (the same NAT, proxy or host) sees
of that address's failures: as a principal that has failed fewer than 3
times from there, or is trusted there, a wait of at most ``pace`` (1 s),
and a refusal only while the address sends more than one paced attempt a
second; as a principal guessed from there, its pair's own backoff (and,
past the address's 100 free failures, the address's).

**One attempt at a time per pair.** The gateway decides the attempts of
one (principal, address) one after another (each waits for the one before
it to be checked; waiting for its turn and the guard's wait together last
at most ``max_wait``, else it is refused, so the answer still comes in time):
a guesser's parallel attempts queue as above, while a client's parallel
logins with the right password are never counted as each other's
failures -- each finds the one before it succeeded, and, with
:class:`VerifiedPasswords`, costs no scrypt of its own.

A guard lives in one process (a gateway); each gateway guards its own
logins. It reads time only through the ``clock`` it is given (seconds,
monotonic). :meth:`LoginGuard.stats` counts what it did, for metrics.

:func:`describe_failure` writes the log line for a failed login. It is never
given the password, and a name that is not a principal is logged only as a
fingerprint: it may be a password typed into the wrong field.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["Admission", "Backoff", "LoginFailure", "LoginGuard", "VerifiedPasswords", "describe_failure"]


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
    __slots__ = ("failures", "last", "paced")

    def __init__(self, failures: int, last: float) -> None:
        self.failures = failures
        self.last = last  # when the last failure was (or, for a waiting attempt, will be) counted
        self.paced: float | None = None  # the same for the last paced attempt (addresses only)


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

    def wait(self, key: Hashable, now: float, pace: float | None = None) -> float:
        """How long an attempt waits on this key: its delay after the last
        failure or, with ``pace``, its delay capped at ``pace`` after the last
        paced attempt."""
        count = self._by_key.get(key)
        if count is None:
            return 0.0
        delay = self.backoff.delay(self._decayed(count, now))
        if delay == 0:
            return 0.0  # within the free failures, even while an earlier attempt waits
        # forgiveness needs forgive_after > cap of quiet, so a decayed count never waits
        if pace is None:
            return max(0.0, count.last + delay - now)
        if count.paced is None:
            return 0.0
        return max(0.0, count.paced + min(delay, pace) - now)

    def fail(self, key: Hashable, now: float, at: float, *, paced: bool = False) -> None:
        """Count a failure at ``at`` (``now``, or later for an attempt that waits)."""
        count = self._by_key.get(key)
        if count is None:
            count = self._by_key[key] = _Count(1, at)
            if len(self._by_key) > self.limit:
                self._evict(now)
        else:
            count.failures = min(self._saturation, self._decayed(count, now) + 1)
            count.last = max(count.last, at)  # a paced attempt may be counted before a queued suspect one
            self._by_key.move_to_end(key)
        if paced:
            count.paced = at if count.paced is None else max(count.paced, at)

    def _evict(self, now: float) -> None:
        """Forget one key: the oldest of the :data:`EVICTION_LOOKAHEAD` oldest that
        is not being held back (under its free failures, once decayed); only when
        all of those are held back, the oldest. A flood of fresh names (one
        failure each) so pushes out other fresh names, not the count of a
        principal someone is guessing."""
        keys = iter(self._by_key.items())
        for _ in range(min(EVICTION_LOOKAHEAD, len(self._by_key) - 1)):
            key, count = next(keys)
            if self._decayed(count, now) < self.backoff.free:
                del self._by_key[key]
                return
        self._by_key.popitem(last=False)

    def take_back(self, key: Hashable) -> None:
        """Uncount one failure (the attempt turned out to succeed)."""
        count = self._by_key.get(key)
        if count is not None:
            count.failures -= 1
            if count.failures <= 0:
                del self._by_key[key]

    def clear(self, key: Hashable) -> None:
        self._by_key.pop(key, None)


#: how many of the oldest keys an eviction looks through for one that is not being held back
EVICTION_LOOKAHEAD = 64

_LONGEST_NAME = 64


def _key(name: str) -> str | bytes:
    """The name itself, or a digest of it when long, so that keys stay small
    (bytes, so that no short name can stand for a long one)."""
    if len(name) <= _LONGEST_NAME:
        return name
    return hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=16).digest()


#: the kinds of key, in the order a tie between their waits is blamed on
_KINDS = ("pair", "address", "principal")


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
        address: Backoff = Backoff(free=100),
        principal: Backoff = Backoff(free=10),
        pace: float = 1.0,
        max_wait: float = 5.0,
        max_tracked: int = 10_000,
    ) -> None:
        if not 0 < pace <= max_wait or max_tracked < 1:
            raise ValueError("a guard needs 0 < pace <= max_wait and max_tracked >= 1")
        self._clock = clock
        self.pace = pace
        self.max_wait = max_wait
        self._pairs = _Counts(pair, max_tracked)
        self._addresses = _Counts(address, max_tracked)
        self._principals = _Counts(principal, max_tracked)
        self._trusted: OrderedDict[tuple[str | bytes, str | bytes], None] = OrderedDict()  # latest success last
        self._max_trusted = max_tracked
        self._admitted = self._succeeded = self._delayed = 0
        self._refused = dict.fromkeys((*_KINDS, "turn"), 0)

    def admit(self, principal: str, address: str, max_wait: float | None = None) -> Admission:
        """The fate of an attempt to log in as ``principal`` from ``address``;
        an admitted attempt counts as a failure until :meth:`succeeded`.
        ``max_wait``: the most this attempt may still wait (less than the
        guard's own when it waited already, e.g. for its turn)."""
        limit = self.max_wait if max_wait is None else max(0.0, min(self.max_wait, max_wait))
        now = self._clock()
        p, a = _key(principal), _key(address)
        trusted = (p, a) in self._trusted
        paced = trusted or self._pairs.failures((p, a), now) < self._pairs.backoff.free
        waits = {
            "pair": self._pairs.wait((p, a), now),
            "address": self._addresses.wait(a, now, self.pace if paced else None),
            "principal": 0.0 if trusted else self._principals.wait(p, now),
        }
        blamed = max(_KINDS, key=waits.__getitem__)  # the first of the longest
        wait = waits[blamed]
        if wait > limit:
            self._refused[blamed] += 1
            return Admission(limit, admitted=False)
        at = now + wait
        self._pairs.fail((p, a), now, at)
        self._addresses.fail(a, now, at, paced=paced)
        self._principals.fail(p, now, at)
        self._admitted += 1
        if wait > 0:
            self._delayed += 1
        return Admission(wait, admitted=True)

    def turn_timed_out(self) -> None:
        """An attempt waited ``max_wait`` for its pair's turn and is refused unchecked (counted
        as ``login_refused_turn``)."""
        self._refused["turn"] += 1

    def succeeded(self, principal: str, address: str) -> None:
        """The admitted attempt was right: clear the pair, take the attempt
        back from the address and the principal, and trust the address for
        the principal. Failures from elsewhere stay counted, and so do the
        pair's failures on the address and the principal."""
        p, a = _key(principal), _key(address)
        self._pairs.clear((p, a))
        self._addresses.take_back(a)
        self._principals.take_back(p)
        self._trusted.pop((p, a), None)
        self._trusted[(p, a)] = None
        while len(self._trusted) > self._max_trusted:
            self._trusted.popitem(last=False)
        self._succeeded += 1

    def failures(self, principal: str, address: str) -> tuple[int, int, int]:
        """The failures counted now for the pair, the address and the principal."""
        now = self._clock()
        p, a = _key(principal), _key(address)
        return self._pairs.failures((p, a), now), self._addresses.failures(a, now), self._principals.failures(p, now)

    def tracked(self) -> int:
        """How many keys the guard holds (counts of every kind and trusted pairs)."""
        return len(self._pairs) + len(self._addresses) + len(self._principals) + len(self._trusted)

    def stats(self) -> dict[str, int]:
        """What the guard did since it was made, for a metrics endpoint (the
        names are prefixed to sit among a gateway's other stats).

        Counters (they only grow):

        * ``login_admitted`` -- attempts admitted, the password then checked;
        * ``login_succeeded`` -- admitted attempts reported right (:meth:`succeeded`);
        * ``login_delayed`` -- admitted attempts told to wait first;
        * ``login_refused`` -- attempts refused for now, and by the kind of key
          whose wait was the longest: ``login_refused_pair`` (one client
          guessing one principal), ``login_refused_address`` (one client
          trying many principals), ``login_refused_principal`` (many
          clients guessing one principal); and ``login_refused_turn``, attempts
          that waited ``max_wait`` for the attempts of their pair before them.

        Gauges:

        * ``login_failures`` -- failures counted: admitted attempts not
          reported right (those still being checked included), that is
          ``login_admitted - login_succeeded``;
        * ``login_pairs``, ``login_addresses``, ``login_principals``,
          ``login_trusted`` -- keys held of each kind, each at most
          ``max_tracked``.
        """
        return {
            "login_admitted": self._admitted,
            "login_succeeded": self._succeeded,
            "login_failures": self._admitted - self._succeeded,
            "login_delayed": self._delayed,
            "login_refused": sum(self._refused.values()),
            **{f"login_refused_{kind}": n for kind, n in self._refused.items()},
            "login_pairs": len(self._pairs),
            "login_addresses": len(self._addresses),
            "login_principals": len(self._principals),
            "login_trusted": len(self._trusted),
        }


# -- passwords checked lately ------------------------------------------------------


class VerifiedPasswords:
    """The passwords checked right lately, so that a principal's next logins
    need no scrypt: a fleet of clients sharing one account, connecting at
    once, costs one slow check, not one each.

    Only an attempt the guard admitted (and so counted) may be matched here:
    a match is as good as a password check, so it must never be a free
    guess. What is kept per principal is a keyed digest of the password
    (its key random per process, so the digest is useless anywhere else),
    the stored hash it was checked against, and when it was checked. It
    matches only the same password, while the principal's stored hash is
    the same one (a changed password or a removed principal matches
    nothing) and for ``ttl`` seconds (300) after the check; at most
    ``limit`` principals are kept (10,000), the least lately checked
    forgotten first. A match takes microseconds where a miss takes a scrypt,
    which tells a client only what its success tells it anyway.
    """

    def __init__(self, clock: Callable[[], float], *, ttl: float = 300.0, limit: int = 10_000) -> None:
        if ttl <= 0 or limit < 1:
            raise ValueError("verified passwords need ttl > 0 and limit >= 1")
        self._clock = clock
        self.ttl = ttl
        self.limit = limit
        self._key = secrets.token_bytes(32)
        # principal key -> (stored hash, digest of the password, when it was checked)
        self._by_principal: OrderedDict[str | bytes, tuple[str, bytes, float]] = OrderedDict()
        self.matched = 0

    def __len__(self) -> int:
        return len(self._by_principal)

    def _digest(self, password: str) -> bytes:
        return hmac.new(self._key, password.encode("utf-8", "surrogatepass"), "sha256").digest()

    def matches(self, principal: str, password: str, stored_hash: str) -> bool:
        """Whether ``password`` was checked right for ``principal`` against
        ``stored_hash`` within the last ``ttl`` seconds."""
        entry = self._by_principal.get(_key(principal))
        if entry is None:
            return False
        stored, digest, checked = entry
        if self._clock() - checked > self.ttl:
            del self._by_principal[_key(principal)]
            return False
        right = hmac.compare_digest(digest, self._digest(password)) and hmac.compare_digest(stored, stored_hash)
        self.matched += right
        return right

    def remember(self, principal: str, password: str, stored_hash: str) -> None:
        """``password`` was just checked right for ``principal`` against ``stored_hash``."""
        key = _key(principal)
        self._by_principal.pop(key, None)
        self._by_principal[key] = (stored_hash, self._digest(password), self._clock())
        while len(self._by_principal) > self.limit:
            self._by_principal.popitem(last=False)


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
