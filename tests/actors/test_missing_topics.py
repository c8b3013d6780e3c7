"""Missing-topic handlers on one server: notification, proceed, cancel, timeout, permissions."""

from __future__ import annotations

import asyncio
import time

import pytest

import canopy
from canopy import errors
from canopy.client import MissingTopicNotification
from tests.actors.conftest import ADMIN, BROKER_SETTINGS
from tests.conftest import until
from topics.selectors import parse_selector

pytestmark = pytest.mark.asyncio
TIMEOUT = BROKER_SETTINGS["missing_topic_timeout_ms"] / 1000


async def test_the_handler_creates_the_topic_and_the_subscriber_receives_it(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as control, canopy.connect(broker, properties={"team": "x"}) as user:
        await control.topics.add(f"{prefix}/a/b", "STRING")
        heard: list[MissingTopicNotification] = []

        async def create(notification: MissingTopicNotification) -> bool:
            heard.append(notification)
            path = parse_selector(notification.selector).path_prefix
            await control.topics.add(path, "STRING")
            await control.topics.set(path, "made for you")
            return True

        async with await control.missing_topics.add_handler(f"{prefix}/a", create):
            sub = await user.topics.subscribe(f"{prefix}/a/d")
            event = await sub.next(timeout=10)
            assert (event.kind, event.path, event.value) == ("subscribed", f"{prefix}/a/d", "made for you")
            [n] = heard
            assert n.selector == f">{prefix}/a/d" and n.path == f"{prefix}/a"
            assert n.session_id == user.session_id and n.properties["team"] == "x"
            assert n.properties["$SessionId"] == user.session_id and len(n.servers) == 1
            # a selector that matches a topic is no notification
            await user.topics.subscribe(f"?{prefix}/a/")
            assert [t.path for t in await user.topics.fetch(f"{prefix}/a/b")] == [f"{prefix}/a/b"]
            assert len(heard) == 1


async def test_cancel_abandons_the_fetch_and_the_subscription(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as control, canopy.connect(broker) as user:
        heard: list[str] = []

        def cancel(notification: MissingTopicNotification) -> bool:
            heard.append(notification.selector)
            return False

        async with await control.missing_topics.add_handler(prefix, cancel):
            with pytest.raises(errors.RequestCancelledError, match="cancelled"):
                await user.topics.fetch(f"?{prefix}/x/")
            with pytest.raises(errors.RequestCancelledError):
                await user.topics.subscribe(f"{prefix}/y")
            assert heard == [f"?{prefix}/x/", f">{prefix}/y"]
        # nothing was subscribed: once the topic exists, another selector shows it to the
        # session, and unsubscribing that one takes it away again (the server says UNSUBSCRIBED)
        await control.topics.add(f"{prefix}/y", "STRING")
        watcher = await user.topics.subscribe(f"?{prefix}//")
        assert (await watcher.next(timeout=10)).path == f"{prefix}/y"
        await user.topics.unsubscribe(f"?{prefix}//")
        await until(lambda: not any(t.path == f"{prefix}/y" for t in user._aliases.values()),
                    what="the topic to leave the session (a cancelled subscription would keep it)")


async def test_no_handler_means_no_wait_and_an_empty_answer(broker: str, prefix: str) -> None:
    async with canopy.connect(broker) as user:
        started = time.monotonic()
        assert await user.topics.fetch(f"?{prefix}/nothing/") == []
        sub = await user.topics.subscribe(f"{prefix}/nothing")
        assert time.monotonic() - started < TIMEOUT
        await sub.unsubscribe()


async def test_the_most_specific_path_is_notified_and_one_handler_per_path(broker: str, prefix: str) -> None:
    async with (
        canopy.connect(broker, *ADMIN) as c1, canopy.connect(broker, *ADMIN) as c2,
        canopy.connect(broker, *ADMIN) as c3, canopy.connect(broker) as user,
    ):
        heard: list[tuple[str, str]] = []

        def named(name: str):  # type: ignore[no-untyped-def]
            def handler(notification: MissingTopicNotification) -> bool:
                heard.append((name, notification.selector))
                return True
            return handler

        await c1.missing_topics.add_handler(prefix, named("branch"))
        first = await c2.missing_topics.add_handler(f"{prefix}/deep", named("deep-first"))
        await c3.missing_topics.add_handler(f"{prefix}/deep", named("deep-second"))
        await user.topics.fetch(f"{prefix}/deep/er/x")
        await user.topics.fetch(f"?{prefix}/other/")
        await user.topics.fetch(f"?{prefix}/de.*")  # its path prefix is the branch: deep does not hear of it
        assert heard == [("deep-first", f">{prefix}/deep/er/x"), ("branch", f"?{prefix}/other/"),
                         ("branch", f"?{prefix}/de.*")]
        await first.close()
        await user.topics.fetch(f"{prefix}/deep/y")
        assert heard[-1] == ("deep-second", f">{prefix}/deep/y")


async def test_a_closed_handler_session_takes_its_registration_and_releases_its_requests(
    broker: str, prefix: str
) -> None:
    async with canopy.connect(broker, *ADMIN) as admin, canopy.connect(broker) as user:
        handler_session = await canopy.connect(broker, *ADMIN)
        asked = asyncio.Event()

        async def never(notification: MissingTopicNotification) -> bool:
            asked.set()
            await asyncio.Event().wait()  # never answers
            return True

        registration = await handler_session.missing_topics.add_handler(prefix, never)
        assert (registration.token, prefix, handler_session.session_id) in await admin.missing_topics.list()
        fetch = asyncio.ensure_future(user.topics.fetch(f"{prefix}/z"))
        await asyncio.wait_for(asked.wait(), 10)
        started = time.monotonic()
        await handler_session.close()
        assert await asyncio.wait_for(fetch, 10) == []  # proceeds at once, not after the timeout
        assert time.monotonic() - started < TIMEOUT
        # the registration went with its session
        assert all(row[1] != prefix for row in await admin.missing_topics.list())


async def test_no_answer_in_time_counts_as_proceed(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as control, canopy.connect(broker) as user:

        async def silent(notification: MissingTopicNotification) -> bool:
            await asyncio.sleep(3600)
            return False

        async with await control.missing_topics.add_handler(prefix, silent):
            started = time.monotonic()
            assert await user.topics.fetch(f"{prefix}/slow") == []
            took = time.monotonic() - started
            assert TIMEOUT - 0.1 <= took < TIMEOUT + 5, took


async def test_a_handler_that_raises_counts_as_proceed(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as control, canopy.connect(broker) as user:

        def broken(notification: MissingTopicNotification) -> bool:
            raise RuntimeError("a bug in the handler")

        async with await control.missing_topics.add_handler(prefix, broken):
            started = time.monotonic()
            assert await user.topics.fetch(f"{prefix}/q") == []
            assert time.monotonic() - started < TIMEOUT


async def test_permissions_and_bad_input(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.security.update(
            ["add_principal", f"{prefix}-h", "handler-password", [f"{prefix}-h"]],
            ["set_global_permissions", f"{prefix}-h", ["REGISTER_HANDLER"]],
            ["set_path_permissions", f"{prefix}-h", f"{prefix}/mine", ["MODIFY_TOPIC", "SELECT_TOPIC"]],
            ["add_principal", f"{prefix}-n", "nohandler-password", [f"{prefix}-n"]],
            ["set_path_permissions", f"{prefix}-n", prefix, ["MODIFY_TOPIC"]],
        )
        async with canopy.connect(broker, f"{prefix}-h", "handler-password") as h:
            registration = await h.missing_topics.add_handler(f"{prefix}/mine", lambda n: True)
            with pytest.raises(errors.PermissionDeniedError, match="MODIFY_TOPIC"):
                await h.missing_topics.add_handler(f"{prefix}/theirs", lambda n: True)
            with pytest.raises(errors.InvalidPathError):
                await h._call("missing_topic_add", 42)
            with pytest.raises(errors.InvalidPathError):
                await h._call("missing_topic_add", "")
            with pytest.raises(errors.InvalidRequestError, match="no missing-topic notification"):
                await h._call("missing_topic_ans", "gw0:m1", "proceed")
            with pytest.raises(errors.InvalidRequestError, match="proceed"):
                await h._call("missing_topic_ans", "gw0:m1", "maybe")
            with pytest.raises(errors.InvalidRequestError, match="registration"):
                await admin._call("missing_topic_rm", registration.token)  # not the admin's
            await registration.close()
        async with canopy.connect(broker, f"{prefix}-n", "nohandler-password") as n:
            with pytest.raises(errors.PermissionDeniedError, match="REGISTER_HANDLER"):
                await n.missing_topics.add_handler(prefix, lambda n: True)
            with pytest.raises(errors.PermissionDeniedError):
                await n.missing_topics.list()


async def test_a_session_holds_a_bounded_number_of_registrations(broker: str, prefix: str) -> None:
    from sessions.missing_topics import MAX_HANDLERS_PER_SESSION

    async with canopy.connect(broker, *ADMIN) as control:
        await asyncio.gather(*(control.missing_topics.add_handler(f"{prefix}/{k}", lambda n: True)
                               for k in range(MAX_HANDLERS_PER_SESSION)))
        with pytest.raises(errors.LimitExceededError):
            await control.missing_topics.add_handler(f"{prefix}/more", lambda n: True)
