"""The network model: paths and cuts, Ray-call messages, TCP-like streams."""

from __future__ import annotations

from typing import Any

import pytest

from tests.simulation.network import Conditions, End, Network
from tests.simulation.world import MS, SECOND, World

NODES = ("node-0", "node-1", "node-2")


class Recorder:
    """A stream handler that records what reaches it, with the time in ms."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.messages: list[Any] = []
        self.lost_at: int | None = None
        self.lost_count = 0
        self.connected: End | None = None
        self.failed: str | None = None
        self.failed_at: int | None = None

    def on_message(self, end: End, message: Any) -> None:
        assert self.lost_at is None, "a message after on_lost"
        self.messages.append(message)

    def on_lost(self, end: End) -> None:
        self.lost_count += 1
        self.lost_at = self.world.now_ms

    def on_connected(self, end: End) -> None:
        self.connected = end

    def on_failed(self, reason: str) -> None:
        self.failed, self.failed_at = reason, self.world.now_ms


def setup(conditions: Conditions = Conditions(), seed: int = 0) -> tuple[World, Network]:
    world = World(seed, tracing=True)
    return world, Network(world, NODES, conditions)


def stream(world: World, network: Network, a: str = "node-1", b: str = "node-2") -> tuple[End, Recorder, End, Recorder]:
    """A connected stream from ``a`` to ``b``: (client end, its recorder, server end, its recorder)."""
    server = Recorder(world)
    accepted: list[End] = []

    def accept(end: End) -> Recorder:
        accepted.append(end)
        return server

    network.listen(b, f"echo-{len(network._listeners)}", accept)
    address = next(addr for addr in network._listeners if addr[0] == b and network._listeners[addr] is accept)
    client = Recorder(world)
    network.connect(a, address, client, client.on_connected, client.on_failed)
    world.run_for(10 * MS)
    assert client.connected is not None and accepted
    return client.connected, client, accepted[0], server


# -- paths ----------------------------------------------------------------------------------------


def test_cuts_are_counted_and_may_be_one_way() -> None:
    world, network = setup()
    assert network.up("node-0", "node-1")
    network.cut("node-0", "node-1", both_ways=False)
    assert not network.up("node-0", "node-1") and network.up("node-1", "node-0")
    network.cut("node-0", "node-1")
    network.heal("node-0", "node-1")
    assert not network.up("node-0", "node-1"), "two cuts need two heals"
    network.heal("node-0", "node-1", both_ways=False)
    assert network.up("node-0", "node-1")
    network.isolate("node-2")
    assert not network.up("node-0", "node-2") and not network.up("node-2", "node-1") and network.up("node-2", "node-2")
    network.heal_all()
    assert network.up("node-0", "node-2")
    with pytest.raises(ValueError):
        network.heal("node-0", "node-1")


def test_latency_is_about_a_millisecond_with_spikes_and_slowdowns() -> None:
    world, network = setup(Conditions(spike_rate=0.1))
    draws = [network.latency("node-0", "node-1") for _ in range(2000)]
    plain = [d for d in draws if d < 2 * MS]
    spikes = [d for d in draws if d >= 50 * MS]
    assert len(plain) + len(spikes) == len(draws)
    assert min(plain) >= 700_000 and max(plain) <= 1_300_000
    assert 100 < len(spikes) < 300 and max(spikes) <= 2_001 * MS
    assert network.latency("node-1", "node-1") == 50_000
    network.slow("node-0", "node-1", 500 * MS)
    assert network.latency("node-1", "node-0") >= 500 * MS
    network.slow("node-0", "node-1", 0)
    assert network.latency("node-1", "node-0") < 500 * MS or network.latency("node-1", "node-0") < 500 * MS


# -- messages --------------------------------------------------------------------------------------


def test_messages_of_a_channel_arrive_in_order_and_channels_are_independent() -> None:
    world, network = setup(Conditions(spike_rate=0.2))
    got: list[tuple[str, int]] = []
    for i in range(200):
        network.message("node-0", "node-1", "a", lambda i=i: got.append(("a", i)))
        network.message("node-0", "node-1", "b", lambda i=i: got.append(("b", i)))
    world.run_for(60 * SECOND)
    assert [i for c, i in got if c == "a"] == list(range(200))
    assert [i for c, i in got if c == "b"] == list(range(200))
    assert [c for c, _ in got] != ["a", "b"] * 200, "a spike on one channel holds up only that channel"


def test_a_message_across_a_cut_waits_for_the_heal() -> None:
    world, network = setup()
    got: list[int] = []
    network.cut("node-0", "node-1", both_ways=False)
    network.message("node-0", "node-1", "c", lambda: got.append(world.now_ms))
    network.message("node-1", "node-0", "c", lambda: got.append(-world.now_ms))  # the other way is up
    world.run_for(5 * SECOND)
    assert len(got) == 1 and got[0] < 0
    network.heal("node-0", "node-1", both_ways=False)
    world.run_for(SECOND)
    assert len(got) == 2 and 5000 <= got[1] < 5010


def test_messages_are_lost_at_the_loss_rate() -> None:
    world, network = setup(Conditions(loss_rate=0.25))
    got: list[int] = []
    sent = [network.message("node-0", "node-1", "c", got.append, i) for i in range(1000)]
    world.run_for(SECOND)
    assert got == [i for i, ok in enumerate(sent) if ok]
    assert 180 < 1000 - len(got) < 320


# -- streams ---------------------------------------------------------------------------------------


def test_a_stream_delivers_in_order_each_way() -> None:
    world, network = setup(Conditions(spike_rate=0.1))
    client, c, server, s = stream(world, network)
    for i in range(100):
        client.send(i)
        server.send(-i)
    world.run_for(60 * SECOND)
    assert s.messages == list(range(100)) and c.messages == [-i for i in range(100)]


def test_the_dialler_is_connected_before_anything_the_server_sends() -> None:
    world, network = setup()
    got: list[Any] = []

    class Greeter(Recorder):
        def on_message(self, end: End, message: Any) -> None:
            got.append(message)

    def accept(end: End) -> Recorder:
        end.send("hello")
        return Recorder(world)

    network.listen("node-2", "greet", accept)
    client = Greeter(world)
    network.connect("node-1", ("node-2", "greet"), client,
                    lambda end: got.append("connected"), client.on_failed)
    world.run_for(SECOND)
    assert got == ["connected", "hello"]


def test_connect_is_refused_where_nothing_listens_and_times_out_across_a_cut() -> None:
    world, network = setup()
    refused = Recorder(world)
    network.connect("node-0", ("node-1", "nothing"), refused, refused.on_connected, refused.on_failed)
    world.run_for(10 * MS)
    assert refused.failed == "refused" and refused.failed_at is not None and refused.failed_at < 5
    network.listen("node-2", "x", lambda end: Recorder(world))
    network.cut("node-2", "node-0", both_ways=False)  # the answer cannot come back
    cut = Recorder(world)
    network.connect("node-0", ("node-2", "x"), cut, cut.on_connected, cut.on_failed)
    world.run_for(40 * SECOND)
    assert cut.connected is None and cut.failed == "timeout"
    assert cut.failed_at is not None and 1_000 <= cut.failed_at - 10 <= 30_000


def test_a_cut_stalls_the_stream_which_resumes_in_order_when_healed_in_time() -> None:
    world, network = setup(Conditions(rto_ms=(5_000, 5_000)))
    client, c, server, s = stream(world, network)
    client.send(1)
    network.cut("node-1", "node-2")
    client.send(2)
    client.send(3)
    world.run_for(4 * SECOND)
    assert s.messages == []
    network.heal("node-1", "node-2")
    client.send(4)
    world.run_for(SECOND)
    assert s.messages == [1, 2, 3, 4] and c.lost_at is None and s.lost_at is None


def test_a_stalled_stream_breaks_at_its_retransmission_timeout_on_the_sending_side() -> None:
    world, network = setup(Conditions(rto_ms=(5_000, 5_000)))
    client, c, server, s = stream(world, network)
    network.cut("node-1", "node-2")
    client.send("lost")
    world.run_for(10 * SECOND)
    assert c.lost_at is not None and 5_000 <= c.lost_at <= 5_020 and s.lost_at is None  # half open
    network.heal("node-1", "node-2")
    server.send("anyone there?")  # reaches a closed end: a reset comes back
    world.run_for(SECOND)
    assert s.lost_at is not None and s.messages == []
    assert c.messages == [], "nothing reaches an end after it was lost"


def test_an_idle_stream_across_a_cut_does_not_break() -> None:
    world, network = setup(Conditions(rto_ms=(1_000, 1_000)))
    client, c, server, s = stream(world, network)
    network.cut("node-1", "node-2")
    world.run_for(60 * SECOND)
    assert c.lost_at is None and s.lost_at is None
    network.heal("node-1", "node-2")
    client.send("still here")
    world.run_for(SECOND)
    assert s.messages == ["still here"]


def test_a_reset_delivers_a_prefix_then_each_end_is_lost_at_its_own_time() -> None:
    prefixes = set()
    for seed in range(30):
        world, network = setup(seed=seed)
        client, c, server, s = stream(world, network)
        for i in range(10):
            client.send(i)
            server.send(i)
        client.stream.reset()
        client.send("after the reset")
        world.run_for(SECOND)
        assert s.messages == list(range(len(s.messages))) and c.messages == list(range(len(c.messages)))
        assert c.lost_count == 1 and s.lost_count == 1
        prefixes.add((len(s.messages), len(c.messages)))
    assert len(prefixes) > 10


def test_close_delivers_everything_then_the_peer_is_lost_and_the_closer_at_once() -> None:
    world, network = setup()
    client, c, server, s = stream(world, network)
    for i in range(5):
        client.send(i)
    client.close()
    world.run_for(0)
    assert c.lost_count == 1 and s.lost_at is None
    world.run_for(SECOND)
    assert s.messages == [0, 1, 2, 3, 4] and s.lost_count == 1
    client.send("after close")
    client.close()
    world.run_for(SECOND)
    assert c.lost_count == 1 and s.messages == [0, 1, 2, 3, 4]


def test_abort_delivers_a_prefix_and_tells_the_aborter_at_once() -> None:
    world, network = setup()
    client, c, server, s = stream(world, network)
    for i in range(5):
        client.send(i)
    server.send("in flight")
    client.abort()
    world.run_for(SECOND)
    assert c.lost_count == 1 and c.messages == [] and s.lost_count == 1
    assert s.messages == list(range(len(s.messages)))


def test_a_killed_process_says_nothing_and_its_peer_sees_the_close() -> None:
    world, network = setup()
    client, c, server, s = stream(world, network)
    client.send("last words")
    client.kill()
    world.run_for(SECOND)
    assert c.lost_count == 0 and s.messages == ["last words"] and s.lost_count == 1


def test_a_powered_off_node_leaves_half_open_streams_reset_once_it_is_back() -> None:
    world, network = setup(Conditions(rto_ms=(3_000, 3_000)))
    client, c, server, s = stream(world, network)
    busy, b, busy_server, bs = stream(world, network, "node-0", "node-2")
    network.power_off("node-2")
    client.send("unanswered")  # bytes in flight: broken at the retransmission timeout
    world.run_for(10 * SECOND)
    assert c.lost_at is not None and 3_000 < c.lost_at < 3_100
    assert b.lost_at is None  # idle: it does not know
    assert s.lost_count == 0 and bs.lost_count == 0  # the node's own ends say nothing
    refused = Recorder(world)
    network.connect("node-0", ("node-2", "echo-0"), refused, refused.on_connected, refused.on_failed)
    world.run_for(40 * SECOND)
    assert refused.failed == "timeout"
    network.power_on("node-2")
    busy.send("hello?")
    world.run_for(SECOND)
    assert b.lost_count == 1 and bs.messages == []
    again = Recorder(world)
    network.connect("node-0", ("node-2", "echo-0"), again, again.on_connected, again.on_failed)
    world.run_for(SECOND)
    assert again.failed == "refused", "its listeners went with the power"


def test_a_dialler_whose_synack_never_comes_is_told_failed() -> None:
    """A cut between the SYN's arrival and its SYNACK's (``test_regressions.py``, seed 46570):
    the server's end breaks at its retransmission timeout, and the dialler, still sending SYNs,
    fails ``timeout`` then, never ``connected``. The same when the server's machine goes before
    its SYNACK left (after the dialler's own timeout), and a reset before it fails ``reset``."""
    world, network = setup(Conditions(rto_ms=(2_000, 2_000)))
    accepted: list[End] = []
    server = Recorder(world)

    def accept(end: End) -> Recorder:
        accepted.append(end)
        return server

    def dial(name: str) -> Recorder:
        """Dial ``name`` on node-2 from node-1, and stop once the SYN got there (the SYNACK on its way)."""
        client = Recorder(world)
        network.connect("node-1", ("node-2", name), client, client.on_connected, client.on_failed)
        count = len(accepted)
        while len(accepted) == count:
            world.run_for(10_000)
        assert client.connected is None
        return client

    network.listen("node-2", "x", accept)
    client = dial("x")
    started = world.now_ms
    network.cut("node-2", "node-1")
    world.run_for(5 * SECOND)
    assert client.connected is None and client.failed == "timeout" and client.lost_count == 0
    assert client.failed_at is not None and 2_000 <= client.failed_at - started <= 2_005  # the RTO, from the stall
    assert server.lost_count == 1
    network.heal("node-2", "node-1")
    world.run_for(SECOND)
    assert client.connected is None and client.failed == "timeout", "told once"

    gone = dial("x")
    network.cut("node-2", "node-1")
    network.power_off("node-2")
    world.run_for(40 * SECOND)
    assert gone.connected is None and gone.failed == "timeout" and gone.lost_count == 0
    network.power_on("node-2")
    network.heal("node-2", "node-1")

    network.listen("node-2", "y", accept)
    reset = dial("y")
    accepted[-1].abort()  # a reset from the server before its SYNACK got there (the prefix it keeps may hold it)
    world.run_for(SECOND)
    assert (reset.failed, reset.connected is None, reset.lost_count) in (("reset", True, 0), (None, False, 1))
