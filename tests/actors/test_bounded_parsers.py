"""Input nested deeper than a parser's limit gets a typed error naming the limit,
never an uncaught RecursionError that cuts the connection; the session goes on.

Each case is sent twice where the client checks it first: through the client's
API (refused locally) and as a client that does not check would send it (the
server's answer).
"""

from __future__ import annotations

from typing import Any

import pytest

import canopy
from canopy import errors
from canopy import protocol as wire
from sessions.filters import MAX_FILTER_DEPTH
from tests.actors.conftest import ADMIN
from tests.actors.test_bad_input import Raw
from topics.selectors import MAX_SELECTOR_DEPTH
from topics.types import MAX_JSON_DEPTH

pytestmark = pytest.mark.asyncio

#: the hostile-user probe: under the 4,096-character selector limit, it raised
#: RecursionError in the gateway and the connection was cut
PROBE = "#" * 2000 + ">a"


def _nested(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


async def test_the_probe_selector_is_a_typed_error_and_the_session_goes_on(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add_and_set(f"{prefix}/s", "good")
        limit = f"selector sets may nest at most {MAX_SELECTOR_DEPTH} deep at position {MAX_SELECTOR_DEPTH}"
        with pytest.raises(errors.InvalidSelectorError, match=limit):
            await s.topics.fetch(PROBE)  # the client parses it first
        with pytest.raises(errors.InvalidSelectorError, match=limit):
            await s._call("fetch", PROBE, True, False, None, None)
        with pytest.raises(errors.InvalidSelectorError, match=limit):
            await s._call("remove", PROBE)
        assert not s.closed
        assert [r.value for r in await s.topics.fetch(f">{prefix}/s")] == ["good"]
        nested_within = "#" * MAX_SELECTOR_DEPTH + f">{prefix}/s"
        rows = await s._call("fetch", nested_within, True, False, None, None)
        assert [(path, value) for path, _, _, value, _ in rows] == [(f"{prefix}/s", b"dgood")]  # CBOR "good"


async def test_a_deep_json_value_is_a_typed_error_and_the_session_goes_on(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        path = f"{prefix}/j"
        await s.topics.add_and_set(path, {"ok": [1]}, "JSON")
        with pytest.raises(errors.InvalidValueError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
            await s.topics.set(path, _nested(5000))  # the client checks values first
        for depth in (MAX_JSON_DEPTH + 1, 5000):  # CBOR arrays: cbor2 alone would go on to 400 levels
            with pytest.raises(errors.InvalidValueError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
                await s._call("set", path, b"\x81" * depth + b"\x01", False, "JSON", False)
        assert not s.closed
        assert [r.value for r in await s.topics.fetch(f">{path}")] == [{"ok": [1]}]
        await s.topics.set(path, _nested(MAX_JSON_DEPTH))
        assert [r.value for r in await s.topics.fetch(f">{path}")] == [_nested(MAX_JSON_DEPTH)]


async def test_deep_json_text_in_a_property_is_a_typed_error(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        deep = {"SCHEMA": "[" * 100_000}
        limit = f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects at position {MAX_JSON_DEPTH}"
        with pytest.raises(errors.InvalidSpecificationError, match=limit):
            await s.topics.add(f"{prefix}/schema", "JSON", deep)
        with pytest.raises(errors.InvalidSpecificationError, match=limit):
            await s._call("add", f"{prefix}/schema", "JSON", deep)
        with pytest.raises(errors.InvalidSpecificationError, match="SCHEMA.*not supported"):
            await s.topics.add(f"{prefix}/schema", "JSON", {"SCHEMA": "[[]]"})  # parsed, then refused


async def test_a_deep_session_filter_is_a_typed_error(broker: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        with pytest.raises(errors.InvalidFilterError, match=f"may nest at most {MAX_FILTER_DEPTH} deep"):
            await s.sessions.get_properties(filter="not " * 5000 + "all")
        with pytest.raises(errors.InvalidFilterError, match=f"may nest at most {MAX_FILTER_DEPTH} deep"):
            await s.sessions.get_properties(filter="not (" * 2000 + "all" + ")" * 2000)
        found = await s.sessions.get_properties(filter="not " * MAX_FILTER_DEPTH + "$SessionId ne ''")
        assert found  # this session at least


async def test_deep_view_specifications_are_typed_errors(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        with pytest.raises(errors.InvalidViewError, match=f"at most {MAX_SELECTOR_DEPTH} deep"):
            await s.views.create(f"{prefix}:deep-selector", f"map '{PROBE}' to {prefix}/out")
        with pytest.raises(errors.InvalidViewError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
            await s.views.create(f"{prefix}:deep-patch", f"map {prefix}/src to {prefix}/out patch '{'[' * 100_000}'")
        assert [v.name for v in await s.views.list() if v.name.startswith(prefix)] == []
        assert await s.topics.fetch(f">{prefix}/out") == []


async def test_deep_request_args_are_a_protocol_error_for_that_request(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add_and_set(f"{prefix}/s", "good")
        deep: list[Any] = []
        for _ in range(wire.MAX_ARGS_DEPTH + 1):
            deep = [deep]
        with pytest.raises(errors.ProtocolViolationError, match=f"deeper than {wire.MAX_ARGS_DEPTH} levels"):
            await s._call("fetch", f">{prefix}/s", True, False, deep, None)
        assert [r.value for r in await s.topics.fetch(f">{prefix}/s")] == ["good"]


async def test_a_frame_past_msgpacks_stack_is_a_protocol_error(broker: str) -> None:
    raw = await Raw.open(broker)
    await raw.ws.send(b"\x91" * 100_000 + b"\xc0")
    error = await raw.reply()
    assert isinstance(error, wire.Error) and (error.cid, error.code) == (0, "PROTOCOL_ERROR")
    assert f"deeper than {wire.MSGPACK_MAX_DEPTH} levels" in error.message
    await raw.send_messages([wire.REQUEST, 9, "fetch", [">nothing/here", True, False, None, None]])
    assert await raw.reply() == wire.Response(9, [])
    await raw.ws.close()
