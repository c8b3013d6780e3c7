"""MQTT clients nobody here wrote, against a real `canopy serve`: Debian's mosquitto_pub and
mosquitto_sub (3.1.1 and 5.0), and MQTT.js under node (3.1.1 and 5.0, QoS 1 and 2), each
beside canopy's own client, for every topic type.

What is checked: a retained publish sets the value a native client reads (a missing path
becomes a BINARY topic), a publish without retain reaches native subscribers and is not kept,
native values reach the MQTT subscribers as text (a late subscriber gets them as retained
messages), a principal without MODIFY/UPDATE on the path and an anonymous session change
nothing (MQTT 5: PUBACK 0x87), MQTT 5 user properties become session properties and the
session ends with its client, a killed client's will is published, and empty topic levels
are ``%`` segments both ways; a delivered publish has the lower of its publish QoS and the
subscription's (MQTT-3.8.4-6 / -8), and a topic that appears under an established
subscription comes with RETAIN 0 (MQTT-3.3.1-9 / -12).

The clients come from Debian (mosquitto-clients, nodejs; `.ci/run` installs them, and so do
these tests when they run as root) and from the npm registry (MQTT.js, pinned in
``tests/e2e/mqttjs/package.json``, installed once into a cache keyed by that file). Without
them the tests skip, loudly.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import canopy
from tests.conftest import Hopeless, wait_for
from tests.e2e.conftest import ADMIN, Server
from tests.e2e.installs import apt_install, npm_modules

MQTTJS = Path(__file__).parent / "mqttjs"
TIMEOUT = 20.0

#: topic type -> two (native value, its MQTT payload) pairs: what `to_text` writes and `from_text` reads
VALUES: dict[str, list[tuple[Any, bytes]]] = {
    "STRING": [("héllo wörld ✓", "héllo wörld ✓".encode()), ("second", b"second")],
    "INT64": [(-9007199254740993, b"-9007199254740993"), (42, b"42")],  # beyond a JS number's exact range
    "DOUBLE": [(-2.5e-07, b"-2.5e-07"), (0.1, b"0.1")],
    "JSON": [
        ({"a": [1, 2.5, None, True], "ü": "✓"}, '{"a":[1,2.5,null,true],"ü":"✓"}'.encode()),
        ([], b"[]"),
    ],
    # no newline: mosquitto_sub -v writes one message a line
    "BINARY": [(b"\x00\x01\xfe\xff canopy", b"\x00\x01\xfe\xff canopy"), (b"\x80", b"\x80")],
}
TYPES = list(VALUES)


class Deviation(AssertionError):
    """The server answered, and not as the MQTT specification says."""


def deviation_unless(got: object, expected: object) -> None:
    if got != expected:
        raise Deviation(f"got {got!r}, the specification wants {expected!r}")


def leaf(topic_type: str) -> str:
    return topic_type.lower()


# -- the server, the native client ---------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One `canopy serve` for the module; it must stop with status 0 and no traceback in its output."""
    srv = Server(tmp_path_factory.mktemp("mqtt-clients"), "--partitions", "2")
    try:
        yield srv.wait_ready()
    finally:
        code = srv.stop()
    assert code == 0, f"canopy serve exited with {code}:\n{srv.output}"
    assert "Traceback" not in srv.output, srv.output


@pytest.fixture
def native(server: Server) -> Iterator[Any]:
    with canopy.connect_sync(server.url, *ADMIN) as session:
        yield session


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A topic branch of this test's own."""
    name = request.node.name.replace("[", "-").replace("]", "")
    return f"mqttc/{name}-{uuid.uuid4().hex[:6]}"


def add_typed(native: Any, prefix: str, *types: str, first: bool = False) -> None:
    """Add a topic of each type at ``prefix/<type>``, with its first value when ``first`` (else
    none); CONFLATION off, so that no update may be merged into the next."""
    for t in types:
        native.topics.add(f"{prefix}/{leaf(t)}", t, {"CONFLATION": "off"})
        if first:
            native.topics.set(f"{prefix}/{leaf(t)}", VALUES[t][0][0])


def values_of(native: Any, prefix: str) -> dict[str, tuple[str, Any]]:
    return {r.path: (r.type.value, r.value) for r in native.topics.fetch(f"?{prefix}//")}


def session_of(native: Any, client_id: str) -> dict[str, str]:
    """The properties of the MQTT session of ``client_id``, once it shows up."""
    found = wait_for(
        lambda: native.sessions.get_properties(filter=f"$Transport is 'MQTT' and $ClientId is '{client_id}'"),
        TIMEOUT, f"the MQTT session of {client_id}",
    )
    (properties,) = found.values()
    return dict(properties)


def gone(native: Any, client_id: str) -> None:
    """Wait until the MQTT session of ``client_id`` has ended (with its connection)."""
    wait_for(
        lambda: not native.sessions.get_properties(filter=f"$Transport is 'MQTT' and $ClientId is '{client_id}'"),
        TIMEOUT, f"the MQTT session of {client_id} to end",
    )


def native_values(subscription: Any, want: Callable[[dict[str, list[Any]]], bool], seen: dict[str, list[Any]]
                  ) -> dict[str, list[Any]]:
    """Read a native subscription's events into ``seen`` (path -> values) until ``want(seen)``."""
    deadline = time.monotonic() + TIMEOUT
    while not want(seen):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {TIMEOUT}s; the native subscription saw {dict(seen)!r}")
        try:
            event = subscription.next(timeout=left)
        except TimeoutError:
            continue
        if event.kind in ("subscribed", "value") and event.value is not None:
            seen[event.path].append(event.value)
    return seen


# -- installing what the tests need ----------------------------------------------------------------


@pytest.fixture(scope="module")
def mosquitto() -> dict[str, str]:
    """Paths of mosquitto_pub and mosquitto_sub (Debian's mosquitto-clients)."""
    if not (shutil.which("mosquitto_pub") and shutil.which("mosquitto_sub")):
        apt_install("mosquitto-clients")
    found = {name: shutil.which(name) for name in ("mosquitto_pub", "mosquitto_sub")}
    if not all(found.values()):
        pytest.skip("MOSQUITTO_PUB/MOSQUITTO_SUB ARE NOT INSTALLED (apt-get install mosquitto-clients; .ci/run "
                    "installs it): the MQTT front door goes untested against Mosquitto's clients")
    return {k: v for k, v in found.items() if v is not None}


@pytest.fixture(scope="module")
def mqttjs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of tests/e2e/mqttjs/client.mjs beside the MQTT.js it imports (its node_modules:
    installed from the npm registry once, into ~/.cache/canopy-tests, keyed by package.json)."""
    wanted = json.loads((MQTTJS / "package.json").read_text())["dependencies"]["mqtt"]

    def installed(where: Path) -> bool:
        try:
            return bool(json.loads((where / "node_modules/mqtt/package.json").read_text())["version"] == wanted)
        except (OSError, ValueError, KeyError):
            return False

    modules = npm_modules(MQTTJS / "package.json", installed, "the MQTT front door goes untested against MQTT.js",
                          tmp_path_factory)
    run = tmp_path_factory.mktemp("mqttjs")
    for script in MQTTJS.glob("*.mjs"):
        shutil.copy(script, run / script.name)
    shutil.copy(MQTTJS / "package.json", run / "package.json")
    (run / "node_modules").symlink_to(modules)
    return run / "client.mjs"


# -- subprocesses ----------------------------------------------------------------------------------


class Process:
    """A client process; its stdout lines (bytes, without the newline) and stderr are collected."""

    def __init__(self, args: list[str], *, stdin: bool = False) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[bytes] = []
        self.errors: list[bytes] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.errors), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, into: list[bytes]) -> None:
        for line in stream:
            into.append(line.rstrip(b"\n"))

    @property
    def finished(self) -> bool:
        """Exited, and all it wrote is read."""
        return self.proc.poll() is not None and not self._readers[0].is_alive()

    def describe(self) -> str:
        return (f"{Path(self.args[0]).name} (exit {self.proc.poll()}) wrote {self.lines!r}, "
                f"stderr {b' | '.join(self.errors)!r}")

    def wait_lines(self, n: int, what: str, timeout: float = TIMEOUT) -> list[bytes]:
        def enough() -> bool:
            if len(self.lines) >= n:
                return True
            if self.finished:
                raise Hopeless(f"{what}: {self.describe()}")
            return False

        wait_for(enough, timeout, what, describe=self.describe)
        return self.lines[:n]

    def wait_exit(self, what: str, timeout: float = TIMEOUT) -> int:
        wait_for(lambda: self.finished, timeout, what, describe=self.describe)
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for reader in self._readers:
            reader.join(5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def mosquitto_args(server: Server, version: str, user: tuple[str, str] | None = ADMIN) -> list[str]:
    args = ["-h", "127.0.0.1", "-p", str(server.mqtt_port), "-V", version]
    if user is not None:
        args += ["-u", user[0], "-P", user[1]]
    return args


def mosquitto_pub(
    mosquitto: dict[str, str], server: Server, version: str, topic: str, payload: bytes, *, qos: int,
    retain: bool, tmp_path: Path, user: tuple[str, str] | None = ADMIN,
) -> subprocess.CompletedProcess[str]:
    """One mosquitto_pub; text payloads on the command line (-m), others from a file (-f)."""
    args = [mosquitto["mosquitto_pub"], *mosquitto_args(server, version, user), "-t", topic, "-q", str(qos)]
    try:
        args += ["-m", payload.decode()]
    except UnicodeDecodeError:
        file = tmp_path / f"payload-{uuid.uuid4().hex[:6]}"
        file.write_bytes(payload)
        args += ["-f", str(file)]
    if retain:
        args.append("-r")
    done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    return done


class MQTTjs:
    """One MQTT.js client (tests/e2e/mqttjs/client.mjs): commands in, JSON events out."""

    def __init__(self, script: Path, server: Server, version: int, *, user: tuple[str, str] | None = ADMIN,
                 client_id: str | None = None, **options: Any) -> None:
        self.client_id = client_id or f"js-{uuid.uuid4().hex[:8]}"
        settings = {"protocolVersion": version, "clientId": self.client_id, "clean": True, **options}
        if user is not None:
            settings["username"], settings["password"] = user
        self.process = Process(
            [shutil.which("node") or "node", str(script), f"mqtt://127.0.0.1:{server.mqtt_port}", json.dumps(settings)],
            stdin=True,
        )
        self._id = 0
        self._sent = 0
        try:
            self.connack = self.event(lambda e: e["event"] == "connect", "MQTT.js to connect")
        except BaseException:
            self.process.stop()
            raise

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.process.lines)]

    def event(self, match: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        def found() -> dict[str, Any]:
            events = self.events()
            for e in events:
                if match(e):
                    return e
            ended = [e for e in events if e["event"] in ("close", "error", "disconnect")]
            if ended or self.process.finished:
                raise Hopeless(f"{what}: MQTT.js said {events!r}; stderr {self.process.errors!r}")
            return {}

        return wait_for(found, TIMEOUT, what, describe=self.process.describe)

    def _command(self, op: str, **args: Any) -> dict[str, Any]:
        self._id += 1
        command_id = self._id
        assert self.process.proc.stdin is not None
        self.process.proc.stdin.write(json.dumps({"op": op, "id": command_id, **args}).encode() + b"\n")
        self.process.proc.stdin.flush()
        return self.event(lambda e: e.get("id") == command_id and e["event"] != "message", f"the answer to {op} {args}")

    def subscribe(self, topic_filter: str, qos: int) -> list[int]:
        answer = self._command("subscribe", filter=topic_filter, qos=qos)
        assert answer["error"] is None, answer
        return list(answer["granted"])

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> dict[str, Any]:
        """The answer to a QoS 1 or 2 publish: ``error`` and ``code`` are None when it was taken."""
        return self._command("publish", topic=topic, payload=base64.b64encode(payload).decode(), qos=qos,
                             retain=retain)

    def messages(self) -> list[tuple[str, bytes, int, bool]]:
        return [(e["topic"], base64.b64decode(e["payload"]), e["qos"], e["retain"])
                for e in self.events() if e["event"] == "message"]

    def wait_messages(self, n: int, what: str) -> list[tuple[str, bytes, int, bool]]:
        wait_for(lambda: len(self.messages()) >= n, TIMEOUT, what, describe=self.process.describe)
        return self.messages()

    def close(self) -> None:
        try:
            if self.process.proc.poll() is None and self.process.proc.stdin is not None:
                try:
                    self.process.proc.stdin.write(b'{"op": "end"}\n')
                    self.process.proc.stdin.flush()
                except OSError:
                    pass
                try:
                    self.process.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            self.process.stop()

    def __enter__(self) -> MQTTjs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def by_topic(messages: list[tuple[str, bytes, int, bool]]) -> dict[str, list[tuple[bytes, int, bool]]]:
    grouped: dict[str, list[tuple[bytes, int, bool]]] = defaultdict(list)
    for topic, payload, qos, retain in messages:
        grouped[topic].append((payload, qos, retain))
    return dict(grouped)


MOSQUITTO_VERSIONS = ["mqttv311", "mqttv5"]
MQTTJS_VERSIONS = [pytest.param(4, id="3.1.1"), pytest.param(5, id="5.0")]


# -- mosquitto_pub and mosquitto_sub ---------------------------------------------------------------


@pytest.mark.parametrize("version", MOSQUITTO_VERSIONS)
def test_mosquitto_pub_retained_sets_the_value_a_native_client_reads(
    server: Server, mosquitto: dict[str, str], native: Any, prefix: str, tmp_path: Path, version: str
) -> None:
    add_typed(native, prefix, "STRING", "INT64", "DOUBLE", "JSON")  # BINARY: a missing path, added by the publish
    for i, t in enumerate(TYPES):
        done = mosquitto_pub(mosquitto, server, version, f"{prefix}/{leaf(t)}", VALUES[t][0][1], qos=1 + i % 2,
                             retain=True, tmp_path=tmp_path)
        assert done.returncode == 0 and not done.stderr, done
    # QoS 1 and 2: mosquitto_pub exits once the PUBACK / PUBCOMP came, sent when the value was set
    assert values_of(native, prefix) == {f"{prefix}/{leaf(t)}": (t, VALUES[t][0][0]) for t in TYPES}


@pytest.mark.parametrize("version", MOSQUITTO_VERSIONS)
def test_mosquitto_pub_without_retain_is_delivered_and_not_kept(
    server: Server, mosquitto: dict[str, str], native: Any, prefix: str, tmp_path: Path, version: str
) -> None:
    add_typed(native, prefix, *TYPES, first=True)
    with native.topics.subscribe(f"?{prefix}//") as subscription:
        seen = native_values(subscription, lambda s: len(s) == len(TYPES), defaultdict(list))
        for t in TYPES:
            done = mosquitto_pub(mosquitto, server, version, f"{prefix}/{leaf(t)}", VALUES[t][1][1], qos=1,
                                 retain=False, tmp_path=tmp_path)
            assert done.returncode == 0 and not done.stderr, done
        native_values(subscription, lambda s: all(len(v) == 2 for v in s.values()), seen)
    assert dict(seen) == {f"{prefix}/{leaf(t)}": [VALUES[t][0][0], VALUES[t][1][0]] for t in TYPES}
    assert values_of(native, prefix) == {f"{prefix}/{leaf(t)}": (t, VALUES[t][0][0]) for t in TYPES}


@pytest.mark.parametrize("version", MOSQUITTO_VERSIONS)
def test_mosquitto_sub_receives_native_values_as_text(
    server: Server, mosquitto: dict[str, str], native: Any, prefix: str, version: str
) -> None:
    add_typed(native, prefix, *TYPES)
    native.topics.add_and_set(f"{prefix}/ready", "ready", "STRING")
    client_id = f"sub-{uuid.uuid4().hex[:8]}"
    count = 1 + 2 * len(TYPES)
    sub = Process([mosquitto["mosquitto_sub"], *mosquitto_args(server, version), "-i", client_id,
                   "-t", f"{prefix}/#", "-q", "1", "-C", str(count), "-v", "-W", "60"])
    try:
        properties = session_of(native, client_id)
        assert properties["$Principal"] == "admin"
        # the one topic with a value comes first, as a retained message: the subscription is in place
        assert sub.wait_lines(1, "mosquitto_sub's retained message") == [f"{prefix}/ready ready".encode()]
        for i in range(2):
            for t in TYPES:
                native.topics.set(f"{prefix}/{leaf(t)}", VALUES[t][i][0])
        assert sub.wait_exit(f"mosquitto_sub to receive {count} messages") == 0, sub.describe()
        received: dict[str, list[bytes]] = defaultdict(list)
        for line in sub.lines:
            topic, _, payload = line.partition(b" ")
            received[topic.decode()].append(payload)
        assert dict(received) == {
            f"{prefix}/ready": [b"ready"],
            **{f"{prefix}/{leaf(t)}": [VALUES[t][0][1], VALUES[t][1][1]] for t in TYPES},
        }
    finally:
        sub.stop()


@pytest.mark.parametrize("version", MOSQUITTO_VERSIONS)
def test_a_denied_mosquitto_pub_leaves_the_value_unchanged(
    server: Server, mosquitto: dict[str, str], native: Any, prefix: str, tmp_path: Path, version: str
) -> None:
    """A principal that may read but not update or modify the branch, and an anonymous session
    (by default READ_TOPIC and SELECT_TOPIC only): their publishes change nothing and add nothing.
    MQTT 5 says so in the PUBACK (0x87), which mosquitto_pub reports; MQTT 3.1.1 cannot."""
    name = f"reader-{uuid.uuid4().hex[:8]}"
    reader = (name, f"{name}-password")
    native.security.update(
        ["add_principal", name, reader[1], [name]],
        ["set_path_permissions", name, prefix, ["SELECT_TOPIC", "READ_TOPIC"]],
    )
    native.topics.add_and_set(f"{prefix}/x", "before", "STRING")
    for user in (reader, None):
        for topic in (f"{prefix}/x", f"{prefix}/new"):
            done = mosquitto_pub(mosquitto, server, version, topic, b"after", qos=1, retain=True,
                                 tmp_path=tmp_path, user=user)
            assert done.returncode == 0, done
            if version == "mqttv5":
                assert "not authorized" in done.stderr.lower(), done
    assert values_of(native, prefix) == {f"{prefix}/x": ("STRING", "before")}


def test_a_mosquitto_user_property_becomes_a_session_property_until_the_client_goes(
    server: Server, mosquitto: dict[str, str], native: Any, prefix: str
) -> None:
    client_id = f"props-{uuid.uuid4().hex[:8]}"
    sub = Process([mosquitto["mosquitto_sub"], *mosquitto_args(server, "mqttv5"), "-i", client_id,
                   "-t", f"{prefix}/#", "-D", "connect", "user-property", "tier", "gold", "-W", "60"])
    try:
        properties = session_of(native, client_id)
        assert (properties["tier"], properties["$Transport"], properties["$Principal"]) == ("gold", "MQTT", "admin")
    finally:
        sub.stop()
    gone(native, client_id)


@pytest.mark.parametrize("version", MOSQUITTO_VERSIONS)
def test_a_killed_mosquitto_client_s_will_is_published(
    server: Server, mosquitto: dict[str, str], native: Any, prefix: str, version: str
) -> None:
    """Killed (SIGKILL): its connection ends without a DISCONNECT, so its will is published."""
    native.topics.add_and_set(f"{prefix}/status", "online", "STRING")
    client_id = f"will-{uuid.uuid4().hex[:8]}"
    sub = Process([mosquitto["mosquitto_sub"], *mosquitto_args(server, version), "-i", client_id,
                   "-t", f"{prefix}/unused", "--will-topic", f"{prefix}/status", "--will-payload", "offline",
                   "--will-retain", "--will-qos", "1", "-W", "60"])
    try:
        session_of(native, client_id)
        sub.proc.kill()
        sub.proc.wait(10)
        wait_for(lambda: values_of(native, prefix) == {f"{prefix}/status": ("STRING", "offline")}, TIMEOUT,
                 "the will to set the value", describe=lambda: values_of(native, prefix))
    finally:
        sub.stop()
    gone(native, client_id)


def test_empty_topic_levels_are_percent_segments(
    server: Server, mosquitto: dict[str, str], native: Any, prefix: str, tmp_path: Path
) -> None:
    """MQTT topic names with empty levels are canopy paths with `%` segments, both ways."""
    done = mosquitto_pub(mosquitto, server, "mqttv5", f"{prefix}//x/", b"from mqtt", qos=1, retain=True,
                         tmp_path=tmp_path)
    assert done.returncode == 0 and not done.stderr, done
    native.topics.add_and_set(f"{prefix}/%/y", "from canopy", "STRING")
    assert values_of(native, prefix) == {
        f"{prefix}/%/x/%": ("BINARY", b"from mqtt"), f"{prefix}/%/y": ("STRING", "from canopy")
    }
    sub = Process([mosquitto["mosquitto_sub"], *mosquitto_args(server, "mqttv311"), "-t", f"{prefix}//#",
                   "-q", "1", "-C", "2", "-v", "-W", "60"])
    try:
        assert sub.wait_exit("mosquitto_sub to receive the two retained values") == 0, sub.describe()
        assert sorted(sub.lines) == [f"{prefix}//x/ from mqtt".encode(), f"{prefix}//y from canopy".encode()]
    finally:
        sub.stop()


# -- MQTT.js ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", MQTTJS_VERSIONS)
def test_mqttjs_receives_native_updates_and_a_late_subscriber_the_retained_values(
    server: Server, mqttjs: Path, native: Any, prefix: str, version: int
) -> None:
    qos = 2 if version == 5 else 1
    add_typed(native, prefix, *TYPES)
    with MQTTjs(mqttjs, server, version) as js:
        assert js.subscribe(f"{prefix}/#", qos) == [qos]
        for i in range(2):
            for t in TYPES:
                native.topics.set(f"{prefix}/{leaf(t)}", VALUES[t][i][0])
        assert by_topic(js.wait_messages(2 * len(TYPES), "MQTT.js to receive the native updates")) == {
            f"{prefix}/{leaf(t)}": [(VALUES[t][0][1], qos, False), (VALUES[t][1][1], qos, False)] for t in TYPES
        }
    with MQTTjs(mqttjs, server, version) as late:
        assert late.subscribe(f"{prefix}/+", 1) == [1]
        assert by_topic(late.wait_messages(len(TYPES), "MQTT.js to receive the retained values")) == {
            f"{prefix}/{leaf(t)}": [(VALUES[t][1][1], 1, True)] for t in TYPES
        }


def test_mqttjs_resolves_the_topic_aliases_canopy_sends(server: Server, mqttjs: Path, native: Any, prefix: str) -> None:
    """MQTT.js takes 3 topic aliases (Topic Alias Maximum in its CONNECT): canopy sends three
    topics' later messages by alias alone, which MQTT.js resolves to their names, and it would
    refuse an alias over its maximum (MQTT-3.3.2-11). At QoS 1: MQTT.js 5.16 leaves the topic
    of a QoS 2 message that came by alias empty."""
    add_typed(native, prefix, *TYPES)
    with MQTTjs(mqttjs, server, 5, properties={"topicAliasMaximum": 3}) as js:
        assert js.subscribe(f"{prefix}/#", 1) == [1]
        for i in range(2):
            for t in TYPES:
                native.topics.set(f"{prefix}/{leaf(t)}", VALUES[t][i][0])
        assert by_topic(js.wait_messages(2 * len(TYPES), "MQTT.js to receive the native updates")) == {
            f"{prefix}/{leaf(t)}": [(VALUES[t][0][1], 1, False), (VALUES[t][1][1], 1, False)] for t in TYPES
        }
        by_alias = [e["alias"] for e in js.events() if e["event"] == "message"]
        assert sorted(a for a in by_alias if a is not None) == [1, 1, 2, 2, 3, 3], by_alias


@pytest.mark.parametrize("version", MQTTJS_VERSIONS)
def test_a_native_client_receives_mqttjs_publishes_at_qos_1_and_2(
    server: Server, mqttjs: Path, native: Any, prefix: str, version: int
) -> None:
    """Retained publishes set the values (a missing path becomes BINARY); the second round,
    not retained, reaches the native subscriber and leaves the values as they were. MQTT 5:
    MQTT.js sends the second round with topic aliases (autoAssignTopicAlias)."""
    add_typed(native, prefix, "STRING", "INT64", "DOUBLE", "JSON")
    options: dict[str, Any] = {"autoAssignTopicAlias": True} if version == 5 else {}
    with native.topics.subscribe(f"?{prefix}//") as subscription, MQTTjs(mqttjs, server, version, **options) as js:
        seen: dict[str, list[Any]] = defaultdict(list)
        for i, t in enumerate(TYPES):
            answer = js.publish(f"{prefix}/{leaf(t)}", VALUES[t][0][1], qos=1 + i % 2, retain=True)
            assert (answer["error"], answer["code"]) == (None, None), answer
        native_values(subscription, lambda s: len(s) == len(TYPES), seen)
        assert values_of(native, prefix) == {f"{prefix}/{leaf(t)}": (t, VALUES[t][0][0]) for t in TYPES}
        for i, t in enumerate(TYPES):
            answer = js.publish(f"{prefix}/{leaf(t)}", VALUES[t][1][1], qos=2 - i % 2, retain=False)
            assert (answer["error"], answer["code"]) == (None, None), answer
        native_values(subscription, lambda s: all(len(v) == 2 for v in s.values()), seen)
    assert dict(seen) == {f"{prefix}/{leaf(t)}": [VALUES[t][0][0], VALUES[t][1][0]] for t in TYPES}
    assert values_of(native, prefix) == {f"{prefix}/{leaf(t)}": (t, VALUES[t][0][0]) for t in TYPES}


@pytest.mark.parametrize("version", MQTTJS_VERSIONS)
def test_two_mqttjs_clients_see_each_other_through_canopy(
    server: Server, mqttjs: Path, native: Any, prefix: str, version: int
) -> None:
    """Retained or not, a publish reaches the other client's established subscription as a live
    message (RETAIN 0: MQTT-3.3.1-9 in 3.1.1, MQTT-3.3.1-12 in 5.0)."""
    add_typed(native, prefix, *TYPES)
    with MQTTjs(mqttjs, server, version) as publisher, MQTTjs(mqttjs, server, version) as subscriber:
        assert subscriber.subscribe(f"{prefix}/#", 2) == [2]
        for i, t in enumerate(TYPES):
            answer = publisher.publish(f"{prefix}/{leaf(t)}", VALUES[t][0][1], qos=1 + i % 2, retain=i % 2 == 0)
            assert (answer["error"], answer["code"]) == (None, None), answer
        got = by_topic(subscriber.wait_messages(len(TYPES), "the subscriber to receive the publishes"))
        # the QoS: see test_a_publish_reaches_a_subscriber_at_the_lower_of_the_two_qos
        assert {topic: [(payload, retain) for payload, _, retain in m] for topic, m in got.items()} == {
            f"{prefix}/{leaf(t)}": [(VALUES[t][0][1], False)] for t in TYPES
        }
    assert values_of(native, prefix) == {
        f"{prefix}/{leaf(t)}": (t, VALUES[t][0][0] if i % 2 == 0 else None) for i, t in enumerate(TYPES)
    }


@pytest.mark.parametrize("version", MQTTJS_VERSIONS)
def test_a_publish_reaches_a_subscriber_at_the_lower_of_the_two_qos(
    server: Server, mqttjs: Path, native: Any, prefix: str, version: int
) -> None:
    add_typed(native, prefix, "STRING")
    with MQTTjs(mqttjs, server, version) as publisher, MQTTjs(mqttjs, server, version) as subscriber:
        assert subscriber.subscribe(f"{prefix}/#", 2) == [2]
        assert publisher.publish(f"{prefix}/string", b"one", qos=1, retain=False)["error"] is None
        got = subscriber.wait_messages(1, "the publish")
        deviation_unless(got, [(f"{prefix}/string", b"one", 1, False)])


@pytest.mark.parametrize("by", ["native", "mqtt"])
@pytest.mark.parametrize("version", MQTTJS_VERSIONS)
def test_a_topic_added_under_an_established_subscription_comes_without_retain(
    server: Server, mqttjs: Path, native: Any, prefix: str, version: int, by: str
) -> None:
    with MQTTjs(mqttjs, server, version) as publisher, MQTTjs(mqttjs, server, version) as subscriber:
        assert subscriber.subscribe(f"{prefix}/#", 1) == [1]
        if by == "native":
            native.topics.add_and_set(f"{prefix}/new", "first", "STRING")
        else:
            assert publisher.publish(f"{prefix}/new", b"first", qos=1, retain=True)["error"] is None
        got = subscriber.wait_messages(1, "the new topic's value")
        deviation_unless(got, [(f"{prefix}/new", b"first", 1, False)])


@pytest.mark.parametrize("version", MQTTJS_VERSIONS)
def test_a_denied_mqttjs_publish_changes_nothing(
    server: Server, mqttjs: Path, native: Any, prefix: str, version: int
) -> None:
    """MQTT 5: PUBACK / PUBREC 0x87 (not authorized), which MQTT.js hands its callback as the
    error; MQTT 3.1.1 acknowledges (it has no refusal), and the value stays."""
    name = f"reader-{uuid.uuid4().hex[:8]}"
    native.security.update(
        ["add_principal", name, f"{name}-password", [name]],
        ["set_path_permissions", name, prefix, ["SELECT_TOPIC", "READ_TOPIC"]],
    )
    native.topics.add_and_set(f"{prefix}/x", 7, "INT64")
    with MQTTjs(mqttjs, server, version, user=(name, f"{name}-password")) as js:
        for qos in (1, 2):
            for topic in (f"{prefix}/x", f"{prefix}/new"):
                answer = js.publish(topic, b"8", qos=qos, retain=True)
                assert answer["code"] == (0x87 if version == 5 else None), answer
        assert js.subscribe(f"{prefix}/x", 1) == [1]  # reading is allowed
        assert js.wait_messages(1, "the retained value") == [(f"{prefix}/x", b"7", 1, True)]
    assert values_of(native, prefix) == {f"{prefix}/x": ("INT64", 7)}


def test_mqttjs_user_properties_become_session_properties_until_the_client_goes(
    server: Server, mqttjs: Path, native: Any, prefix: str
) -> None:
    with MQTTjs(mqttjs, server, 5, properties={"userProperties": {"tier": "gold", "app": "mqtt.js"}}) as js:
        assert js.connack["reasonCode"] == 0
        properties = session_of(native, js.client_id)
        assert (properties["tier"], properties["app"]) == ("gold", "mqtt.js")
        assert (properties["$Transport"], properties["$Principal"]) == ("MQTT", "admin")
    gone(native, js.client_id)
