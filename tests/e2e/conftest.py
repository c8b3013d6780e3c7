"""`canopy serve` as a real subprocess, and the `canopy` CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Hopeless, free_port, wait_for

BIN = Path(sys.executable).parent
ADMIN_PASSWORD = "e2e-admin-password"
ADMIN = ("admin", ADMIN_PASSWORD)


class Server:
    """A `canopy serve` process; its output is collected in ``lines``."""

    def __init__(
        self, data_dir: Path, *args: str, port: int | None = None, admin_password: bool = True,
        own_session: bool = False,
    ) -> None:
        self.port = port if port is not None else free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.mqtt_port = self.port + 4
        self.data_dir = data_dir
        self.lines: list[str] = []
        #: each line with the time it was read (time.monotonic())
        self.timed_lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(
            [str(BIN / "canopy"), "serve", "--port", str(self.port), "--data-dir", str(data_dir), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # a process group of its own: Ray's local multi-node harness signals "its" group
            start_new_session=own_session,
            env={
                # RAY_AUTH_MODE left out: serve runs its embedded Ray with token authentication, its default
                **{k: v for k, v in os.environ.items() if k not in ("CANOPY_ADMIN_PASSWORD", "RAY_AUTH_MODE")},
                **({"CANOPY_ADMIN_PASSWORD": ADMIN_PASSWORD} if admin_password else {}),
                # MQTT in this test's own span of ports (gateway k on port + k, its MQTT on port + 4 + k)
                "CANOPY_MQTT_PORT": str(self.mqtt_port),
                "CANOPY_MQTT_TLS_PORT": str(self.mqtt_port),  # only one of the two is served
            },
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.timed_lines.append((time.monotonic(), line.rstrip("\n")))
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_ready(self, timeout: float = 120.0) -> Server:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise Hopeless(f"canopy serve exited with {self.proc.returncode}:\n{self.output}")
            return any("canopy serving" in line for line in self.lines)

        wait_for(ready, timeout, "canopy serve to report it is serving")
        return self

    def stop(self, timeout: float = 90.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def cli(
    *args: str, url: str | None = None, timeout: float = 60.0, admin: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the CLI; as the administrator unless ``admin=False`` (then anonymous)."""
    env = {**os.environ}
    if url is not None:
        env["CANOPY_URL"] = url
    if admin:
        env["CANOPY_PRINCIPAL"], env["CANOPY_PASSWORD"] = ADMIN
    return subprocess.run([str(BIN / "canopy"), *args], capture_output=True, text=True, timeout=timeout, env=env)


def serving(
    factory: pytest.TempPathFactory, name: str, *args: str, own_session: bool = False, timeout: float = 120.0,
) -> Iterator[Server]:
    """A `canopy serve` with these flags for a fixture to yield; it must stop with status 0
    (``own_session``: see :class:`Server`, for ``--local-nodes`` clusters)."""
    srv = Server(factory.mktemp(name), *args, own_session=own_session)
    try:
        yield srv.wait_ready(timeout)
    finally:
        code = srv.stop()
        assert code == 0, f"canopy serve exited with {code}:\n{srv.output}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One `canopy serve` for a test module, with small queues to make slow consumers visible."""
    yield from serving(
        tmp_path_factory, "data", "--partitions", "2", "--queue-limit", "40", "--backpressure-threshold", "8",
        "--max-frame-size", "4194304",
    )
