"""Topic views end to end through the client: every specification
example, lifecycle, conflicts, throttle, delay, security and errors."""

from __future__ import annotations

import time
from typing import Any

import pytest

import canopy
from canopy import errors
from tests.actors.conftest import ADMIN
from tests.conftest import await_for

pytestmark = pytest.mark.asyncio


async def tree(session: canopy.Session, selector: str) -> dict[str, Any]:
    return {row.path: row.value for row in await session.topics.fetch(selector)}


async def until(session: canopy.Session, selector: str, expected: dict[str, Any], timeout: float = 20) -> None:
    """Poll until the topics under ``selector`` are exactly ``expected``."""

    async def check() -> bool:
        return await tree(session, selector) == expected

    try:
        await await_for(check, timeout, what=f"{selector} == {expected}")
    except AssertionError:
        raise AssertionError(f"{selector}: expected {expected}, have {await tree(session, selector)}") from None


@pytest.fixture
async def admin(broker: str) -> Any:
    async with canopy.connect(broker, *ADMIN) as session:
        yield session


@pytest.fixture
async def views(admin: canopy.Session, prefix: str) -> Any:
    """Names views after the test and removes them afterwards."""
    made: list[str] = []

    async def create(suffix: str, spec: str) -> canopy.client.TopicView:
        name = f"{prefix}:{suffix}"
        made.append(name)
        return await admin.views.create(name, spec)

    yield create
    for name in made:
        await admin.views.remove(name)


async def test_mirror_lifecycle(admin: canopy.Session, views: Any, prefix: str) -> None:
    await admin.topics.add_and_set(f"{prefix}/a/x/y/z", "before")
    view = await views("mirror", f"map ?{prefix}/a// to {prefix}/b/<path(3)>")
    assert view.state == "active" and view.principal == "admin"
    await until(admin, f"?{prefix}/b//", {f"{prefix}/b/x/y/z": "before"})
    await admin.topics.add_and_set(f"{prefix}/a/w", 7)
    await admin.topics.set(f"{prefix}/a/x/y/z", "after")
    await until(admin, f"?{prefix}/b//", {f"{prefix}/b/x/y/z": "after", f"{prefix}/b/w": 7})
    # the reference topic has the source's type and can be subscribed
    async with admin.topics.subscribe(f">{prefix}/b/w") as sub:
        event = await sub.next(15)
        assert (event.path, event.value) == (f"{prefix}/b/w", 7)
        await admin.topics.set(f"{prefix}/a/w", 8)
        assert (await sub.next(15)).value == 8
    # read-only
    with pytest.raises(errors.ReferenceTopicError, match="read-only"):
        await admin.topics.set(f"{prefix}/b/w", 9)
    with pytest.raises(errors.ReferenceTopicError):
        await admin.topics.add(f"{prefix}/b/w", "INT64")
    with pytest.raises(errors.ReferenceTopicError):
        await admin.topics.remove(f">{prefix}/b/w")
    assert await admin.topics.remove(f"?{prefix}/b//") == 0
    # a removed source removes its reference topic; removing the view removes the rest
    await admin.topics.remove(f">{prefix}/a/w")
    await until(admin, f"?{prefix}/b//", {f"{prefix}/b/x/y/z": "after"})
    await admin.views.remove(view.name)
    await until(admin, f"?{prefix}/b//", {})
    await admin.views.remove(view.name)  # absent: still fine


async def test_cars_and_drivers_expansion(admin: canopy.Session, views: Any, prefix: str) -> None:
    cars = {
        "cars": [
            {"reg": "HY58XPA", "type": "Ford", "model": "Sierra"},
            {"reg": "PY59GCA", "type": "Fiat", "model": "Panda"},
            {"reg": "VA63ABC", "type": "Ford", "model": "Ka"},
        ]
    }
    await admin.topics.add_and_set(f"{prefix}/allCars", cars)
    await views("by-reg", f"map {prefix}/allCars to {prefix}/cars/<expand(/cars, /reg)>")
    await views("by-index", f"map {prefix}/allCars to {prefix}/idx/<expand(/cars)>")
    await until(admin, f"?{prefix}/cars//", {f"{prefix}/cars/{c['reg']}": c for c in cars["cars"]})
    await until(admin, f"?{prefix}/idx//", {f"{prefix}/idx/{i}": c for i, c in enumerate(cars["cars"])})
    drivers = {
        "cars": [
            {"reg": "HY58XPA", "drivers": [{"name": "Bill"}, {"name": "Fred"}]},
            {"reg": "PY59GCA", "drivers": [{"name": "Jane"}, {"name": "Fred"}]},
            {"reg": "VA63ABC", "drivers": [{"name": "Tom"}, {"name": "John"}]},
        ]
    }
    await admin.topics.add_and_set(f"{prefix}/allDrivers", drivers)
    await views("drivers", f"map {prefix}/allDrivers to {prefix}/d/<expand(/cars, /reg)>/drivers/<expand(/drivers, /name)>")
    expected = {
        f"{prefix}/d/{car['reg']}/drivers/{d['name']}": d for car in drivers["cars"] for d in car["drivers"]
    }
    assert len(expected) == 6
    await until(admin, f"?{prefix}/d//", expected)
    # an element leaves the array: its reference topic goes
    await admin.topics.set(f"{prefix}/allCars", {"cars": cars["cars"][:2]})
    await until(admin, f"?{prefix}/cars//", {f"{prefix}/cars/{c['reg']}": c for c in cars["cars"][:2]})


async def test_accounts_balances_and_currency(admin: canopy.Session, views: Any, prefix: str) -> None:
    account = {"account": "1234", "balance": {"amount": 12.57, "currency": "USD"}}
    await admin.topics.add_and_set(f"{prefix}/accounts/a1", account)
    await views("currency", f"map ?{prefix}/accounts// to {prefix}/currency/<scalar(/balance/currency)>/account/<scalar(/account)>")
    await views("balances", f"map ?{prefix}/accounts// to {prefix}/balances/<scalar(/account)> as <value(/balance)>")
    await until(admin, f"?{prefix}/currency//", {f"{prefix}/currency/USD/account/1234": account})
    await until(admin, f"?{prefix}/balances//", {f"{prefix}/balances/1234": {"amount": 12.57, "currency": "USD"}})
    # the scalar changes: the reference topic moves
    moved = {"account": "1234", "balance": {"amount": 1.0, "currency": "EUR"}}
    await admin.topics.set(f"{prefix}/accounts/a1", moved)
    await until(admin, f"?{prefix}/currency//", {f"{prefix}/currency/EUR/account/1234": moved})
    # a pointer that selects nothing, or a non-scalar: no reference topic; null -> "null"
    await admin.topics.add_and_set(f"{prefix}/accounts/a2", {"account": None, "balance": {"currency": ["x"]}})
    await until(admin, f"?{prefix}/balances//", {
        f"{prefix}/balances/1234": {"amount": 1.0, "currency": "EUR"},
        f"{prefix}/balances/null": {"currency": ["x"]},
    })
    # non-JSON sources are ignored by value directives
    await admin.topics.add_and_set(f"{prefix}/accounts/text", "plain")
    await until(admin, f"?{prefix}/currency//", {f"{prefix}/currency/EUR/account/1234": moved})


async def test_preserve_topics_keeps_the_old_path(admin: canopy.Session, views: Any, prefix: str) -> None:
    source = f"{prefix}/exhibits/e1"
    value = {"species": "diplodocus", "exhibit": {"id": 137, "category": "fossil"}}
    await admin.topics.add_and_set(source, value)
    spec = "to {p}/{b}/<scalar(/exhibit/category)>/species/<scalar(/species)>"
    await views("moving", f"map {source} " + spec.format(p=prefix, b="moving"))
    await views("kept", f"map {source} " + spec.format(p=prefix, b="kept") + " preserve topics")
    await until(admin, f"?{prefix}/kept//", {f"{prefix}/kept/fossil/species/diplodocus": value})
    changed = {"species": "brontosaurus", "exhibit": {"id": 137, "category": "fossil"}}
    await admin.topics.set(source, changed)
    await until(admin, f"?{prefix}/moving//", {f"{prefix}/moving/fossil/species/brontosaurus": changed})
    await until(admin, f"?{prefix}/kept//", {
        f"{prefix}/kept/fossil/species/diplodocus": value,
        f"{prefix}/kept/fossil/species/brontosaurus": changed,
    })
    await admin.topics.remove(f">{source}")  # the source goes: preserved topics go too
    await until(admin, f"?{prefix}/kept//", {})


async def test_inserts(admin: canopy.Session, views: Any, prefix: str) -> None:
    p = prefix
    await admin.topics.add_and_set(f"{p}/Topics/A/B", {"foo": "bar", "n": 1})
    await admin.topics.add_and_set(f"{p}/AnotherTopic", {"x": 1})
    await views("whole", f"map ?{p}/Topics/ to {p}/Mapped/<path(3)> insert {p}/AnotherTopic at /other")
    await until(admin, f"?{p}/Mapped//", {f"{p}/Mapped/A/B": {"foo": "bar", "n": 1, "other": {"x": 1}}})
    # a reference topic is re-derived when a topic it inserts from changes, appears or goes
    await admin.topics.set(f"{p}/AnotherTopic", {"x": 2})
    await until(admin, f"?{p}/Mapped//", {f"{p}/Mapped/A/B": {"foo": "bar", "n": 1, "other": {"x": 2}}})
    await admin.topics.remove(f">{p}/AnotherTopic")
    await until(admin, f"?{p}/Mapped//", {f"{p}/Mapped/A/B": {"foo": "bar", "n": 1}})
    # <path()> and <scalar()> in the insertion path, key pointer, default, chained inserts, scalar topics
    await admin.topics.add_and_set(f"{p}/Others/A/B", {"foo": "by-path"})
    await admin.topics.add_and_set(f"{p}/Others/bar", 42)
    await views("by-path", f"map ?{p}/Topics/ to {p}/P/<path(3)> insert {p}/Others/<path(3)> key /foo at /other")
    await views("by-scalar", f"map ?{p}/Topics/ to {p}/S/<path(3)> insert {p}/Others/<scalar(/foo)> at /other")
    await views(
        "chained",
        f'map ?{p}/Topics/ to {p}/C/<path(3)> insert {p}/Nothing at /missing default "unknown" '
        f"insert {p}/Others/bar at /list/- default 0 insert {p}/Others/bar at /n",
    )
    await until(admin, f"?{p}/P//", {f"{p}/P/A/B": {"foo": "bar", "n": 1, "other": "by-path"}})
    await until(admin, f"?{p}/S//", {f"{p}/S/A/B": {"foo": "bar", "n": 1, "other": 42}})
    # /list does not exist: the append fails and its default fails too; /n is overwritten
    await until(admin, f"?{p}/C//", {f"{p}/C/A/B": {"foo": "bar", "n": 42, "missing": "unknown"}})
    # insert with expand: once per expanded value; then as <value()> after an insert
    await admin.topics.add_and_set(f"{p}/Topic1", [{"a": 1}, {"a": 2}])
    await admin.topics.add_and_set(f"{p}/AnotherTopic", "text")
    await views("expanded", f"map {p}/Topic1 to {p}/Expanded/<expand()> insert {p}/AnotherTopic at /other")
    await views("projected", f"map {p}/Topics/A/B to {p}/Proj insert {p}/AnotherTopic at /foo2 as <value(/foo2)>")
    await until(admin, f"?{p}/Expanded//", {
        f"{p}/Expanded/0": {"a": 1, "other": "text"}, f"{p}/Expanded/1": {"a": 2, "other": "text"},
    })
    await until(admin, f">{p}/Proj", {f"{p}/Proj": "text"})


async def test_patches(admin: canopy.Session, views: Any, prefix: str) -> None:
    p = prefix
    await admin.topics.add_and_set(f"{p}/src/item", {"name": "cod", "price": 22})
    await views("price", f"""map ?{p}/src// to {p}/tested/<path(3)>
        patch '[{{"op":"test", "path":"/price", "value" : 22}}, {{"op":"add", "path":"/price", "value": 23}}]'""")
    await views("chain", f"""map ?{p}/src// to {p}/chain/<path(3)>
        patch '[{{"op":"add", "path":"/price", "value" : 22}}]'
        insert {p}/AnyTopic at /T/- default "unknown"
        patch '[{{"op":"remove", "path":"/name"}}]'""")
    await until(admin, f"?{p}/tested//", {f"{p}/tested/item": {"name": "cod", "price": 23}})
    await until(admin, f"?{p}/chain//", {f"{p}/chain/item": {"price": 22}})
    # a failing patch removes the reference topic made earlier
    await admin.topics.set(f"{p}/src/item", {"name": "cod", "price": 21})
    await until(admin, f"?{p}/tested//", {})
    # test compares CBOR bytes: key order matters
    await admin.topics.add_and_set(f"{p}/order/x", {"v": {"foo": "bar", "count": 43}})
    await views("same", f"""map ?{p}/order// to {p}/same/<path(3)> patch '[{{"op":"test","path":"/v","value":{{"foo":"bar","count":43}}}}]'""")
    await views("swapped", f"""map ?{p}/order// to {p}/swapped/<path(3)> patch '[{{"op":"test","path":"/v","value":{{"count":43,"foo":"bar"}}}}]'""")
    await until(admin, f"?{p}/same//", {f"{p}/same/x": {"v": {"foo": "bar", "count": 43}}})
    await until(admin, f"?{p}/swapped//", {})


async def test_separator_and_properties(admin: canopy.Session, views: Any, prefix: str) -> None:
    p = prefix
    await admin.topics.add_and_set(f"{p}/a/path/m", {"markets": {"name": "Gold/Silver"}})
    await views("levels", f"map ?{p}/a/path/ to {p}/b/<scalar(/markets/name)>")
    await views("sep", f"map ?{p}/a/path/ to {p}/c/<scalar(/markets/name)> separator '%'")
    await until(admin, f"?{p}/b//", {f"{p}/b/Gold/Silver": {"markets": {"name": "Gold/Silver"}}})
    await until(admin, f"?{p}/c//", {f"{p}/c/Gold%Silver": {"markets": {"name": "Gold/Silver"}}})
    await admin.topics.add(f"{p}/props/x", "STRING", {"CONFLATION": "always", "TIDY_ON_UNSUBSCRIBE": "true"})
    await views("props", f"map ?{p}/props// to {p}/propped/<path(3)> with properties CONFLATION:off, COMPRESSION:false")
    async def properties() -> dict[str, str] | None:
        found = await admin.topics.fetch(f"?{p}/propped//", with_properties=True)
        return found[0].properties if found else None

    props = await await_for(properties, 20, what="the reference topic")
    assert props["CONFLATION"] == "off" and props["COMPRESSION"] == "false"
    assert props["TIDY_ON_UNSUBSCRIBE"] == "true"  # copied from the source


async def test_type_conversions(admin: canopy.Session, views: Any, prefix: str) -> None:
    p = prefix
    await admin.topics.add_and_set(f"{p}/n/int", 123, "INT64")
    await admin.topics.add_and_set(f"{p}/n/double", 12.51, "DOUBLE")
    await admin.topics.add_and_set(f"{p}/n/text", "42", "STRING")
    await admin.topics.add_and_set(f"{p}/n/word", "cod", "STRING")
    await admin.topics.add_and_set(f"{p}/n/json", {"a": 1}, "JSON")
    await views("str", f"map ?{p}/n/ to {p}/as-string/<path(3)> type STRING")
    await views("int", f"map ?{p}/n/ to {p}/as-int/<path(3)> type INT64")
    await views("double", f"map ?{p}/n/ to {p}/as-double/<path(3)> type DOUBLE")
    await views("json", f"map ?{p}/n/ to {p}/as-json/<path(3)> type JSON")
    await until(admin, f"?{p}/as-string//", {
        f"{p}/as-string/int": "123", f"{p}/as-string/double": "12.51",
        f"{p}/as-string/text": "42", f"{p}/as-string/word": "cod",
    })
    await until(admin, f"?{p}/as-int//", {
        f"{p}/as-int/int": 123, f"{p}/as-int/double": 13, f"{p}/as-int/text": 42,
    })
    await until(admin, f"?{p}/as-double//", {
        f"{p}/as-double/int": 123.0, f"{p}/as-double/double": 12.51, f"{p}/as-double/text": 42.0,
    })
    await until(admin, f"?{p}/as-json//", {
        f"{p}/as-json/int": 123, f"{p}/as-json/double": 12.51, f"{p}/as-json/text": "42",
        f"{p}/as-json/word": "cod", f"{p}/as-json/json": {"a": 1},
    })
    # a value that stops converting removes the reference topic
    await admin.topics.set(f"{p}/n/text", "forty-two")
    await until(admin, f"?{p}/as-int//", {f"{p}/as-int/int": 123, f"{p}/as-int/double": 13})
    # to TIME_SERIES: every update appends
    await views("ts", f"map {p}/n/int to {p}/series type TIME_SERIES")
    await until(admin, f">{p}/series", {f"{p}/series": 123})
    await admin.topics.set(f"{p}/n/int", 124)

    async def events() -> list[Any]:
        result = await admin.time_series.range_query(f"{p}/series")
        return [e.value for e in result.events]

    assert await await_for(lambda: _equal(events, [123, 124]), 20, what="two events") is True


async def _equal(get: Any, expected: Any) -> bool:
    return bool(await get() == expected)


async def test_chaining_and_precedence(admin: canopy.Session, views: Any, prefix: str) -> None:
    p = prefix
    await admin.topics.add_and_set(f"{p}/a/x", 1)
    await views("first", f"map ?{p}/a// to {p}/b/<path(3)>")
    await views("second", f"map ?{p}/b// to {p}/c/<path(3)>")  # a reference topic as a source
    await until(admin, f"?{p}/c//", {f"{p}/c/x": 1})
    # two views on one path: the earliest wins, the other takes over when it goes
    await admin.topics.add_and_set(f"{p}/other/x", 2)
    early = await views("early", f"map ?{p}/a// to {p}/same/<path(3)>")
    late = await views("late", f"map ?{p}/other// to {p}/same/<path(3)>")
    assert early.precedence < late.precedence
    await until(admin, f"?{p}/same//", {f"{p}/same/x": 1})
    # replacing keeps precedence
    replaced = await views("early", f"map ?{p}/a// to {p}/same/<path(3)> type STRING")
    assert replaced.precedence == early.precedence
    await until(admin, f"?{p}/same//", {f"{p}/same/x": "1"})
    names = [v.name for v in await admin.views.list()]
    assert names.index(early.name) < names.index(late.name)  # creation order
    await admin.views.remove(early.name)
    await until(admin, f"?{p}/same//", {f"{p}/same/x": 2})
    # a normal topic wins over reference topics: a view never takes a bound path
    await admin.topics.add_and_set(f"{p}/taken/x", "mine")
    await views("blocked", f"map ?{p}/a// to {p}/taken/<path(3)>")
    await admin.topics.add_and_set(f"{p}/a/y", 5)
    await until(admin, f"?{p}/taken//", {f"{p}/taken/x": "mine", f"{p}/taken/y": 5})
    # ... and when the normal topic goes, the view takes the path
    await admin.topics.remove(f">{p}/taken/x")
    await until(admin, f"?{p}/taken//", {f"{p}/taken/x": 1, f"{p}/taken/y": 5})


async def test_throttle(admin: canopy.Session, views: Any, prefix: str) -> None:
    p = prefix
    await admin.topics.add_and_set(f"{p}/a/x", 0)
    await views("throttled", f"map ?{p}/a// to {p}/b/<path(3)> throttle to 1 update every 2 seconds")
    async with admin.topics.subscribe(f">{p}/b/x") as sub:
        assert (await sub.next(15)).value == 0
        for i in range(1, 21):
            await admin.topics.set(f"{p}/a/x", i)
        # the creation counted as this period's update: at most the first of the burst passes
        # (if the period had already ended) and the last one comes when the period ends
        seen = [(await sub.next(15)).value]
        if seen[0] != 20:
            seen.append((await sub.next(15)).value)
        assert seen in ([20], [1, 20]), seen
        with pytest.raises(TimeoutError):
            await sub.next(2.5)


async def test_delay(admin: canopy.Session, views: Any, prefix: str) -> None:
    p = prefix
    await admin.topics.add_and_set(f"{p}/a/x", "v1")
    started = time.monotonic()
    await views("delayed", f"map ?{p}/a// to {p}/late/<path(3)> delay by 2 seconds")
    await views("lower", f"map ?{p}/a// to {p}/late/<path(3)> type STRING")  # created later: loses
    assert await tree(admin, f"?{p}/late//") == {}  # reserved, unpublished
    await until(admin, f"?{p}/late//", {f"{p}/late/x": "v1"})
    assert time.monotonic() - started >= 1.8
    changed = time.monotonic()
    await admin.topics.set(f"{p}/a/x", "v2")
    assert await tree(admin, f"?{p}/late//") == {f"{p}/late/x": "v1"}
    await until(admin, f"?{p}/late//", {f"{p}/late/x": "v2"})
    assert time.monotonic() - changed >= 1.8
    removed = time.monotonic()
    await admin.topics.remove(f">{p}/a/x")
    assert await tree(admin, f"?{p}/late//") == {f"{p}/late/x": "v2"}
    await until(admin, f"?{p}/late//", {})
    assert time.monotonic() - removed >= 1.8


async def test_security_context_and_permissions(broker: str, admin: canopy.Session, prefix: str) -> None:
    p = prefix
    role = f"{p}-viewer"
    await admin.security.update(
        ["set_global_permissions", role, ["MODIFY_TOPIC_VIEWS", "READ_TOPIC_VIEWS"]],
        ["set_path_permissions", role, f"{p}/src", ["SELECT_TOPIC", "READ_TOPIC"]],
        ["set_path_permissions", role, f"{p}/out", ["MODIFY_TOPIC", "READ_TOPIC"]],
        ["add_principal", f"{p}-v", "viewer-pw", [role]],
        ["add_principal", f"{p}-nobody", "nobody-pw", ["CLIENT"]],
    )
    await admin.topics.add_and_set(f"{p}/src/ok", 1)
    await admin.topics.add_and_set(f"{p}/secret/no", 2)
    async with canopy.connect(broker, f"{p}-v", "viewer-pw") as viewer:
        with pytest.raises(errors.PermissionDeniedError, match="SELECT_TOPIC"):
            await viewer.views.create(f"{p}:denied", f"map ?{p}/secret// to {p}/out/<path(2)>")
        view = await viewer.views.create(f"{p}:ctx", f"map ?{p}/src// to {p}/out/<path(2)>")
        assert view.roles == frozenset({role})
        # a second view reads a branch the context cannot read: nothing appears
        await viewer.views.create(f"{p}:wide", f"map ?{p}/src// to {p}/elsewhere/<path(2)>")
    try:
        await until(admin, f"?{p}/out//", {f"{p}/out/src/ok": 1})
        await admin.topics.add_and_set(f"{p}/src/more", 3)
        await until(admin, f"?{p}/out//", {f"{p}/out/src/ok": 1, f"{p}/out/src/more": 3})
        assert await tree(admin, f"?{p}/elsewhere//") == {}  # no MODIFY_TOPIC there
        async with canopy.connect(broker, f"{p}-nobody", "nobody-pw") as nobody:
            with pytest.raises(errors.PermissionDeniedError, match="MODIFY_TOPIC_VIEWS"):
                await nobody.views.create(f"{p}:x", f"map ?{p}/src// to {p}/out2/<path(2)>")
            with pytest.raises(errors.PermissionDeniedError, match="READ_TOPIC_VIEWS"):
                await nobody.views.list()
        # a permission change applies to the view's context
        await admin.security.update(["remove_path_permissions", role, f"{p}/src"])
        await until(admin, f"?{p}/out//", {})
    finally:
        await admin.views.remove(f"{p}:ctx")
        await admin.views.remove(f"{p}:wide")


async def test_bad_specifications_are_typed_errors(admin: canopy.Session, prefix: str) -> None:
    with pytest.raises(errors.ViewSyntaxError) as e:
        await admin.views.create(f"{prefix}:bad", "map a to b throttle 1")
    assert "line 1, column 21" in str(e.value) and "^" in str(e.value)
    with pytest.raises(errors.InvalidViewError, match="OWNER cannot be set"):
        await admin.views.create(f"{prefix}:bad", "map a to b with properties OWNER:x")
    with pytest.raises(errors.InvalidRequestError):
        await admin.views.create("", "map a to b")
    assert f"{prefix}:bad" not in [v.name for v in await admin.views.list()]  # no half-created view


async def test_remote_views_are_stored_inactive(admin: canopy.Session, views: Any, prefix: str) -> None:
    view = await views("remote", f"map ?{prefix}/a/ from Server1 to {prefix}/b/<path(3)>")
    assert view.state.startswith("inactive")
    listed = {v.name: v for v in await admin.views.list()}
    assert listed[view.name].state.startswith("inactive")
    assert listed[view.name].specification == f"map ?{prefix}/a/ from Server1 to {prefix}/b/<path(3)>"
    # an inactive view makes nothing, even when its selector matches local topics
    await admin.topics.add_and_set(f"{prefix}/a/x", 1)
    await admin.views.create(f"{prefix}:local", f"map ?{prefix}/a/ to {prefix}/c/<path(3)>")
    try:
        await until(admin, f"?{prefix}/c//", {f"{prefix}/c/x": 1})
        assert await tree(admin, f"?{prefix}/b//") == {}
    finally:
        await admin.views.remove(f"{prefix}:local")


async def test_time_series_sources(admin: canopy.Session, views: Any, prefix: str) -> None:
    p = prefix
    await admin.topics.add(f"{p}/ts/s", "TIME_SERIES", {
        "TIME_SERIES_EVENT_VALUE_TYPE": "INT64", "TIME_SERIES_RETAINED_RANGE": "limit 5",
    })
    await admin.time_series.append(f"{p}/ts/s", 1)
    # throttling is ignored for time series; the retained range can only narrow
    await views("ts", f"map ?{p}/ts// to {p}/mirror/<path(3)> throttle to 1 update every hour "
                      "with properties TIME_SERIES_RETAINED_RANGE:'limit 50'")
    await views("text", f"map ?{p}/ts// to {p}/text/<path(3)> type STRING")

    async def events() -> list[Any]:
        try:
            result = await admin.time_series.range_query(f"{p}/mirror/s")
        except errors.NoSuchTopicError:
            return []
        return [e.value for e in result.events]

    await await_for(lambda: _equal(events, [1]), 20, what="the first event mirrored")
    for value in (2, 3, 4):
        await admin.time_series.append(f"{p}/ts/s", value)
    await await_for(lambda: _equal(events, [1, 2, 3, 4]), 20, what="every appended event, unthrottled")
    props = (await admin.topics.fetch(f">{p}/mirror/s", with_properties=True))[0].properties
    assert props is not None and props["TIME_SERIES_RETAINED_RANGE"] == "limit 5"
    await until(admin, f"?{p}/text//", {f"{p}/text/s": "4"})
