"""The client reconnects: against a scripted gateway on the client's own
WebSocket shell (real loopback TCP) that keeps sessions, resumes them with
their token and refreshes their topics as protocol version 3 says, or has
forgotten them (the grace period passed) so that the client opens a new one."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import cbor2
import pytest

import canopy
from canopy import errors
from canopy import protocol as wire
from canopy import transport
from canopy.client import TopicEvent
from canopy.transport import Handler, WebSocketStream
from tests.conftest import until
from topics.selectors import Selector, parse_selector

FAST = {"retry_delay": 0.02, "timeout": 2.0}


@dataclass
class Kept:
    """A session of the scripted gateway."""

    id: str
    token: str
    principal: str | None
    selectors: list[Selector] = field(default_factory=list)
    aliases: dict[str, int] = field(default_factory=dict)  # path -> alias
    stream: WebSocketStream | None = None


class Gateway:
    """Topics (path -> type, CBOR value), sessions kept until forgotten, requests answered at once
    except a fetch of ``>held``, which is never answered."""

    def __init__(self, name: str = "gw") -> None:
        self.name = name
        self.topics: dict[str, tuple[str, bytes | None]] = {}
        self.properties: dict[str, list[list[str]]] = {}
        #: path -> the events a TIME_SERIES topic's SUBSCRIBED is followed by (alias 0: the topic's)
        self.windows: dict[str, list[wire.Event]] = {}
        self.sessions: dict[str, Kept] = {}
        self.hellos: list[wire.Hello] = []
        self.requests: list[tuple[str, wire.Request]] = []
        self.streams: list[WebSocketStream] = []
        self.refuse: str | None = None  # an error code to answer every HELLO with
        self.refresh_with_welcome = False  # the refresh in the WELCOME's own frame
        self.hold_once: set[str] = set()  # selectors whose first subscribe is never answered
        #: selector -> how many more subscribes to refuse UNAVAILABLE (a partition failing over)
        self.unavailable: dict[str, int] = {}
        self.serial = 0
        self.alias = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> Gateway:
        factory = transport.serve_stream(lambda: Connection(self), max_size=1 << 20)
        self.server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Gone: nothing listens on its port any more and its connections drop."""
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        for stream in self.streams:
            stream.abort()

    # -- what a test does to it ----------------------------------------------------------

    def drop(self, session_id: str, *, forget: bool = False) -> None:
        """The connection breaks without a close; the session stays, unless
        ``forget`` (as if its grace period had passed by the time its client is back)."""
        kept = self.sessions.pop(session_id) if forget else self.sessions[session_id]
        assert kept.stream is not None
        kept.stream.abort()

    def add(self, path: str, type_name: str, value: Any) -> None:
        self.topics[path] = (type_name, cbor2.dumps(value) if value is not None else None)
        for s in self.sessions.values():
            self._announce(s, path, send=True)

    def set(self, path: str, value: Any) -> None:
        type_name, _ = self.topics[path]
        data = cbor2.dumps(value)
        self.topics[path] = (type_name, data)
        for s in self.sessions.values():
            if path in s.aliases and s.stream is not None:
                s.stream.send(wire.encode_frame([wire.Value(s.aliases[path], data)]))

    def remove(self, path: str) -> None:
        del self.topics[path]
        for s in self.sessions.values():
            alias = s.aliases.pop(path, None)
            if alias is not None and s.stream is not None:
                s.stream.send(wire.encode_frame([wire.Unsubscribed(alias, "REMOVED")]))

    # -- the protocol ------------------------------------------------------------------

    def _announce(self, s: Kept, path: str, send: bool) -> list[wire.Message]:
        if path in s.aliases or not any(sel.matches(path) for sel in s.selectors):
            return []
        self.alias += 1
        s.aliases[path] = self.alias
        type_name, value = self.topics[path]
        message = wire.Subscribed(self.alias, path, type_name, self.properties.get(path, []), value)
        if send and s.stream is not None:
            s.stream.send(wire.encode_frame([message]))
        return [message]

    def hello(self, stream: WebSocketStream, hello: wire.Hello) -> Kept | None:
        self.hellos.append(hello)
        if self.refuse is not None:
            stream.send(wire.encode_frame([wire.Error(0, self.refuse, "refused")]))
            stream.close(1008, self.refuse)
            return None
        resume = hello.resume
        kept = self.sessions.get(resume.session_id) if resume is not None else None
        if kept is not None and resume is not None and resume.token == kept.token and kept.principal == hello.principal:
            if kept.stream is not None:
                kept.stream.abort()
            kept.stream = stream
            refresh: list[wire.Message] = []
            for path, alias in kept.aliases.items():
                type_name, value = self.topics[path]
                refresh.append(wire.Subscribed(alias, path, type_name, self.properties.get(path, []), value))
                refresh += [e._replace(alias=alias) for e in self.windows.get(path, [])]
            welcome = wire.Welcome(wire.PROTOCOL_VERSION, kept.id, {}, 1 << 20, "hub", 100, kept.token, True, len(refresh))
            if self.refresh_with_welcome:
                stream.send(wire.encode_frame([welcome, *refresh]))
            else:
                stream.send(wire.encode_frame([welcome]))
                if refresh:
                    stream.send(wire.encode_frame(list(refresh)))
            return kept
        self.serial += 1
        kept = Kept(f"{self.name}-{self.serial}", secrets.token_hex(8), hello.principal, stream=stream)
        self.sessions[kept.id] = kept
        welcome = wire.Welcome(wire.PROTOCOL_VERSION, kept.id, {"$SessionId": kept.id}, 1 << 20, "hub", 100, kept.token)
        stream.send(wire.encode_frame([welcome]))
        return kept

    def request(self, s: Kept, r: wire.Request) -> None:
        assert s.stream is not None
        self.requests.append((s.id, r))
        out: list[wire.Message] = []
        if r.op == "subscribe" and r.args[0] in self.hold_once:
            self.hold_once.discard(r.args[0])
            return  # never answered
        if r.op == "subscribe" and self.unavailable.get(r.args[0], 0) > 0:
            self.unavailable[r.args[0]] -= 1
            out.append(wire.Error(r.cid, "UNAVAILABLE", "partition 2 is unavailable: its stream closed"))
        elif r.op == "subscribe":
            s.selectors.append(parse_selector(r.args[0]))
            for path in self.topics:
                out += self._announce(s, path, send=False)
            out.append(wire.Response(r.cid, None))
        elif r.op == "unsubscribe":
            s.selectors = [sel for sel in s.selectors if str(sel) != r.args[0]]
            for path in [p for p in s.aliases if not any(sel.matches(p) for sel in s.selectors)]:
                out.append(wire.Unsubscribed(s.aliases.pop(path), "REQUESTED"))
            out.append(wire.Response(r.cid, None))
        elif r.op == "set":
            path, data = r.args[0], r.args[1]
            if path in self.topics:
                self.set(path, cbor2.loads(data))
            else:
                self.add(path, r.args[3] or "INT64", cbor2.loads(data))
            out.append(wire.Response(r.cid, None))
        elif r.op == "fetch" and r.args[0] == ">held":
            return  # never answered
        elif r.op == "fetch":
            out.append(wire.Response(r.cid, []))
        else:
            out.append(wire.Error(r.cid, "UNKNOWN_OPERATION", r.op))
        s.stream.send(wire.encode_frame(out))


class Connection(Handler):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.session: Kept | None = None

    def on_open(self, stream: WebSocketStream) -> None:
        self.gateway.streams.append(stream)

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        assert isinstance(data, bytes)
        for m in wire.decode(data):
            if isinstance(m, wire.Hello):
                self.session = self.gateway.hello(stream, m)
            elif isinstance(m, wire.Request) and self.session is not None and self.session.stream is stream:
                self.gateway.request(self.session, m)

    def on_closed(self, stream: WebSocketStream) -> None:
        session = self.session
        if session is None or session.stream is not stream:
            return
        session.stream = None
        close = stream.protocol.close_rcvd
        if close is not None and close.code in (1000, 1001):  # the client ended it
            self.gateway.sessions.pop(session.id, None)


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = await Gateway().start()
    yield gw
    await gw.stop()


def kinds(events: list[TopicEvent]) -> list[tuple[str, str, Any]]:
    return [(e.kind, e.path, e.value if e.kind != "disconnected" else None) for e in events]


async def take(sub: canopy.Subscription, count: int) -> list[TopicEvent]:
    return [await sub.next(5) for _ in range(count)]


async def test_a_dropped_connection_resumes_the_session_and_brings_subscriptions_up_to_date(gateway: Gateway) -> None:
    gateway.add("a/x", "INT64", 1)
    gateway.add("a/y", "INT64", 2)
    async with canopy.connect(gateway.url, **FAST) as session:
        iterated = await session.topics.subscribe("?a//")
        called: list[TopicEvent] = []
        await session.topics.subscribe("?a//", callback=called.append)
        assert kinds(await take(iterated, 2)) == [("subscribed", "a/x", 1), ("subscribed", "a/y", 2)]
        first_id = session.session_id

        gateway.drop(first_id)
        disconnected = await iterated.next(5)
        assert disconnected.kind == "disconnected" and disconnected.type is None
        assert "dropped" in (disconnected.reason or "")
        gateway.set("a/x", 10)  # while it is away
        gateway.remove("a/y")
        gateway.add("a/z", "INT64", 3)
        after = await take(iterated, 4)
        assert kinds(after) == [
            ("value", "a/x", 10),  # a topic it knew: its current value
            ("subscribed", "a/z", 3),  # one that appeared
            ("unsubscribed", "a/y", None),  # one that went
            ("reconnected", "", first_id),
        ]
        assert after[2].reason == "DISCONNECTED" and after[3].reason == "RESUMED"
        assert session.session_id == first_id and session.connected and session.reconnects == 1
        assert gateway.hellos[-1].resume == wire.Resume(first_id, gateway.sessions[first_id].token)
        assert not [r for _, r in gateway.requests[2:] if r.op == "subscribe"]  # nothing subscribed again

        gateway.set("a/z", 4)  # and it goes on
        assert kinds([await iterated.next(5)]) == [("value", "a/z", 4)]
        # a callback subscription is told the same, in the same order
        await until(lambda: len(called) == 8, 5, "the callback's events")
        assert [e.kind for e in called[:3]] == ["subscribed", "subscribed", "disconnected"]
        assert kinds(called[3:7]) == kinds(after) and kinds(called[7:]) == [("value", "a/z", 4)]


async def test_a_session_the_server_forgot_is_opened_anew_and_every_selector_subscribed_again(
    gateway: Gateway,
) -> None:
    gateway.add("a/x", "INT64", 1)
    gateway.add("hub/org/x", "JSON", {"k": 1})
    async with canopy.connect(gateway.url, "alice", "pw", {"TIER": "1"}, **FAST) as session:
        topics = await session.topics.subscribe("?a//")
        hub = await session.hub.subscribe("org.*")
        assert kinds(await take(topics, 1)) == [("subscribed", "a/x", 1)]
        assert (await hub.next(5)).name == "org.x"
        first_id = session.session_id

        gateway.drop(first_id, forget=True)
        assert (await topics.next(5)).kind == "disconnected"
        after = await take(topics, 2)
        assert kinds(after) == [("value", "a/x", 1), ("reconnected", "", session.session_id)]
        assert after[1].reason == "NEW_SESSION" and session.session_id != first_id
        hub_after = await take(hub, 3)
        assert [e.kind for e in hub_after] == ["disconnected", "value", "reconnected"]
        assert (hub_after[1].name, hub_after[1].value) == ("org.x", {"k": 1})
        again = gateway.hellos[-1]  # the same principal, password and properties
        assert (again.principal, again.password, again.properties) == ("alice", "pw", {"TIER": "1"})
        assert again.resume is not None and again.resume.session_id == first_id  # it asked
        resubscribed = sorted(r.args[0] for sid, r in gateway.requests if sid == session.session_id)
        assert resubscribed == ["?a//", "?hub/org/.+"]
        gateway.set("a/x", 5)
        assert kinds([await topics.next(5)]) == [("value", "a/x", 5)]


async def test_requests_in_flight_fail_as_interrupted_and_those_made_meanwhile_wait(gateway: Gateway) -> None:
    async with canopy.connect(gateway.url, **FAST) as session:
        sub = await session.topics.subscribe(">a")
        held = asyncio.ensure_future(session.topics.fetch(">held"))  # the server never answers it
        await until(lambda: any(r.args == [">held", True, False, None, None] for _, r in gateway.requests), 5, "the fetch")
        await gateway.stop()  # it is gone for a while: nothing listens
        with pytest.raises(errors.ConnectionInterruptedError, match="outcome is unknown"):
            await held
        assert not session.closed and not session.connected
        assert (await sub.next(5)).kind == "disconnected"
        waiting = asyncio.ensure_future(session.topics.fetch(">a"))
        setting = session.topics.set("a", 1, "INT64")
        await asyncio.sleep(0.2)  # it retries meanwhile
        assert not waiting.done() and not setting.done()
        await gateway.start()  # back, on the same port, with the session still kept
        assert await asyncio.wait_for(waiting, 5) == []
        await asyncio.wait_for(setting, 5)
        # the session was resumed with nothing to refresh; then the set made the topic
        assert kinds(await take(sub, 2)) == [("reconnected", "", session.session_id), ("subscribed", "a", 1)]


async def test_when_the_reconnect_timeout_passes_the_session_ends(gateway: Gateway) -> None:
    session = await canopy.connect(gateway.url, reconnect_timeout=0.3, retry_delay=0.05)
    sub = await session.topics.subscribe(">a")
    called: list[TopicEvent] = []
    ended = await session.topics.subscribe(">b", callback=called.append)
    await gateway.stop()
    assert (await sub.next(5)).kind == "disconnected"
    waiting = asyncio.ensure_future(session.topics.fetch(">a"))
    async with asyncio.timeout(5):
        with pytest.raises(errors.SessionClosedError) as info:
            await waiting
        with pytest.raises(errors.SessionClosedError) as sub_info:
            await sub.next()
    assert info.value.code == "RECONNECT_TIMEOUT" and sub_info.value is info.value
    assert "could not reconnect within 0.3 s" in str(info.value) and "cannot connect" in str(info.value)
    assert session.closed and ended.ended and [e.kind for e in called] == ["disconnected"]
    with pytest.raises(errors.SessionClosedError):
        await session.topics.fetch(">a")
    await session.close()


async def test_it_goes_round_the_urls_from_the_one_it_had() -> None:
    first, second = await Gateway("one").start(), await Gateway("two").start()
    try:
        async with canopy.connect([first.url, second.url], **FAST) as session:
            assert session.session_id == "one-1"
            sub = await session.topics.subscribe(">a")
            await first.stop()
            assert (await sub.next(5)).kind == "disconnected"
            back = await sub.next(5)
            assert (back.kind, back.reason, session.session_id) == ("reconnected", "NEW_SESSION", "two-1")
            assert [h.resume.session_id if h.resume else None for h in second.hellos] == ["one-1"]
    finally:
        await first.stop()
        await second.stop()


async def test_connecting_tries_every_url_in_turn(gateway: Gateway) -> None:
    dead = await Gateway().start()
    await dead.stop()
    async with canopy.connect([dead.url, gateway.url]) as session:
        assert session.session_id == "gw-1"
    with pytest.raises(errors.ConnectError, match="none of 2 URLs answered"):
        await canopy.connect([dead.url, dead.url], timeout=1)


@pytest.mark.parametrize(
    ("close", "code"),
    [
        (wire.Close("QUEUE_LIMIT", "too slow"), 4001),
        (wire.Close("PROTOCOL_ERROR", "too many errors"), 1008),
        (None, 1008),
        (None, 1002),
        (None, 4999),
    ],
)
async def test_a_server_that_ends_the_session_on_purpose_ends_it_for_good(
    gateway: Gateway, close: wire.Close | None, code: int
) -> None:
    session = await canopy.connect(gateway.url, **FAST)
    sub = await session.topics.subscribe(">a")
    stream = gateway.sessions[session.session_id].stream
    assert stream is not None
    if close is not None:
        stream.send(wire.encode_frame([close]))
    stream.close(code, close.code if close is not None else "")
    with pytest.raises(errors.SessionClosedError) as info:
        await sub.next(5)
    assert info.value.code == (close.code if close is not None else "SESSION_CLOSED")
    assert session.closed and len(gateway.hellos) == 1  # never tried again
    await session.close()


async def test_a_gateway_that_shuts_down_is_no_end(gateway: Gateway) -> None:
    async with canopy.connect(gateway.url, **FAST) as session:
        sub = await session.topics.subscribe(">a")
        first_id = session.session_id
        stream = gateway.sessions[first_id].stream
        assert stream is not None
        gateway.sessions.pop(first_id)  # it took its sessions with it
        stream.send(wire.encode_frame([wire.Close("SERVER_SHUTDOWN", "the server is shutting down")]))
        stream.close(1001, "SERVER_SHUTDOWN")
        down = await sub.next(5)
        assert down.kind == "disconnected" and "SERVER_SHUTDOWN" in (down.reason or "")
        back = await sub.next(5)
        assert back.kind == "reconnected" and back.reason == "NEW_SESSION" and not session.closed


async def test_a_server_that_refuses_the_login_again_ends_the_session(gateway: Gateway) -> None:
    session = await canopy.connect(gateway.url, "alice", "old password", **FAST)
    sub = await session.topics.subscribe(">a")
    gateway.refuse = "AUTHENTICATION_FAILED"  # the password changed meanwhile
    gateway.drop(session.session_id)
    assert (await sub.next(5)).kind == "disconnected"
    with pytest.raises(errors.SessionClosedError) as info:
        await sub.next(5)
    assert info.value.code == "AUTHENTICATION_FAILED" and session.closed
    assert len(gateway.hellos) == 2  # not tried again and again: that would only lock it out
    await session.close()


async def test_closing_while_reconnecting_ends_everything_at_once(gateway: Gateway) -> None:
    session = await canopy.connect(gateway.url, reconnect_timeout=60, retry_delay=0.05)
    sub = await session.topics.subscribe(">a")
    await gateway.stop()
    assert (await sub.next(5)).kind == "disconnected"
    waiting = asyncio.ensure_future(session.topics.fetch(">a"))
    async with asyncio.timeout(5):
        await session.close()
        with pytest.raises(StopAsyncIteration):
            await sub.__anext__()  # ended, not failed: the client closed it
        with pytest.raises(errors.SessionClosedError, match="closed by the client"):
            await waiting


async def test_a_time_series_refresh_delivers_only_the_events_not_seen(gateway: Gateway) -> None:
    props = [["TIME_SERIES_EVENT_VALUE_TYPE", "INT64"]]
    async with canopy.connect(gateway.url, **FAST) as session:
        sub = await session.topics.subscribe(">ts")
        kept = gateway.sessions[session.session_id]
        stream = kept.stream
        assert stream is not None
        kept.aliases["ts"] = 99
        gateway.topics["ts"] = ("TIME_SERIES", None)
        gateway.properties["ts"] = props

        def events(*sequences: int) -> list[wire.Message]:
            return [wire.Event(99, n, 1000 + n, "me", cbor2.dumps(n)) for n in sequences]

        stream.send(wire.encode_frame([wire.Subscribed(99, "ts", "TIME_SERIES", props, None), *events(1, 2)]))
        assert [e.kind for e in await take(sub, 3)] == ["subscribed", "value", "value"]
        gateway.windows["ts"] = events(1, 2, 3)  # the window: two seen, one new
        gateway.drop(session.session_id)
        after = await take(sub, 3)
        assert [(e.kind, e.event.sequence if e.event else None) for e in after] == [
            ("disconnected", None), ("value", 3), ("reconnected", None),
        ]


async def test_the_cli_subscriber_reconnects_and_says_so_on_stderr(
    gateway: Gateway, capsys: pytest.CaptureFixture[str]
) -> None:
    from canopy import cli

    gateway.add("a", "INT64", 1)
    argv = ["topic", "subscribe", ">a", "--count", "3", "--url", gateway.url, "--reconnect-timeout", "10"]
    run = asyncio.ensure_future(asyncio.to_thread(cli.main, argv))
    await until(lambda: any(r.op == "subscribe" for _, r in gateway.requests), 10, "the CLI to subscribe")
    gateway.drop("gw-1")
    await until(lambda: len(gateway.hellos) == 2 and gateway.sessions["gw-1"].stream is not None, 10, "a resume")
    gateway.set("a", 2)
    assert await asyncio.wait_for(run, 10) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["subscribed a INT64 1", "value a INT64 1", "value a INT64 2"]
    assert err.splitlines() == [
        f"canopy: the connection to {gateway.url} was lost (it was dropped); reconnecting",
        "canopy: reconnected (resumed session gw-1)",
    ]


async def test_a_subscribe_in_flight_is_made_again_rather_than_failed(gateway: Gateway) -> None:
    gateway.add("slow", "INT64", 7)
    gateway.hold_once.add(">slow")
    async with canopy.connect(gateway.url, **FAST) as session:
        subscribing = asyncio.ensure_future(session.topics.subscribe(">slow").__aenter__())
        await until(lambda: any(r.op == "subscribe" for _, r in gateway.requests), 5, "the subscribe")
        gateway.drop(session.session_id)
        sub = await asyncio.wait_for(subscribing, 5)  # not a ConnectionInterruptedError: made again
        assert [r.args[0] for _, r in gateway.requests if r.op == "subscribe"] == [">slow", ">slow"]
        # it was being made when the connection dropped: it is told so, like the others
        assert [e.kind for e in await take(sub, 3)] == ["disconnected", "reconnected", "subscribed"]


async def test_a_refresh_in_the_welcomes_own_frame_counts_too(gateway: Gateway) -> None:
    gateway.add("a", "INT64", 1)
    gateway.refresh_with_welcome = True
    async with canopy.connect(gateway.url, **FAST) as session:
        sub = await session.topics.subscribe(">a")
        assert kinds(await take(sub, 1)) == [("subscribed", "a", 1)]
        gateway.set("a", 2)
        assert kinds(await take(sub, 1)) == [("value", "a", 2)]
        gateway.drop(session.session_id)
        assert [e.kind for e in await take(sub, 3)] == ["disconnected", "value", "reconnected"]


async def test_a_resubscription_refused_unavailable_is_tried_again_until_the_partition_is_back(
    gateway: Gateway,
) -> None:
    """A new gateway after a node was lost: its way to a partition may still be failing
    over, so the subscription waits and tries again rather than ending."""
    gateway.add("a/x", "INT64", 1)
    async with canopy.connect(gateway.url, "alice", "pw", reconnect_timeout=10, **FAST) as session:
        topics = await session.topics.subscribe("?a//")
        assert kinds(await take(topics, 1)) == [("subscribed", "a/x", 1)]
        gateway.unavailable["?a//"] = 3
        gateway.drop(session.session_id, forget=True)
        assert (await topics.next(5)).kind == "disconnected"
        after = await take(topics, 2)
        assert kinds(after) == [("value", "a/x", 1), ("reconnected", "", session.session_id)]
        tries = [r.args[0] for sid, r in gateway.requests if sid == session.session_id and r.op == "subscribe"]
        assert tries == ["?a//"] * 4 and not topics.ended
        gateway.set("a/x", 2)
        assert kinds([await topics.next(5)]) == [("value", "a/x", 2)]


async def test_a_resubscription_still_unavailable_at_the_reconnect_timeout_ends(gateway: Gateway) -> None:
    gateway.add("a/x", "INT64", 1)
    async with canopy.connect(gateway.url, "alice", "pw", reconnect_timeout=0.3, **FAST) as session:
        topics = await session.topics.subscribe("?a//")
        await take(topics, 1)
        gateway.unavailable["?a//"] = 1_000_000
        gateway.drop(session.session_id, forget=True)
        assert (await topics.next(5)).kind == "disconnected"
        await until(lambda: topics.ended, 10, "the subscription to end")
        with pytest.raises(errors.UnavailableError):
            await topics.next(1)
