"""What a hostile client gets from a gateway: memory per session, and password guesses.

Starts a real ``canopy serve`` and measures:

* **memory per session with maximal HELLO properties**: the gateway process's
  resident memory (``/proc``) before and with ``--sessions`` anonymous
  sessions open, each with as many user properties as a session may have, each
  as long as it may be (the defaults: 32 x (64 + 1,024) characters), and again
  after they closed; beside it the same for sessions without properties;
* **password guesses**: one attacker guessing one principal's password from
  one address on ``--parallel`` connections at a time for ``--seconds``; how
  many guesses the gateway checked (its ``login_admitted`` counter, from
  ``canopy cluster status``) and refused unchecked, per second, and whether a
  principal never attacked still logs in promptly from the same address;
  then one attacker spraying (a new principal name each guess) from another
  address for as long.

    .venv/bin/python bench/hostile.py [--sessions 500] [--seconds 60] [--parallel 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broker import ADMIN, start_server, stop_server  # noqa: E402
from peers import free_port  # noqa: E402

import canopy  # noqa: E402
from canopy import errors  # noqa: E402
from canopy import protocol as wire  # noqa: E402


#: the pid of the ``canopy serve`` started here: its gateway is among its descendants
SERVE_PID = 0


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def gateway_rss() -> int:
    """The resident bytes of the (one) gateway process of the instance started here."""
    import os

    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"GatewayActor" not in f.read() or not _descends_from(int(pid), SERVE_PID):
                    continue
            with open(f"/proc/{pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
    raise RuntimeError("no gateway process found")


def maximal_properties(tag: int) -> dict[str, str]:
    return {f"{tag}-{i:03d}".ljust(64, "n"): "v" * 1024 for i in range(32)}


async def open_sessions(url: str, count: int, properties: bool) -> list[Any]:
    from websockets.asyncio.client import connect

    sockets = []
    for i in range(count):
        ws = await connect(url, max_size=None, local_addr=(f"127.0.{1 + i // 500}.{1 + i % 250}", 0))
        await ws.send(wire.ClientProtocol().hello(properties=maximal_properties(i) if properties else {}))
        assert isinstance(wire.decode(await ws.recv())[0], wire.Welcome)
        sockets.append(ws)
    return sockets


async def settle(seconds: float = 3.0) -> int:
    """The gateway's RSS once it stopped changing much (a few samples apart)."""
    last = gateway_rss()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = gateway_rss()
        if abs(now - last) < 256 * 1024:
            return now
        last = now
    return last


async def memory(url: str, count: int) -> None:
    for properties in (False, True):
        before = await settle()
        sockets = await open_sessions(url, count, properties)
        held = await settle()
        for ws in sockets:
            await ws.close()
        await asyncio.sleep(3.0)  # the gateway hands freed memory back 2 s after sessions close
        after = await settle()
        label = "maximal HELLO properties" if properties else "no properties"
        print(f"  {count} sessions, {label}: gateway RSS {before / 2**20:.1f} -> {held / 2**20:.1f} MiB "
              f"({(held - before) / count / 1024:.1f} KiB per session); after they closed {after / 2**20:.1f} MiB")


async def guard_stats(admin: Any) -> dict[str, int]:
    status = await admin.server.cluster_status()
    guard: dict[str, int] = status["gateways"][0]["guard"]
    return guard


async def attack(admin: Any, seconds: float, parallel: int, guess: Callable[[int], Awaitable[None]]) -> str:
    """``parallel`` loops calling ``guess(n)`` (n counts the guesses) for ``seconds``: what the guard did."""
    before = await guard_stats(admin)
    stop = time.monotonic() + seconds
    made = 0

    async def loop() -> None:
        nonlocal made
        while time.monotonic() < stop:
            made += 1
            await guess(made)

    started = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(parallel)))
    elapsed = time.monotonic() - started
    after = await guard_stats(admin)
    checked = after["login_admitted"] - before["login_admitted"]
    refused = after["login_refused"] - before["login_refused"]
    return (f"{parallel} connections at a time, {elapsed:.0f} s: {made} guesses, {checked} checked "
            f"({checked / elapsed:.2f}/s), {refused} refused unchecked")


async def guesses(url: str, seconds: float, parallel: int) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async def victim(n: int) -> None:
        try:
            await canopy.connect(url, "victim", f"guess-{n}", reconnect_timeout=0)
        except errors.AuthenticationError:
            pass

    async def spray(n: int) -> None:  # a new name each guess, from another address
        ws = await connect(url, max_size=None, local_addr=("127.0.0.2", 0))
        try:
            await ws.send(wire.ClientProtocol().hello(f"name-{n}", "a-guess"))
            await ws.recv()  # AUTHENTICATION_FAILED, after the wait the guard decided
        except ConnectionClosed:
            pass
        finally:
            await ws.close()

    async with canopy.connect(url, *ADMIN) as admin:
        await admin.security.update(
            ["add_principal", "victim", "victim-password", ["CLIENT"]],
            ["add_principal", "bystander", "bystander-password", ["CLIENT"]],
        )
        print(f"  one principal from one address: {await attack(admin, seconds, parallel, victim)}")
        t = time.monotonic()
        async with canopy.connect(url, "bystander", "bystander-password"):
            pass
        print(f"  then a principal never attacked, from the same address: logged in in {time.monotonic() - t:.2f} s")
        print(f"  many principals from one address (the first 100 free): {await attack(admin, seconds, parallel, spray)}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--parallel", type=int, default=20)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        proc = start_server(data, port)
        global SERVE_PID
        SERVE_PID = proc.pid
        try:
            url = f"ws://127.0.0.1:{port}"
            print("memory per session:")
            await memory(url, args.sessions)
            print("password guesses:")
            await guesses(url, args.seconds, args.parallel)
        finally:
            stop_server(proc)


if __name__ == "__main__":
    asyncio.run(main())
