from __future__ import annotations

import heapq
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions.logins import Admission, Backoff, LoginFailure, LoginGuard, VerifiedPasswords, describe_failure


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


def login(guard: LoginGuard, clock: Clock, principal: str, address: str) -> Admission:
    """The right password from a client that waits as told."""
    admission = attempt(guard, clock, principal, address)
    if admission.admitted:
        guard.succeeded(principal, address)
    return admission


def pair_only(clock: Clock) -> LoginGuard:
    """A guard that counts only (principal, address) pairs: what the pair's own backoff allows."""
    never = Backoff(free=10**9)
    return LoginGuard(clock, address=never, principal=never)


def guess_for(
    clock: Clock, guard: LoginGuard, seconds: float, connections: int, principals: list[str], addresses: list[str],
    *, own: tuple[str, str] | None = None,
) -> int:
    """Wrong passwords from ``connections`` busy connections for ``seconds``,
    each trying the next principal from the next address in turn (and, with
    ``own``, logging in to an account of its own between guesses); how many
    guesses were checked."""
    names, places = itertools.cycle(principals), itertools.cycle(addresses)
    ready = [(clock.now, c) for c in range(connections)]
    end, checked = clock.now + seconds, 0
    while ready[0][0] < end:
        at, c = heapq.heappop(ready)
        clock.now = at
        admission = guard.admit(next(names), next(places))
        checked += admission.admitted
        at += admission.wait  # a refused attempt is answered after max_wait too
        if own is not None:
            clock.now = at
            mine = guard.admit(*own)
            if mine.admitted:
                guard.succeeded(*own)
            at += mine.wait
        heapq.heappush(ready, (at, c))
    return checked


def test_backoff_numbers() -> None:
    strict = Backoff()
    assert [strict.delay(n) for n in range(12)] == [0, 0, 0, 0.25, 0.5, 1, 2, 4, 8, 16, 30, 30]
    assert strict.saturation == 10 and Backoff(free=10).saturation == 17 and Backoff(free=100).saturation == 107
    with pytest.raises(ValueError, match="cap < forgive_after"):
        Backoff(cap=60, forgive_after=60)
    with pytest.raises(ValueError):
        Backoff(free=-1)
    with pytest.raises(ValueError, match="pace <= max_wait"):
        LoginGuard(lambda: 0.0, pace=6)


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


def test_an_address_trying_many_principals_is_paced_after_100_failures(clock: Clock) -> None:
    guard = LoginGuard(clock)
    for i in range(100):
        assert attempt(guard, clock, f"user{i}", "10.0.0.1").wait == 0
    # beyond them, principals that did not fail from there wait the address's backoff, capped at 1 s
    waits = [attempt(guard, clock, f"someone-else{i}", "10.0.0.1").wait for i in range(6)]
    assert waits == [0.25, 0.5, 1, 1, 1, 1]
    assert guard.failures("anyone", "10.0.0.1")[1] == 106
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
    for i in range(100):
        attempt(guard, clock, f"victim{i}", "10.0.0.1")
    login(guard, clock, "mallory", "10.0.0.1")  # a valid account of the guesser's own
    assert guard.failures("victim100", "10.0.0.1")[1] == 100  # its own attempt taken back, nothing more
    assert guard.admit("victim100", "10.0.0.1").wait > 0


def test_successes_take_back_at_most_their_own_attempts(clock: Clock) -> None:
    guard = LoginGuard(clock, max_wait=60)
    for i in range(120):  # the address's count stops at 107
        attempt(guard, clock, f"victim{i}", "10.0.0.1")
    for _ in range(3):  # typos, then the right password, of a valid account of the guesser's own
        assert attempt(guard, clock, "mallory", "10.0.0.1").admitted
        assert attempt(guard, clock, "mallory", "10.0.0.1").admitted
        login(guard, clock, "mallory", "10.0.0.1")
    # the count was at its ceiling when the first attempt came: that one failure, no more
    assert guard.failures("x", "10.0.0.1")[1] == 106


def test_spraying_gains_nothing_from_an_account_of_its_own(clock: Clock) -> None:
    victims = [f"victim{i}" for i in range(5000)]
    alone = guess_for(clock, LoginGuard(clock), 600, 4, victims, ["10.0.0.1"])
    with_account = guess_for(clock, LoginGuard(clock), 600, 4, victims, ["10.0.0.1"], own=("mallory", "10.0.0.1"))
    assert with_account <= alone <= 100 + 2 + 600 + 5


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


# -- issue 24: one address's failures must not lock out everyone behind it -----------


def test_the_probe_a_burst_at_two_principals_locks_out_no_one_else(clock: Clock) -> None:
    """The hostile-user probe: from one address, 20 wrong guesses at each of two
    principals, all at once; then correct logins from the same address."""
    guard, own = LoginGuard(clock), pair_only(clock)
    for name in ("alice", "bob"):
        for _ in range(20):
            assert guard.admit(name, "127.0.0.1") == own.admit(name, "127.0.0.1")  # only the pair held them back
    # (a) a principal nobody guessed: no wait at all
    assert guard.admit("carol", "127.0.0.1") == Admission(0, True)
    guard.succeeded("carol", "127.0.0.1")
    # (b) a guessed principal waits its pair's own backoff, and no longer: 7 guesses were
    #     checked (the last 3.75 s after the burst), the next one 4 s after that
    assert guard.admit("alice", "127.0.0.1") == own.admit("alice", "127.0.0.1") == Admission(5.0, False)
    clock.advance(2.75)
    assert guard.admit("alice", "127.0.0.1") == own.admit("alice", "127.0.0.1") == Admission(5.0, True)
    clock.advance(5.0)
    guard.succeeded("alice", "127.0.0.1")
    assert guard.admit("alice", "127.0.0.1") == Admission(0, True)  # a success clears the pair
    guard.succeeded("alice", "127.0.0.1")
    assert guard.admit("bob", "127.0.0.1") == Admission(0, True)  # his slot has passed too
    assert guard.stats()["login_refused"] == guard.stats()["login_refused_pair"] == 2 * 13 + 1


def test_the_probe_a_patient_guesser_locks_out_no_one_else(clock: Clock) -> None:
    """The same, from a client that waits as told and retries a refusal after max_wait."""
    guard, own = LoginGuard(clock), pair_only(clock)
    for name in ("alice", "bob"):
        for _ in range(20):
            admission = guard.admit(name, "127.0.0.1")
            assert admission == own.admit(name, "127.0.0.1")
            clock.advance(admission.wait)
    assert guard.admit("carol", "127.0.0.1") == Admission(0, True)
    for name in ("alice", "bob"):
        while not (admission := guard.admit(name, "127.0.0.1")).admitted:  # refused no longer than its pair
            assert admission == own.admit(name, "127.0.0.1")
            clock.advance(admission.wait)
        assert admission == own.admit(name, "127.0.0.1")
        clock.advance(admission.wait)
        guard.succeeded(name, "127.0.0.1")
        assert guard.admit(name, "127.0.0.1") == Admission(0, True)
        guard.succeeded(name, "127.0.0.1")


def test_a_principal_guessed_from_a_busy_address_waits_its_backoff_too(clock: Clock) -> None:
    guard = LoginGuard(clock, max_wait=60)
    for _ in range(3):
        attempt(guard, clock, "alice", "10.0.0.1")  # alice's pair is in its backoff from here
    login(guard, clock, "dave", "10.0.0.1")  # dave is trusted here
    for _ in range(3):
        attempt(guard, clock, "dave", "10.0.0.1")  # and his pair in its backoff too
    for i in range(110):
        attempt(guard, clock, f"user{i}", "10.0.0.1")  # the address at its cap: 30 s after each failure
    assert guard.admit("alice", "10.0.0.1").wait == 30  # suspect: the address's backoff
    assert guard.admit("carol", "10.0.0.1").wait == 1  # did not fail here: 1 s after the last paced attempt
    assert guard.admit("dave", "10.0.0.1").wait == 2  # trusted here: paced too, behind carol


def test_a_burst_from_an_address_is_queued_then_forgiven_a_failure_a_minute(clock: Clock) -> None:
    guard = LoginGuard(clock)
    burst = [guard.admit(f"user{i}", "10.0.0.1") for i in range(400)]  # all at once, each at a new principal
    assert [a.wait for a in burst[:106]] == [0] * 100 + [0.25, 0.75, 1.75, 2.75, 3.75, 4.75]  # 1 s apart at most
    assert not any(a.admitted for a in burst[106:])  # the paced queue is 5 s long: parallelism buys nothing
    clock.advance(4.75)  # the last one is counted
    assert guard.admit("carol", "10.0.0.1") == Admission(1.0, True)  # 1 s after the last paced attempt, at most
    clock.advance(1.0)
    counts = []
    for _ in range(9):
        counts.append(guard.failures("x", "10.0.0.1")[1])
        clock.advance(60)
    assert counts == [107, 106, 105, 104, 103, 102, 101, 100, 99]  # free again within 8 quiet minutes
    assert guard.admit("erin", "10.0.0.1") == Admission(0, True)


def test_the_documented_rates(clock: Clock) -> None:
    hour = 3600.0
    # one principal from one address: 120 an hour after 3 free and 5 more within 8 s
    assert 120 <= guess_for(clock, LoginGuard(clock), hour, 1, ["admin"], ["10.0.0.1"]) - 8 <= 122
    # one principal from many addresses, many connections: 120 an hour after 10 free and a ramp
    many = [f"10.1.{i >> 8}.{i & 255}" for i in range(5000)]
    assert 120 <= guess_for(clock, LoginGuard(clock), hour, 50, ["admin"], many) - 10 <= 130
    # one address at many principals, many connections: 3,600 an hour after 100 free
    victims = [f"victim{i}" for i in range(20_000)]
    assert 3590 <= guess_for(clock, LoginGuard(clock), hour, 50, victims, ["10.0.0.1"]) - 100 <= 3610


@settings(max_examples=30)
@given(connections=st.sampled_from([1, 2, 10, 100]), principals=st.integers(1, 3000), seconds=st.integers(1, 900))
def test_parallel_connections_buy_no_guesses_from_one_address(connections: int, principals: int, seconds: int) -> None:
    clock = Clock()
    names = [f"user{i}" for i in range(principals)]
    checked = guess_for(clock, LoginGuard(clock), seconds, connections, names, ["10.0.0.1"])
    # 100 free, the ramp (0.25 s, 0.5 s), then one a second, and a queue up to max_wait (5 s) ahead
    assert checked <= 100 + 2 + seconds + 5


@settings(max_examples=60)
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 40), st.integers(1, 40), st.floats(0, 90), st.booleans(), st.booleans()),
        max_size=40,
    )
)
def test_a_lone_guesser_cannot_keep_a_user_out(steps: list[tuple[int, int, float, bool, bool]]) -> None:
    """Whatever one client (one connection at a time) guesses from an address,
    a principal that has not failed from there, or is trusted there, logs in
    from there after at most ``pace`` (1 s)."""
    clock = Clock()
    guard = LoginGuard(clock)
    login(guard, clock, "owner", "10.0.0.1")
    victims = itertools.count()
    for k, (guesses, spread, pause, newcomer, owner) in enumerate(steps):
        first = next(victims)
        for j in range(guesses):  # at `spread` principals in turn; a refusal is answered after max_wait
            attempt(guard, clock, f"victim{first + j % spread}", "10.0.0.1")
        clock.advance(pause)
        for name in [f"newcomer{k}"] * newcomer + ["owner"] * owner:
            admission = login(guard, clock, name, "10.0.0.1")
            assert admission.admitted and admission.wait <= 1.0, (name, admission, guard.failures(name, "10.0.0.1"))


def test_stats_count_what_the_guard_did(clock: Clock) -> None:
    guard = LoginGuard(clock)
    assert guard.stats() == {
        "login_admitted": 0, "login_succeeded": 0, "login_failures": 0, "login_delayed": 0, "login_refused": 0,
        "login_refused_pair": 0, "login_refused_address": 0, "login_refused_principal": 0, "login_refused_turn": 0,
        "login_pairs": 0, "login_addresses": 0, "login_principals": 0, "login_trusted": 0,
    }
    for _ in range(9):
        guard.admit("admin", "10.0.0.1")  # all at once: 7 admitted (4 of them wait), 2 refused by the pair
    for i in range(15):
        guard.admit("root", f"10.0.1.{i}")  # 10 free, then 4 wait on the principal's count, 1 is refused
    clock.advance(10)
    login(guard, clock, "alice", "10.0.0.1")
    assert guard.stats() == {
        "login_admitted": 22, "login_succeeded": 1, "login_failures": 21, "login_delayed": 8, "login_refused": 3,
        "login_refused_pair": 2, "login_refused_address": 0, "login_refused_principal": 1, "login_refused_turn": 0,
        "login_pairs": 15, "login_addresses": 15, "login_principals": 2, "login_trusted": 1,
    }
    guard.admit("victim", "10.0.0.1")
    for i in range(120):
        guard.admit(f"user{i}", "10.0.0.1")  # new principals, all at once: beyond the paced queue
    assert guard.stats()["login_refused_address"] == 120 - (100 - 8) - 6
    before = guard.stats()["login_refused"]
    guard.turn_timed_out()  # an attempt that waited its whole time for its turn
    assert guard.stats()["login_refused_turn"] == 1 and guard.stats()["login_refused"] == before + 1


def test_a_flood_of_fresh_names_does_not_push_out_a_guessed_principal() -> None:
    """With room for few keys, names that failed once each push out one another,
    not the count of a principal that is being held back."""
    clock = Clock()
    guard = LoginGuard(clock, max_tracked=20)
    for _ in range(12):  # "victim" is guessed from many addresses: held back on its own count
        admission = guard.admit("victim", f"10.0.0.{_}")
        clock.advance(admission.wait)
    assert guard.failures("victim", "10.9.9.9")[2] >= 10
    for i in range(500):  # a flood of fresh names, each failing once
        guard.admit(f"fresh-{i}", f"10.1.{i // 250}.{i % 250}")
    assert guard.failures("victim", "10.9.9.9")[2] >= 10


# -- passwords checked lately ---------------------------------------------------------


def test_a_verified_password_matches_only_itself_against_the_same_hash(clock: Clock) -> None:
    verified = VerifiedPasswords(clock)
    assert not verified.matches("alice", "right", "hash-1")  # nothing checked yet
    verified.remember("alice", "right", "hash-1")
    assert verified.matches("alice", "right", "hash-1")
    assert not verified.matches("alice", "wrong", "hash-1")
    assert not verified.matches("alice", "right", "hash-2")  # her password changed since
    assert not verified.matches("bob", "right", "hash-1")  # another principal
    assert verified.matched == 1


def test_a_verified_password_is_forgotten_after_its_ttl(clock: Clock) -> None:
    verified = VerifiedPasswords(clock, ttl=300)
    verified.remember("alice", "right", "h")
    clock.advance(300)
    assert verified.matches("alice", "right", "h")
    clock.advance(0.001)
    assert not verified.matches("alice", "right", "h")
    assert len(verified) == 0


def test_verified_passwords_are_bounded_the_least_lately_checked_forgotten_first(clock: Clock) -> None:
    verified = VerifiedPasswords(clock, limit=3)
    for name in ("a", "b", "c"):
        verified.remember(name, "pw", "h")
    verified.remember("a", "pw", "h")  # checked again: now the latest
    verified.remember("d", "pw", "h")
    assert len(verified) == 3
    assert not verified.matches("b", "pw", "h")
    assert all(verified.matches(name, "pw", "h") for name in ("a", "c", "d"))
    long = "x" * 200  # kept as a digest, still told apart
    verified.remember(long, "pw", "h")
    assert verified.matches(long, "pw", "h") and not verified.matches(long + "y", "pw", "h")


def test_verified_passwords_keep_no_password() -> None:
    verified = VerifiedPasswords(Clock())
    verified.remember("alice", "correct horse battery staple", "h")
    assert "correct horse" not in repr(vars(verified))


def test_an_attempt_that_waited_already_waits_at_most_what_is_left(clock: Clock) -> None:
    """An attempt that waited for its turn gets only the rest of max_wait: a wait longer
    than that is refused, uncounted, and answered when the rest has passed."""
    guard = pair_only(clock)
    for _ in range(4):  # 3 free failures, then one more: the next waits 0.5 s
        attempt(guard, clock, "p", "a")
    before = guard.failures("p", "a")
    refused = guard.admit("p", "a", max_wait=0.2)
    assert refused == Admission(0.2, admitted=False) and guard.failures("p", "a") == before
    assert guard.admit("p", "a", max_wait=1.0) == Admission(0.5, admitted=True)
    assert guard.admit("q", "a", max_wait=-3).admitted  # nothing to wait for: never refused
