"""``canopy serve``: start (or join) Ray and run one canopy instance until stopped.

The steps, each of which either completes or leaves nothing behind:

1. lock the data directory (a second ``canopy serve`` on the same directory
   is refused);
2. on the embedded default, check the gateway port is free before paying
   for a Ray start;
3. start an embedded Ray (dashboard off) or join ``--address``;
4. create the named, detached controller; if the name is taken, this Ray
   cluster already runs canopy in that namespace and serve refuses, saying
   where that instance listens;
5. the controller starts partitions and gateways, all or nothing.

Then it waits. Ctrl-C (SIGINT) or SIGTERM shuts every actor down, then Ray
(when it was embedded), and releases the lock. If the controller dies under
it, serve exits with status 3.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from cluster import names
from cluster.config import ServerConfig

HEALTH_INTERVAL = 2.0


class ServeError(RuntimeError):
    """serve refused or failed to start; the message says why."""


def _lock(data_dir: Path) -> IO[str]:
    handle = open(data_dir / ".lock", "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        handle.close()
        raise ServeError(f"data directory {data_dir} is in use by {owner}; stop it or use --data-dir") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"canopy serve pid {os.getpid()}\n")
    handle.flush()
    return handle


def _check_port(host: str, port: int) -> None:
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ServeError(
                    f"cannot listen on {host}:{port}: the address is already in use "
                    "(is another canopy or another server running there?)"
                ) from None
            raise ServeError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def _init_ray(config: ServerConfig) -> None:
    import ray

    if config.address is None:
        ray.init(
            namespace=config.namespace,
            include_dashboard=False,
            num_cpus=os.cpu_count(),
            logging_level="WARNING",
            # Ray runs workers at nice 15 by default, below every ordinary process; canopy's
            # actors are the server, and a busy client on the same machine starved them
            _system_config={"worker_niceness": 0},
        )
    else:
        ray.init(address=config.address, namespace=config.namespace, logging_level="WARNING")


def serve(config: ServerConfig, out: Callable[[str], None] = print) -> int:
    """Run canopy until interrupted; return the process exit status."""
    data_dir = Path(config.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(data_dir)
    try:
        if config.address is None:
            _check_port(config.host, config.port)
        return _run(config, data_dir, out)
    finally:
        (data_dir / "server.json").unlink(missing_ok=True)
        lock.close()


def _run(config: ServerConfig, data_dir: Path, out: Callable[[str], None]) -> int:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from actors import controller as controller_module

    _init_ray(config)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    controller = None
    try:
        cls = controller_module.remote_class()
        home = ray.get_runtime_context().get_node_id()
        try:
            controller = cls.options(
                name=names.CONTROLLER,
                lifetime="detached",
                scheduling_strategy=NodeAffinitySchedulingStrategy(home, soft=False),
            ).remote({**config.as_dict(), "data_dir": str(data_dir)}, home)
        except ValueError:
            raise ServeError(_already_running(config)) from None
        try:
            info = ray.get(controller.start.remote())
        except ray.exceptions.RayTaskError as e:
            raise ServeError(str(e.cause) if e.cause else str(e)) from None
        ray_address = ray.get_runtime_context().gcs_address
        (data_dir / "server.json").write_text(
            json.dumps({"pid": os.getpid(), "data_dir": str(data_dir), "ray_address": ray_address, **info}, indent=2)
            + "\n"
        )
        password = ray.get(controller.take_generated_password.remote())
        if password is not None:
            out(
                f"canopy: first start: created the security store with principal 'admin', password {password!r} "
                "(shown this once; set admin_password in the configuration to choose your own)"
            )
        where = "embedded Ray" if config.address is None else f"Ray at {config.address}"
        out(
            f"canopy serving {', '.join(info['urls'])} ({info['partitions']} partitions, "
            f"{where}, namespace {config.namespace!r}, data {data_dir}); Ctrl-C to stop"
        )
        sys.stdout.flush()
        while not stop.wait(HEALTH_INTERVAL):
            try:
                ray.get(controller.describe.remote(), timeout=30)
            except Exception as e:
                out(f"canopy: the controller is gone ({type(e).__name__}); exiting")
                controller = None
                return 3
        out("canopy: shutting down")
        return 0
    finally:
        if controller is not None:
            try:
                ray.get(controller.shutdown.remote(), timeout=60)
            except Exception:
                pass
            try:
                ray.kill(controller, no_restart=True)
            except Exception:
                pass
        ray.shutdown()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _already_running(config: ServerConfig) -> str:
    import ray

    detail = ""
    try:
        existing = ray.get_actor(names.CONTROLLER)
        info: dict[str, Any] = ray.get(existing.describe.remote(), timeout=10)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started_at") or 0))
        detail = f" (gateways {', '.join(info.get('urls', [])) or 'none'}, started {started})"
    except Exception:
        pass
    return (
        f"canopy is already running in namespace {config.namespace!r} of this Ray cluster{detail}; "
        "stop it first, or run this one with another --namespace"
    )
