"""The login guard protects users, through a real gateway (sessions/logins.py).

The probe of issue 24: guessing two principals' passwords from one address
must not lock anyone else out from there, nor lock the guessed principals
out for longer than their own (principal, address) backoff. Every login of
the actor tests comes from 127.0.0.1, so this test keeps its failures few
(12: far below the address's 100 free failures) and its principals its own.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import canopy
from canopy import errors
from tests.actors.conftest import ADMIN
from tests.conftest import await_for

pytestmark = pytest.mark.asyncio

#: wrong guesses at each attacked principal, all at once: the pair lets 3 through
#: at once and queues the others 0.25, 0.75 and 1.75 s later (under 5 s: none refused)
GUESSES = 6
#: the pair's backoff after GUESSES failures: the next attempt waits this long after the last one
PAIR_BACKOFF = 2.0


async def login_fails(url: str, name: str, password: str) -> bool:
    with pytest.raises(errors.AuthenticationError):
        await canopy.connect(url, name, password)
    return True


async def timed_login(url: str, name: str, password: str) -> float:
    """Seconds a successful login took."""
    started = time.monotonic()
    async with canopy.connect(url, name, password) as session:
        took = time.monotonic() - started
        assert session.properties["$Principal"] == name
    return took


async def test_guessing_two_principals_locks_out_neither_a_third_nor_their_owners(broker: str, prefix: str) -> None:
    alice, bob, carol = (f"{prefix}-{who}" for who in ("alice", "bob", "carol"))
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.security.update(
            *(["add_principal", name, f"{name}-password", ["CLIENT"]] for name in (alice, bob, carol))
        )

    burst_started = time.monotonic()
    guesses = [login_fails(broker, name, f"guess {i}") for name in (alice, bob) for i in range(GUESSES)]
    assert all(await asyncio.gather(*guesses))  # every guess answered AUTHENTICATION_FAILED
    burst = time.monotonic() - burst_started

    # (a) a principal nobody guessed, never seen from this address: no wait at all
    took = await timed_login(broker, carol, f"{carol}-password")
    assert took < 0.5, f"carol waited {took:.2f} s after {2 * GUESSES} failures ({burst:.2f} s) from her address"

    # (b) the guessed principal: admitted once her pair's own backoff has passed, the first try
    #     (a try that came too early would wait the rest of it, up to 5 s, not be refused)
    tries = 0

    async def alice_logs_in() -> float:
        nonlocal tries
        tries += 1
        return await timed_login(broker, alice, f"{alice}-password")

    took = await await_for(alice_logs_in, timeout=15, what="alice's login after her pair backoff")
    assert tries == 1, f"alice was refused {tries - 1} times"
    assert took < PAIR_BACKOFF + 1.5, f"alice waited {took:.2f} s, more than her pair's backoff ({PAIR_BACKOFF} s)"
    # a success clears the pair: her next login does not wait
    assert await timed_login(broker, alice, f"{alice}-password") < 1.0
    # bob likewise, now that his pair's backoff has passed too
    assert await timed_login(broker, bob, f"{bob}-password") < PAIR_BACKOFF + 1.5


#: logins at once, as one principal from one address (under the actor tests' 40 connections an address)
FLEET = 24


async def test_parallel_right_logins_of_one_account_are_all_admitted(broker: str, prefix: str) -> None:
    """A fleet of clients sharing one account behind one address logs in at once: the
    attempts take turns, none counts as another's failure, and after the first check the
    rest match the password checked right lately instead of running scrypt each. (Counting
    each pending attempt as a failure refused all but 7 of such a burst.)"""
    name = f"{prefix}-fleet".replace("/", "-")
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.security.update(["add_principal", name, f"{name}-password", ["CLIENT"]])
        before = await verified_matches(admin)
        outcomes = await asyncio.gather(
            *(canopy.connect(broker, name, f"{name}-password") for _ in range(FLEET)), return_exceptions=True
        )
        sessions = [s for s in outcomes if not isinstance(s, BaseException)]
        try:
            refused = [repr(o) for o in outcomes if isinstance(o, BaseException)]
            assert not refused, f"{len(refused)} of {FLEET} right logins refused, e.g. {refused[0]}"
            assert all(s.properties["$Principal"] == name for s in sessions)
        finally:
            await asyncio.gather(*(s.close() for s in sessions))
        matched = await verified_matches(admin) - before
        assert matched >= FLEET - 1, f"only {matched} of {FLEET} logins skipped scrypt"  # the first one checked it


async def verified_matches(admin: canopy.Session) -> int:
    status = await admin.server.cluster_status()
    return sum((g["guard"] or {}).get("login_verified_matches", 0) for g in status["gateways"])

