"""A fuzzer against a live broker: random and mutated frames, selectors,
session filters, topic view specifications and values.

Every input must get a typed answer — a RESPONSE, or an ERROR whose code the
client library knows (never INTERNAL) — or end the session with a stated
reason (too many protocol errors, a frame too large), and the broker must
still serve a normal session afterwards. The session fuzzes as the
administrator of a broker of its own (nothing else shares it), but never
changes the security store, so it can always log in again; HELLOs are fuzzed
without passwords (a failed password counts against the address).

The short variant runs with every ``make test``; ``make soak`` runs a longer
one. Each prints how many inputs it tried and what it saw.
"""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Iterator
from typing import Any

import cbor2
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

import canopy
from canopy import errors
from canopy import protocol as wire
from tests.e2e.conftest import ADMIN, Server, serving

KNOWN_CODES = set(errors._BY_CODE) - {"INTERNAL"}
TOPIC_TYPES = ["STRING", "INT64", "DOUBLE", "JSON", "BINARY", "TIME_SERIES"]
# every operation but security_update: the fuzzer must keep its own login
OPERATIONS = sorted(wire.OPERATIONS - {"security_update"})
SELECTOR_ALPHABET = "ab/>?*#.()[]{}+|\\^$-_0"
PROBE_PATH = ">fuzz/probe/nothing"


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "fuzz", "--partitions", "2", "--max-frame-size", "65536")


class Tally:
    def __init__(self) -> None:
        self.inputs = 0
        self.answers: collections.Counter[str] = collections.Counter()
        self.closes: collections.Counter[str] = collections.Counter()
        self.failures: list[str] = []

    def report(self, name: str) -> str:
        return (
            f"[fuzz] {name}: {self.inputs} inputs, answers {dict(self.answers.most_common())}, "
            f"sessions closed {dict(self.closes)}, failures {len(self.failures)}"
        )


class Fuzzer:
    """One raw admin session (reconnected whenever the broker closes it)."""

    def __init__(self, url: str, tally: Tally) -> None:
        self.url = url
        self.tally = tally
        self.ws: Any = None
        self.cid = 1000

    async def connect(self) -> None:
        self.ws = await ws_connect(self.url, max_size=None, compression=None)
        await self.ws.send(wire.ClientProtocol().hello(*ADMIN))
        assert isinstance(wire.decode(await self.ws.recv())[0], wire.Welcome)

    def next_cid(self) -> int:
        self.cid += 1
        return self.cid

    async def send(self, data: bytes | str, expected: set[int]) -> None:
        """Send one frame, then a probe; every message until the probe's answer is checked."""
        self.tally.inputs += 1
        if self.ws is None:
            await self.connect()
        probe = self.next_cid()
        try:
            await self.ws.send(data)
            await self.ws.send(msgpack.packb([[wire.REQUEST, probe, "fetch", [PROBE_PATH, True, False, None, None]]]))
            await self._read_until(probe, expected)
        except ConnectionClosed as e:
            reason = e.rcvd.reason if e.rcvd is not None else "dropped"
            self.tally.closes[reason or str(e.rcvd.code if e.rcvd else "dropped")] += 1
            if reason not in ("PROTOCOL_ERROR", "FRAME_TOO_LARGE", "") and (e.rcvd is None or e.rcvd.code != 1009):
                self.tally.failures.append(f"closed with {e.rcvd!r} after {data[:80]!r}")
            self.ws = None

    async def _read_until(self, probe: int, expected: set[int]) -> None:
        """Until the probe and every expected request are answered (answers
        may come in any order: a subscribe waits for snapshots, a fetch not)."""
        probed = False
        try:
            async with asyncio.timeout(30):
                while not probed or expected:
                    probed = self._check(wire.decode(await self.ws.recv()), probe, expected) or probed
        except TimeoutError:
            self.tally.failures.append(f"requests {sorted(expected)} got no answer (probe answered: {probed})")

    def _check(self, messages: list[Any], probe: int, expected: set[int]) -> bool:
        probed = False
        for m in messages:
            if isinstance(m, wire.Error):
                self.tally.answers[m.code] += 1
                if m.code not in KNOWN_CODES:
                    self.tally.failures.append(f"untyped error {m.code}: {m.message}")
                expected.discard(m.cid)
            elif isinstance(m, wire.Response):
                if m.cid == probe:
                    probed = True
                    continue
                self.tally.answers["RESPONSE"] += 1
                expected.discard(m.cid)
            elif isinstance(m, wire.Close):
                self.tally.closes[m.code] += 1
        return probed

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


# -- what the fuzzer sends ---------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=True), st.text(max_size=30),
    st.binary(max_size=40),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
selectors = st.text(SELECTOR_ALPHABET, max_size=40) | st.sampled_from([">a", "?a//", "*.*", "#>a////?b/", "?(a|b)+/", "*a.*"])
filters = st.text("abc$ '=<>!()andornotisinhas\"", max_size=60) | st.sampled_from(["$Principal is 'admin'", "A is 'b' and not C has 'd'"])
view_specs = st.text("map ?a// to b/<path(1)> insert at expand patch throttle delay by 5 seconds {}[]/$\"'", max_size=120) | st.sampled_from([
    "map ?fuzz// to fuzzed/<path(1)>", "map ?fuzz// to x/<scalar(/a)> type STRING", "map >fuzz/t to y/<expand(/l)>",
])


def request(op: str, args: list[Any], cid: int) -> list[Any]:
    return [wire.REQUEST, cid, op, args]


@st.composite
def requests(draw: Any) -> tuple[list[Any], set[int]]:
    """A frame of 1..4 requests with arguments of every shape, some well formed."""
    items = []
    cids = set()
    for _ in range(draw(st.integers(1, 4))):
        cid = draw(st.integers(1, 900))
        op = draw(st.sampled_from([*OPERATIONS, "nope", ""]))
        kind = draw(st.sampled_from(["random", "selector", "filter", "view", "value"]))
        if kind == "selector":
            args = [draw(selectors), *draw(st.lists(scalars, max_size=4))]
            op = draw(st.sampled_from(["subscribe", "unsubscribe", "fetch", "remove"]))
        elif kind == "filter":
            op = draw(st.sampled_from(["session_get", "session_set"]))
            args = [["filter", draw(filters)], {"K": "v"}][: 1 if op == "session_get" else 2]
        elif kind == "view":
            op = "view_create"
            args = [draw(st.text(max_size=10)), draw(view_specs)]
        elif kind == "value":
            op = draw(st.sampled_from(["set", "append"]))
            value = draw(values)
            encoded = draw(st.one_of(st.just(_cbor(value)), st.binary(max_size=30)))
            args = [f"fuzz/{draw(st.sampled_from(['s', 'i', 'd', 'j', 'b', 'ts']))}", encoded, draw(st.booleans())]
            if op == "set":
                args += [draw(st.one_of(st.none(), st.sampled_from(TOPIC_TYPES))), draw(st.booleans())]
        else:
            args = draw(st.lists(values, max_size=7))
        items.append(request(op, args, cid))
        cids.add(cid)
    return items, cids


def _cbor(value: Any) -> bytes:
    try:
        return bytes(cbor2.dumps(value))
    except Exception:
        return b"\xff"


def mutate(data: bytes, rnd: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        choice = rnd.random()
        if choice < 0.4 and out:
            out[rnd.randrange(len(out))] = rnd.randrange(256)
        elif choice < 0.6 and out:
            del out[rnd.randrange(len(out)) :]
        elif choice < 0.8:
            out.insert(rnd.randrange(len(out) + 1), rnd.randrange(256))
        else:
            out += bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
    return bytes(out)


async def seed(url: str) -> None:
    async with canopy.connect(url, *ADMIN) as admin:
        for path, type_name in (("s", "STRING"), ("i", "INT64"), ("d", "DOUBLE"), ("j", "JSON"), ("b", "BINARY")):
            await admin.topics.add(f"fuzz/{path}", type_name)
        await admin.topics.add("fuzz/ts", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "STRING"})


async def still_serves(url: str) -> None:
    async with canopy.connect(url, *ADMIN) as s:
        await s.topics.add_and_set("after/fuzz", "alive")
        assert [r.value for r in await s.topics.fetch(">after/fuzz")] == ["alive"]


async def hellos(url: str, tally: Tally, rnd: random.Random, count: int) -> None:
    """Malformed and anonymous HELLOs, each on a connection of its own."""
    good = wire.ClientProtocol().hello(None, None, {"K": "v"})
    for _ in range(count):
        tally.inputs += 1
        frame = mutate(good, rnd) if rnd.random() < 0.8 else bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 30)))
        try:
            async with ws_connect(url, compression=None) as ws:
                await ws.send(frame)
                for m in wire.decode(await asyncio.wait_for(ws.recv(), 15)):
                    if isinstance(m, wire.Error):
                        tally.answers[m.code] += 1
                        if m.code not in KNOWN_CODES:
                            tally.failures.append(f"untyped hello error {m.code}")
                    elif isinstance(m, wire.Welcome):
                        tally.answers["WELCOME"] += 1
        except ConnectionClosed:
            tally.closes["hello"] += 1
        except wire.ProtocolError as e:
            tally.failures.append(f"the broker answered a HELLO with a bad frame: {e}")


async def fuzz(url: str, examples: int, seed_value: int) -> Tally:
    await seed(url)
    tally = Tally()
    fuzzer = Fuzzer(url, tally)
    rnd = random.Random(seed_value)

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def cases(data: st.DataObject) -> None:
        items, cids = data.draw(requests())
        frame = msgpack.packb(items, use_bin_type=True)
        kind = rnd.random()
        if kind < 0.6:
            jobs.append((frame, cids))
        elif kind < 0.85:
            jobs.append((mutate(frame, rnd), set()))  # a mutated frame: any cid may be gone
        elif kind < 0.95:
            jobs.append((bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 64))), set()))
        else:
            jobs.append(("text, not binary", set()))

    jobs: list[tuple[bytes | str, set[int]]] = []
    cases()  # hypothesis draws the inputs; they are sent below, on the loop
    try:
        for data, cids in jobs:
            await fuzzer.send(data, cids)
    finally:
        await fuzzer.close()
    await hellos(url, tally, rnd, max(10, examples // 20))
    await still_serves(url)
    return tally


async def test_every_fuzzed_input_gets_a_typed_answer(target: Server) -> None:
    tally = await fuzz(target.url, examples=400, seed_value=11)
    print(tally.report("short"))
    assert tally.failures == [], tally.failures[:10]
    assert tally.inputs >= 400 and sum(tally.answers.values()) > 400


@pytest.mark.soak
async def test_soak_every_fuzzed_input_gets_a_typed_answer(target: Server) -> None:
    tally = await fuzz(target.url, examples=20_000, seed_value=1234)
    print(tally.report("soak"))
    assert tally.failures == [], tally.failures[:10]
