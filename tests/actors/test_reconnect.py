"""Clients reconnect to the real broker; the gateway keeps a session whose
connection dropped for its grace period and lets its client resume it.

The connections go through a TCP proxy that the tests cut (both sides see the
connection drop, without a close frame, as a network failure would) or pause
(nothing listens for a while)."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

import msgpack
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

import canopy
from canopy import errors
from canopy import protocol as wire
from canopy.client import TopicEvent
from cluster.config import ServerConfig
from tests.actors.conftest import ADMIN, BROKER_SETTINGS
from tests.conftest import until

#: how long the broker keeps a session whose connection dropped (s)
GRACE = int(BROKER_SETTINGS.get("session_grace_ms", ServerConfig().session_grace_ms)) / 1000


class Proxy:
    """A TCP proxy in front of the gateway. :meth:`cut` breaks every connection
    through it; :meth:`pause` does that and refuses new ones until :meth:`resume`."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.host, self.target_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> Proxy:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self.writers.add(up_writer)
        try:
            await asyncio.gather(self._copy(reader, up_writer), self._copy(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.transport.abort()
                self.writers.discard(w)
            self.tasks.discard(task)

    @staticmethod
    async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()

    def cut(self) -> None:
        for writer in list(self.writers):
            writer.transport.abort()

    async def pause(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        self.cut()

    async def resume(self) -> None:
        await self.start()  # on the same port

    async def stop(self) -> None:
        await self.pause()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)


@pytest.fixture
async def proxy(broker: str) -> Any:
    p = await Proxy(broker).start()
    yield p
    await p.stop()


async def events_until(sub: Any, kind: str, timeout: float = 30) -> list[TopicEvent]:
    """The subscription's events up to and including the first of ``kind``."""
    out: list[TopicEvent] = []
    async with asyncio.timeout(timeout):
        while not out or out[-1].kind != kind:
            out.append(await sub.next())
    return out


async def session_exists(admin: canopy.Session, session_id: str) -> bool:
    return session_id in await admin.sessions.get_properties(session_id)


async def test_a_dropped_subscriber_resumes_its_session_and_misses_nothing(
    broker: str, proxy: Proxy, prefix: str
) -> None:
    path = f"{prefix}/n"
    async with canopy.connect(broker, *ADMIN) as publisher, \
            canopy.connect(proxy.url, *ADMIN, properties={"K": "v"}, retry_delay=0.05) as subscriber:
        await publisher.topics.add(path, "INT64", {"CONFLATION": "off"})
        await publisher.topics.set(path, 0)
        sub = await subscriber.topics.subscribe(f">{path}")
        called: list[TopicEvent] = []
        await subscriber.topics.subscribe(f"?{prefix}//", callback=called.append)
        first_id = subscriber.session_id
        assert [(e.kind, e.value) for e in await events_until(sub, "subscribed")] == [("subscribed", 0)]
        for n in range(1, 21):
            await publisher.topics.set(path, n)
        assert [(await sub.next(10)).value for _ in range(20)] == list(range(1, 21))

        proxy.cut()
        assert [e.kind for e in await events_until(sub, "disconnected")] == ["disconnected"]
        for n in range(21, 41):  # while it is away (or already back)
            await publisher.topics.set(path, n)
        back = await events_until(sub, "reconnected")
        assert back[-1].reason == "RESUMED" and back[-1].value == first_id
        assert subscriber.session_id == first_id and subscriber.properties["K"] == "v"
        for n in range(41, 61):
            await publisher.topics.set(path, n)
        after = [e.value for e in back if e.kind == "value"]
        while not after or after[-1] != 60:
            event = await sub.next(10)
            assert event.kind == "value", event
            after.append(event.value)
        # the refresh brought the value current at the resume; every later one followed, in order
        assert after[0] >= 20 and after == list(range(after[0], 61)), after
        assert subscriber.errors == []
        await until(lambda: called and called[-1].kind == "value" and called[-1].value == 60, 10, "the callback")
        kinds = [e.kind for e in called]
        assert kinds.count("disconnected") == kinds.count("reconnected") == 1
        assert kinds.index("disconnected") < kinds.index("reconnected")

        await subscriber.close()  # a clean close ends the session at once
        deadline = time.monotonic() + 10
        while await session_exists(publisher, first_id):
            assert time.monotonic() < deadline, "the closed session is still there"
            await asyncio.sleep(0.05)


async def test_requests_in_flight_fail_as_interrupted_and_those_made_meanwhile_wait(
    broker: str, proxy: Proxy, prefix: str
) -> None:
    path = f"{prefix}/v"
    async with canopy.connect(proxy.url, *ADMIN, retry_delay=0.05) as session:
        await session.topics.add_and_set(path, -1)
        sub = await session.topics.subscribe(f">{path}")
        pending = [session.topics.set(path, n) for n in range(300)]
        await asyncio.sleep(0)  # they leave...
        await proxy.pause()  # ...and the connection drops under them
        outcomes = await asyncio.gather(*pending, return_exceptions=True)
        assert all(o is None or isinstance(o, errors.ConnectionInterruptedError) for o in outcomes), outcomes
        assert any(isinstance(o, errors.ConnectionInterruptedError) for o in outcomes)
        assert [e.kind for e in await events_until(sub, "disconnected")][-1:] == ["disconnected"]
        assert not session.connected and not session.closed

        waiting = session.topics.set(path, 1000)
        fetching = asyncio.ensure_future(session.topics.fetch(f">{path}"))
        await asyncio.sleep(0.3)
        assert not waiting.done() and not fetching.done()
        await proxy.resume()
        await asyncio.wait_for(waiting, 30)
        rows = await asyncio.wait_for(fetching, 30)
        assert [r.value for r in rows] == [1000]
        assert (await events_until(sub, "reconnected"))[-1].reason == "RESUMED"
        assert session.errors == []  # no answer meant for the dead connection came to the new one
        assert [r.value for r in await session.topics.fetch(f">{path}")] == [1000]


async def test_when_the_reconnect_timeout_passes_the_session_ends(broker: str, proxy: Proxy) -> None:
    session = await canopy.connect(proxy.url, *ADMIN, reconnect_timeout=1, retry_delay=0.1)
    sub = await session.topics.subscribe(">nothing/here")
    await proxy.pause()
    assert (await sub.next(10)).kind == "disconnected"
    with pytest.raises(errors.SessionClosedError) as info:
        await asyncio.wait_for(sub.next(), 10)
    assert info.value.code == "RECONNECT_TIMEOUT" and session.closed
    with pytest.raises(errors.SessionClosedError):
        await session.topics.fetch(">nothing/here")
    await session.close()


async def hello(url: str, principal: str | None, password: str | None, resume: wire.Resume | None = None) -> Any:
    """A raw connection and what its HELLO got."""
    ws = await ws_connect(url)
    await ws.send(wire.ClientProtocol().hello(principal, password, None, resume))
    return ws, wire.decode(await ws.recv())[0]


async def test_only_the_sessions_own_principal_with_its_token_resumes_it(broker: str, prefix: str) -> None:
    alice, mallory = f"{prefix}-alice", f"{prefix}-mallory"
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.security.add_principal(alice, "alice-password", ["CLIENT"])
        await admin.security.add_principal(mallory, "mallory-password", ["CLIENT"])
        ws, welcome = await hello(broker, alice, "alice-password")
        assert isinstance(welcome, wire.Welcome) and not welcome.resumed and len(welcome.resume_token) >= 32
        ws.transport.abort()  # dropped: the gateway keeps the session
        sid, token = welcome.session_id, welcome.resume_token
        opened = [ws]
        try:
            for principal, password, resume in [
                (alice, "alice-password", wire.Resume(sid, token[:-1] + "x")),  # a wrong token
                (mallory, "mallory-password", wire.Resume(sid, token)),  # another principal
                (None, None, wire.Resume(sid, token)),  # nobody
                (alice, "alice-password", wire.Resume(sid + "0", token)),  # no such session
            ]:
                other, answer = await hello(broker, principal, password, resume)
                opened.append(other)
                if isinstance(answer, wire.Error):  # anonymous sessions may be refused outright
                    assert principal is None and answer.code == "AUTHENTICATION_FAILED"
                    continue
                assert isinstance(answer, wire.Welcome) and not answer.resumed, answer
                assert answer.session_id != sid and answer.refresh == 0
            refused, answer = await hello(broker, alice, "wrong password", wire.Resume(sid, token))
            opened.append(refused)
            assert isinstance(answer, wire.Error) and answer.code == "AUTHENTICATION_FAILED"  # logins as usual

            assert await session_exists(admin, sid)  # none of that hurt it
            back, answer = await hello(broker, alice, "alice-password", wire.Resume(sid, token))
            opened.append(back)
            assert isinstance(answer, wire.Welcome) and answer.resumed and answer.session_id == sid
            assert answer.resume_token == token and answer.properties["$Principal"] == alice
            # it is the session: its requests are answered on the new connection
            await back.send(msgpack.packb([[wire.REQUEST, 1, "fetch", [">nothing", True, False, None, None]]]))
            assert wire.decode(await back.recv()) == [wire.Response(1, [])]

            # a second resume while the first is connected takes it over; the first is dropped
            again, answer = await hello(broker, alice, "alice-password", wire.Resume(sid, token))
            opened.append(again)
            assert isinstance(answer, wire.Welcome) and answer.resumed
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(back.recv(), 10)
        finally:
            for connection in opened:
                await connection.close()
        await admin.security.remove_principal(alice)
        await admin.security.remove_principal(mallory)


async def test_a_resumed_session_gets_its_topics_refreshed_with_the_values_of_now(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.topics.add_and_set(f"{prefix}/a", 1)
        await admin.topics.add_and_set(f"{prefix}/b", "x")
        ws, welcome = await hello(broker, *ADMIN)
        await ws.send(msgpack.packb([[wire.REQUEST, 1, "subscribe", [f"?{prefix}//"]]]))
        announced: dict[int, str] = {}
        async with asyncio.timeout(10):
            while True:
                messages = wire.decode(await ws.recv())
                announced |= {m.alias: m.path for m in messages if isinstance(m, wire.Subscribed)}
                if wire.Response(1, None) in messages:
                    break
        ws.transport.abort()
        await admin.topics.set(f"{prefix}/a", 2)  # while it is away
        await admin.topics.remove(f">{prefix}/b")
        back, answer = await hello(broker, *ADMIN, wire.Resume(welcome.session_id, welcome.resume_token))
        try:
            assert isinstance(answer, wire.Welcome) and answer.resumed and answer.refresh == 1
            refresh = wire.decode(await asyncio.wait_for(back.recv(), 10))
            alias = {p: a for a, p in announced.items()}[f"{prefix}/a"]
            assert refresh[:1] == [wire.Subscribed(alias, f"{prefix}/a", "INT64", [], b"\x02")]
        finally:
            await back.close()
            await ws.close()


async def test_a_session_past_its_grace_period_is_opened_anew_and_subscribed_again(
    broker: str, proxy: Proxy, prefix: str
) -> None:
    path = f"{prefix}/g"
    async with canopy.connect(broker, *ADMIN) as admin, \
            canopy.connect(proxy.url, *ADMIN, retry_delay=0.5, reconnect_timeout=GRACE + 30) as session:
        await admin.topics.add_and_set(path, 1)
        sub = await session.topics.subscribe(f">{path}")
        assert (await sub.next(10)).value == 1
        first_id = session.session_id
        await proxy.pause()
        assert (await sub.next(10)).kind == "disconnected"
        assert await session_exists(admin, first_id)  # kept...
        deadline = time.monotonic() + GRACE + 20
        while await session_exists(admin, first_id):  # ...for the grace period
            assert time.monotonic() < deadline, "the kept session never ended"
            await asyncio.sleep(0.5)
        await admin.topics.set(path, 2)
        await proxy.resume()
        back = await events_until(sub, "reconnected")
        assert [(e.kind, e.value) for e in back[:-1]] == [("value", 2)]
        assert back[-1].reason == "NEW_SESSION" and session.session_id != first_id
        await admin.topics.set(path, 3)  # subscribed again: updates flow
        assert (await sub.next(10)).value == 3


async def test_the_sync_facade_reconnects_too(broker: str, proxy: Proxy, prefix: str) -> None:
    path = f"{prefix}/s"
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.topics.add_and_set(path, 1)
        session = await asyncio.to_thread(canopy.connect_sync, proxy.url, *ADMIN, retry_delay=0.05)
        try:
            sub = await asyncio.to_thread(session.topics.subscribe, f">{path}")
            assert (await asyncio.to_thread(sub.next, 10)).value == 1
            proxy.cut()
            events = [await asyncio.to_thread(sub.next, 30) for _ in range(3)]
            assert [e.kind for e in events] == ["disconnected", "value", "reconnected"]
            assert session.connected and session.session_id == events[-1].value
        finally:
            await asyncio.to_thread(session.close)
