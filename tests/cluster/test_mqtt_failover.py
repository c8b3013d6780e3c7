"""An MQTT subscriber through a failover: a 3-node cluster (`canopy serve --local-nodes 3`),
an MQTT 5 subscriber at QoS 1 on the gateway of a node that survives, native publishers
on that gateway writing numbered updates, and a node holding partition primaries crashed
(SIGKILL of its raylet and every process under it) while they write.

Every acknowledged update must reach the MQTT subscriber, each topic's values in order;
a value may come twice (QoS 1 is at least once), none may be missing. Checked with
:mod:`tests.checking` (acknowledged against observed), not by eye.

A second MQTT subscriber, with a session expiry, is on the crashed node's own gateway: its
client connects again at a surviving gateway with clean start 0 and must get every
acknowledged update too, those published while no gateway held its session among them
(taken from the partitions' recent messages, from where its record says it stood). A third
client there, with a will, never comes back: a surviving gateway adopts its session from its
record and publishes the will.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import queue
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from topics.partitioning import partition_of
from tests.actors.mqtt_client import MQTT
from tests.checking import History, Workload, check, finish
from tests.cluster.test_failover import FAILOVER, _cluster, crash_node, gateway_url, healthy_without, status
from tests.conftest import wait_for
from tests.e2e.conftest import ADMIN, Server

BRANCH = "mqtt"
PARTITIONS = 4  # as _cluster starts it


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Server]:
    """A 3-node cluster of this test's own (it crashes a node), stopped afterwards."""
    yield from _cluster(tmp_path)


def mqtt_address(srv: Server, url: str) -> tuple[str, int]:
    """The MQTT listener of the gateway at ``url`` (gateway k: port + k, its MQTT on mqtt_port + k)."""
    host, port = url.removeprefix("ws://").rsplit(":", 1)
    address = (host, srv.mqtt_port + int(port) - srv.port)
    listed = json.loads((srv.data_dir / "server.json").read_text())["mqtt_urls"]
    assert f"mqtt://{host}:{address[1]}" in listed, (url, listed)
    return address


class Received:
    """What one MQTT subscriber was sent, per topic, in order (integers: the topics are INT64)."""

    def __init__(self, client: MQTT) -> None:
        self.client = client
        self.values: dict[str, list[int]] = defaultdict(list)
        self.retained = 0
        self.qos: set[int] = set()

    def drain(self) -> dict[str, list[int]]:
        while True:
            try:
                message = self.client.messages.get_nowait()
            except queue.Empty:
                return self.values
            self.retained += message.retain
            self.qos.add(message.qos)
            self.values[message.topic].append(int(message.payload))

    def behind(self, final: dict[str, int | None]) -> list[tuple[str, int | None, int | None]]:
        seen = self.drain()
        return [(t, seen[t][-1] if seen.get(t) else None, v) for t, v in final.items()
                if (seen[t][-1] if seen.get(t) else None) != v]


def missing(history: History, observed: dict[str, list[int]]) -> dict[str, list[int]]:
    """Per topic, the acknowledged values the subscriber never received."""
    gaps = {}
    for topic, values in history.acknowledged.items():
        got = set(observed.get(topic, ()))
        if lost := [v for v in values if v not in got]:
            gaps[topic] = lost
    return gaps


def first_seen(values: list[int]) -> list[int]:
    """Each value where it first came: a redelivered value (QoS 1 after a reconnection) left out."""
    seen: set[int] = set()
    return [v for v in values if not (v in seen or seen.add(v))]  # type: ignore[func-returns-value]


def duplicates(observed: dict[str, list[int]]) -> int:
    return sum(len(values) - len(set(values)) for values in observed.values())


def takeover_across_gateways(cluster: Server, here: str, there: str) -> None:
    """MQTT-3.1.4-3 across gateways: a client identifier connected at one gateway, connected
    again at another (clean start 0), takes its session over there (session present, from
    the record) and the first connection gets DISCONNECT 0x8E (session taken over)."""
    options: dict[str, Any] = dict(username=ADMIN[0], password=ADMIN[1], client_id="takeover-across-gateways",
                                   clean_start=False, session_expiry=60)
    first = MQTT(mqtt_address(cluster, here), 5, **options)
    try:
        first.subscribe("takeover/#", qos=1)
        with MQTT(mqtt_address(cluster, there), 5, **options) as second:
            assert second.session_present is True  # its subscription came with the record
            reason = first.disconnected.get(timeout=20)
            assert getattr(reason, "value", reason) == 0x8E, reason
            second.publish("takeover/x", "here", qos=1, retain=True)
            assert second.next().payload == b"here"  # subscribed there, as it was here
    finally:
        first.close()


def shared_across_gateways(cluster: Server, here: str, there: str) -> None:
    """A shared subscription with members at two gateways: each message to one member of the
    whole group (MQTT 5, 4.8.2), not one per gateway. The gateways learn of each other's
    members from their announcements: rounds of 20 messages (one per topic) are published
    until one arrives exactly once each, with both members getting some; then one more round
    must too."""
    options: dict[str, Any] = dict(username=ADMIN[0], password=ADMIN[1])
    members = [MQTT(mqtt_address(cluster, url), 5, **options) for url in (here, there)]
    publisher = MQTT(mqtt_address(cluster, here), 5, **options)
    try:
        for member in members:
            granted = member.subscribe("$share/workers/shared/#", qos=1)
            assert [c.value for c in granted] == [1], granted

        def one_round(n: int) -> tuple[bool, list[list[str]]]:
            sent = {f"{n}-{k}" for k in range(20)}
            for k in range(20):
                publisher.publish(f"shared/{k}", f"{n}-{k}", qos=1)
            got: list[list[str]] = [[], []]
            quiet_until = time.monotonic() + 3
            while time.monotonic() < quiet_until and sum(map(len, got)) < len(sent) * 2:
                for i, member in enumerate(members):
                    try:
                        payload = member.messages.get(timeout=0.05).payload.decode()
                    except queue.Empty:
                        continue
                    if payload in sent:
                        got[i].append(payload)
                        if sum(map(len, got)) >= len(sent):
                            quiet_until = min(quiet_until, time.monotonic() + 0.5)  # a duplicate would come soon
            every = sorted(got[0] + got[1])
            return every == sorted(sent) and all(got), got

        rounds, last = itertools.count(1), {}

        def settled() -> bool:
            exact, last["got"] = one_round(next(rounds))
            return exact

        wait_for(settled, 30, "each message to exactly one member of the group",
                 describe=lambda: f"received per member: {last.get('got')}")
        exact, got = one_round(next(rounds))
        assert exact, f"a round after the group settled: {[len(g) for g in got]} received per member ({got})"
    finally:
        publisher.close()
        for member in members:
            member.close()


async def test_an_mqtt_subscriber_on_a_surviving_gateway_misses_no_acknowledged_update(cluster: Server) -> None:
    """The subscriber (MQTT 5, QoS 1, ``mqtt/#``) and two native publishers (12 topics,
    CONFLATION off, spread over all 4 partitions; the client's reconnect) are on node-0's
    gateway; a node holding partition primaries (not node-0) is crashed mid-stream, and
    the publishers go on until every topic has been acknowledged again after the failover."""
    loop = asyncio.get_running_loop()
    now = await loop.run_in_executor(None, lambda: wait_for(
        lambda: (s := status(cluster))["healthy"] and s, 60, "a healthy cluster"))
    primaries = [p["primary"] for p in now["partitions"]]
    victim = max(("node-1", "node-2"), key=primaries.count)  # node-0 runs the controller: it is not killed
    assert victim in primaries, now["partitions"]
    home = [gateway_url(now, "node-0")]
    work = Workload(home, ADMIN, publishers=2, topics=6, subscribers=1, branch=BRANCH)
    spread = {partition_of(path, PARTITIONS) for group in work.paths for path in group}
    assert spread == set(range(PARTITIONS)), spread

    await loop.run_in_executor(None, takeover_across_gateways, cluster, home[0], gateway_url(now, "node-2"))
    await loop.run_in_executor(None, shared_across_gateways, cluster, home[0], gateway_url(now, "node-2"))

    subscriber = MQTT(mqtt_address(cluster, home[0]), 5, username=ADMIN[0], password=ADMIN[1])
    received = Received(subscriber)
    roaming_options: dict[str, Any] = dict(username=ADMIN[0], password=ADMIN[1], client_id="roaming",
                                           clean_start=False, session_expiry=300)
    roaming = MQTT(mqtt_address(cluster, gateway_url(now, victim)), 5, **roaming_options)
    roamed: list[Received] = [Received(roaming)]
    wills = MQTT(mqtt_address(cluster, home[0]), 5, username=ADMIN[0], password=ADMIN[1])
    assert [c.value for c in wills.subscribe("wills/#", qos=1)] == [1]
    orphan = MQTT(mqtt_address(cluster, gateway_url(now, victim)), 5, username=ADMIN[0], password=ADMIN[1],
                  client_id="orphan", clean_start=False, session_expiry=300, connect=False)
    orphan.client.will_set("wills/orphan", "gone", qos=1)
    assert not orphan.connect().is_failure
    try:
        granted = subscriber.subscribe(f"{BRANCH}/#", qos=1)
        assert [c.value for c in granted] == [1], granted
        assert [c.value for c in roaming.subscribe(f"{BRANCH}/#", qos=1)] == [1]
        await work.start()

        def acknowledged() -> dict[str, int]:
            return {path: len(work.history.acknowledged.get(path, ())) for group in work.paths for path in group}

        def every_topic_acknowledged_since(before: dict[str, int], more: int) -> Any:
            return all(n >= before[path] + more for path, n in acknowledged().items())

        start = {path: 0 for path in acknowledged()}
        await loop.run_in_executor(None, lambda: wait_for(
            lambda: every_topic_acknowledged_since(start, 20), 30, "updates acknowledged on every topic",
            describe=acknowledged))
        await loop.run_in_executor(None, crash_node, cluster, victim)
        after = await loop.run_in_executor(None, lambda: wait_for(
            lambda: healthy_without(victim)(cluster), FAILOVER, f"every partition off {victim}, with a backup"))
        failed_over = acknowledged()
        # the roaming client comes back at a surviving gateway, which takes its session up
        roaming.close()
        roaming = MQTT(mqtt_address(cluster, home[0]), 5, **roaming_options)
        assert roaming.session_present is True
        roamed.append(Received(roaming))
        await loop.run_in_executor(None, lambda: wait_for(
            lambda: every_topic_acknowledged_since(failed_over, 20), 30,
            "updates acknowledged on every topic after the failover", describe=acknowledged))
        # the orphan's session, its gateway gone, is adopted by a surviving gateway: its will comes
        will = await loop.run_in_executor(None, lambda: wills.next(60))
        assert (will.topic, will.payload) == ("wills/orphan", b"gone")
        await finish(work, urls=home)  # stop, read every final value, the native subscriber has them
        for who in (received, roamed[-1]):
            await loop.run_in_executor(None, lambda: wait_for(
                lambda: not who.behind(work.history.final), 30, "the MQTT subscribers to receive every final value",
                describe=lambda: who.behind(work.history.final)[:5]))
        disconnects = []
        while not subscriber.disconnected.empty():
            disconnects.append(subscriber.disconnected.get_nowait())
    finally:
        await work.close()
        subscriber.close()
        roaming.close()
        wills.close()
        orphan.drop()

    observed = dict(received.drain())
    travelled: dict[str, list[int]] = defaultdict(list)
    for part in roamed:
        for topic, values in part.drain().items():
            travelled[topic] += values
    native = dict(work.history.observed[0])
    work.history.observed[1] = defaultdict(list, observed)  # the checker's subscriber 1: the MQTT one
    report = check(work.history)
    gaps, native_gaps = missing(work.history, observed), missing(work.history, native)
    moved = [(p["partition"], p["primary"]) for p in after["partitions"]]
    summary = (f"{victim} crashed (primaries {primaries} -> {moved}): {report}; MQTT: "
               f"{sum(map(len, observed.values()))} received, {duplicates(observed)} duplicates, "
               f"{sum(map(len, gaps.values()))} acknowledged missing {dict(list(gaps.items())[:3])}; native "
               f"subscriber: {sum(map(len, native.values()))} received, {duplicates(native)} duplicates, "
               f"{sum(map(len, native_gaps.values()))} acknowledged missing {dict(list(native_gaps.items())[:3])}")
    print(f"[cluster] {summary}")
    for line in cluster.lines:  # the failover as serve told it: evidence when a check below fails
        if any(word in line for word in ("partition", "took over", "Traceback", "Error", "MQTT")):
            print(f"[serve] {line}")
    assert not disconnects, f"the MQTT subscriber was disconnected: {disconnects}; {summary}"
    assert report.valid, summary  # nothing acknowledged lost, nothing unexpected, nothing out of order
    assert not gaps, summary
    assert received.qos == {1} and received.retained == 0, (received.qos, received.retained)
    roaming_gaps = missing(work.history, travelled)
    roaming_summary = (f"roaming subscriber: {sum(map(len, travelled.values()))} received, {duplicates(travelled)} "
                       f"duplicates, {sum(map(len, roaming_gaps.values()))} acknowledged missing "
                       f"{dict(list(roaming_gaps.items())[:3])}")
    print(f"[cluster] {roaming_summary}")
    assert not roaming_gaps, roaming_summary  # nothing missed while no gateway held its session
    backwards = [(t, v) for t, values in travelled.items() for t, v in [(t, first_seen(values))] if v != sorted(v)]
    assert not backwards, f"values went backwards beyond redelivery: {backwards[:2]}"  # redelivered, then on in order
    adopted = sum(g.get("mqtt_sessions_adopted") or 0 for g in status(cluster)["gateways"])
    assert adopted >= 1, f"no gateway says it adopted a session: {status(cluster)['gateways']}"
    assert report.acknowledged > 200, summary
    assert not work.ended, work.ended
    assert any("took over" in line for line in cluster.lines), cluster.output
