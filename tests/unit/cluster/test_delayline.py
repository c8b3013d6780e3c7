"""The delay line's queue and values (cluster/delayline.py), without devices: the packets'
way through real TUN devices is in test_netns.py."""

from __future__ import annotations

import socket

import pytest

from cluster.delayline import DelayQueue, Spec, Stats, destination


def test_packets_leave_after_the_delay_in_the_order_they_came() -> None:
    queue = DelayQueue(0.1, 1000)
    assert queue.wait(5.0) is None and list(queue.due(5.0)) == []
    for k, at in enumerate((5.0, 5.01, 5.01, 5.05)):
        assert queue.push(at, k % 2, bytes([k]) * 10)
    assert queue.wait(5.0) == pytest.approx(0.1) and queue.wait(6.0) == 0.0
    assert list(queue.due(5.0999)) == []
    assert list(queue.due(5.11)) == [(0, b"\x00" * 10), (1, b"\x01" * 10), (0, b"\x02" * 10)]
    assert len(queue) == 1 and queue.bytes == 10
    assert list(queue.due(9.0)) == [(1, b"\x03" * 10)] and queue.bytes == 0 and queue.peak == 40


def test_what_passes_the_bound_is_dropped_and_counted() -> None:
    queue = DelayQueue(1.0, 25)
    assert queue.push(0.0, 3, b"a" * 10) and queue.push(0.0, 3, b"b" * 10)
    assert not queue.push(0.0, 3, b"c" * 10)  # 30 > 25
    assert queue.push(0.0, 3, b"d" * 5)  # exactly full
    assert (queue.dropped, queue.dropped_bytes, queue.peak) == (1, 10, 25)
    assert [p for _, p in queue.due(1.0)] == [b"a" * 10, b"b" * 10, b"d" * 5]
    assert queue.push(1.0, 3, b"e" * 25)  # room again once they left


def test_the_destination_is_an_ipv4_headers() -> None:
    header = bytes([0x45, 0, 0, 20]) + bytes(8) + socket.inet_aton("10.213.7.11") + socket.inet_aton("10.213.7.12")
    assert destination(header) == socket.inet_aton("10.213.7.12")
    assert destination(bytes([0x60]) + bytes(39)) is None  # IPv6
    assert destination(header[:19]) is None


def test_spec_and_stats_cross_the_process_boundary_whole() -> None:
    spec = Spec(200, 1 << 20, {"10.213.7.11": 5, "10.213.7.12": 6})
    assert Spec.decode(spec.encode()) == spec
    stats = Stats(forwarded=10, forwarded_bytes=5000, dropped=2, dropped_bytes=2000, peak_bytes=3000)
    assert Stats.decode(stats.encode()) == stats
    assert "10 packets (0.0 MB) delivered late, 2 dropped" in str(stats)
