from __future__ import annotations

import pytest

from sessions.logins import Admission, Backoff, LoginFailure, LoginGuard, describe_failure


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def attempt(guard: LoginGuard, clock: Clock, principal: str, address: str) -> Admission:
    """One wrong password from a client that waits as told and retries at once."""
    admission = guard.admit(principal, address)
    clock.advance(admission.wait)
    return admission


def test_backoff_numbers() -> None:
    strict = Backoff()
    assert [strict.delay(n) for n in range(12)] == [0, 0, 0, 0.25, 0.5, 1, 2, 4, 8, 16, 30, 30]
    assert strict.saturation == 10 and Backoff(free=10).saturation == 17
    with pytest.raises(ValueError, match="cap < forgive_after"):
        Backoff(cap=60, forgive_after=60)
    with pytest.raises(ValueError):
        Backoff(free=-1)


def test_waits_grow_after_three_free_failures_and_stop_at_the_cap(clock: Clock) -> None:
    guard = LoginGuard(clock, max_wait=60)
    waits = [attempt(guard, clock, "admin", "10.0.0.1").wait for _ in range(13)]
    assert waits == [0, 0, 0, 0.25, 0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert guard.failures("admin", "10.0.0.1") == (10, 13, 13)  # the pair's count stops at its cap


def test_a_longer_wait_than_max_wait_is_refused_uncounted(clock: Clock) -> None:
    guard = LoginGuard(clock)
    waits = [attempt(guard, clock, "admin", "10.0.0.1").wait for _ in range(8)]
    assert waits == [0, 0, 0, 0.25, 0.5, 1, 2, 4]
    refused = guard.admit("admin", "10.0.0.1")  # would wait 8 s
    assert refused == Admission(wait=5.0, admitted=False)
    assert guard.failures("admin", "10.0.0.1") == (8, 8, 8)
    clock.advance(3.0)  # 3 s after the last failure, 5 s to go: it may wait
    assert guard.admit("admin", "10.0.0.1") == Admission(wait=5.0, admitted=True)


def test_parallel_attempts_queue_behind_each_other(clock: Clock) -> None:
    guard = LoginGuard(clock)
    answers = [guard.admit("admin", "10.0.0.1") for _ in range(20)]  # all at the same instant
    assert [a.wait for a in answers if a.admitted] == [0, 0, 0, 0.25, 0.75, 1.75, 3.75]
    assert not any(a.admitted for a in answers[7:])


def test_failures_are_forgiven_one_a_minute(clock: Clock) -> None:
    guard = LoginGuard(clock, max_wait=60)
    for _ in range(13):
        attempt(guard, clock, "admin", "10.0.0.1")
    assert guard.admit("admin", "10.0.0.1").wait == 30
    clock.advance(30)  # that attempt's failure is the last one
    counts = []
    for _ in range(11):
        counts.append(guard.failures("admin", "10.0.0.1")[0])
        clock.advance(60)
    assert counts == [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    assert guard.admit("admin", "10.0.0.1") == Admission(0, True)


def test_a_quiet_minute_halves_the_wait(clock: Clock) -> None:
    guard = LoginGuard(clock, max_wait=60)
    for _ in range(10):
        attempt(guard, clock, "admin", "10.0.0.1")  # the pair at its cap: the next waits 30 s
    clock.advance(60)
    assert guard.admit("admin", "10.0.0.1").wait == 0  # 60 s > 16 s, the wait for 9 failures


def test_the_pair_counts_apart_from_other_principals_and_addresses(clock: Clock) -> None:
    guard = LoginGuard(clock)
    for _ in range(5):
        attempt(guard, clock, "admin", "10.0.0.1")
    assert guard.admit("admin", "10.0.0.1").wait == 1
    assert guard.admit("alice", "10.0.0.1").wait == 0  # same address, another principal
    assert guard.admit("admin", "10.0.0.2").wait == 0  # same principal, another address


def test_an_address_trying_many_principals_is_slowed(clock: Clock) -> None:
    guard = LoginGuard(clock)
    for i in range(10):
        assert attempt(guard, clock, f"user{i}", "10.0.0.1").wait == 0
    assert guard.admit("someone-else", "10.0.0.1").wait == 0.25
    assert guard.admit("someone-else", "10.0.0.2").wait == 0


def test_many_addresses_guessing_one_principal_are_slowed(clock: Clock) -> None:
    guard = LoginGuard(clock)
    for i in range(10):
        assert attempt(guard, clock, "admin", f"10.0.1.{i}").wait == 0
    assert guard.admit("admin", "10.0.2.1").wait == 0.25
    assert guard.admit("alice", "10.0.2.2").wait == 0


def test_unknown_names_are_counted_as_principals_are(clock: Clock) -> None:
    # the guard never sees the security store: its answers cannot depend on it
    guard = LoginGuard(clock)
    for name in ("admin", "no-such-principal"):
        assert [attempt(guard, clock, name, "10.0.0.9" + name).wait for _ in range(6)] == [0, 0, 0, 0.25, 0.5, 1]


def test_a_success_clears_only_its_own_pair(clock: Clock) -> None:
    guard = LoginGuard(clock)
    for _ in range(5):
        attempt(guard, clock, "admin", "10.0.0.1")  # the owner's typos
        attempt(guard, clock, "admin", "10.0.0.66")  # someone guessing
    assert attempt(guard, clock, "admin", "10.0.0.1").admitted
    guard.succeeded("admin", "10.0.0.1")
    assert guard.failures("admin", "10.0.0.1") == (0, 5, 10)  # the success is taken back
    assert guard.admit("admin", "10.0.0.1").wait == 0
    assert guard.failures("admin", "10.0.0.66")[0] == 5  # the guesser is still slowed
    assert guard.admit("admin", "10.0.0.66").wait > 0


def test_a_success_does_not_buy_an_address_fresh_guesses(clock: Clock) -> None:
    guard = LoginGuard(clock)
    for i in range(10):
        attempt(guard, clock, f"victim{i}", "10.0.0.1")
    attempt(guard, clock, "mallory", "10.0.0.1")
    guard.succeeded("mallory", "10.0.0.1")  # a valid account of the guesser's own
    assert guard.failures("victim10", "10.0.0.1")[1] == 10
    assert guard.admit("victim10", "10.0.0.1").wait > 0


def test_guessing_a_principal_does_not_lock_its_owner_out(clock: Clock) -> None:
    guard = LoginGuard(clock)
    attempt(guard, clock, "admin", "192.168.1.5")
    guard.succeeded("admin", "192.168.1.5")  # where the owner logs in from
    for i in range(40):  # many addresses guessing, every one refused or slowed
        guard.admit("admin", f"10.9.{i}.1")
        clock.advance(0.5)
    assert not guard.admit("admin", "10.9.99.1").admitted  # a new address must wait too long
    assert guard.admit("admin", "192.168.1.5") == Admission(0, True)


def test_memory_stays_bounded_under_a_flood_of_addresses(clock: Clock) -> None:
    guard = LoginGuard(clock, max_tracked=1000)
    guard.admit("admin", "192.168.1.5")
    guard.succeeded("admin", "192.168.1.5")
    for i in range(100_000):
        guard.admit("admin", f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}")
        clock.advance(31)  # as slowly as the principal's count lets them through
    # at most 1000 pairs, 1000 addresses, one principal and one trusted pair
    assert guard.tracked() <= 2002
    assert guard.failures("admin", "10.0.0.0")[2] == 17  # the principal's count was never pushed out
    assert guard.admit("admin", "192.168.1.5").admitted


def test_memory_stays_bounded_with_default_limits(clock: Clock) -> None:
    guard = LoginGuard(clock)
    for i in range(25_000):  # new names and new addresses, 75,000 keys unbounded
        guard.admit(f"user{i}", f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}")
    assert guard.tracked() == 30_000


def test_long_names_are_kept_apart_without_being_kept_whole(clock: Clock) -> None:
    guard = LoginGuard(clock)
    first, second = "x" * 1_000_000 + "1", "x" * 1_000_000 + "2"
    for _ in range(4):
        attempt(guard, clock, first, "10.0.0.1")
    assert guard.failures(first, "10.0.0.1")[0] == 4
    assert guard.failures(second, "10.0.0.1")[0] == 0


def test_a_failure_is_described_without_secrets() -> None:
    line = describe_failure("admin", "10.0.0.1", LoginFailure.WRONG_CREDENTIALS, known=True)
    assert line == "login failed for principal 'admin' from 10.0.0.1: wrong password or unknown principal"
    # a name that is not a principal may be a password typed into the wrong field
    typed = describe_failure("hunter2-password", "10.0.0.1", LoginFailure.REFUSED, known=False)
    assert "hunter2" not in typed and "unknown principal (fingerprint " in typed
    assert typed == describe_failure("hunter2-password", "10.0.0.1", LoginFailure.REFUSED, known=False)
    assert typed != describe_failure("hunter3-password", "10.0.0.1", LoginFailure.REFUSED, known=False)
    forged = describe_failure("admin\nlogin ok for root" + "x" * 500, "", LoginFailure.WRONG_CREDENTIALS, known=True)
    assert "\n" not in forged and "\\n" in forged and len(forged) < 200 and "unknown address" in forged
    assert describe_failure(None, "::1", LoginFailure.ANONYMOUS_NOT_ALLOWED, known=False) == (
        "login failed for an anonymous session from ::1: anonymous sessions are not allowed"
    )
