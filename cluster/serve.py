"""``canopy serve``: start (or join) Ray and run one canopy instance until stopped.

The steps, each of which either completes or leaves nothing behind:

1. lock the data directory (a second ``canopy serve`` on the same directory
   is refused); a ``server.json`` found there is stale (its writer no longer
   holds the lock): serve says so, stops what is left of that instance's
   embedded Ray, and replaces it;
2. on the embedded default, check the gateway port is free before paying
   for a Ray start, and start the watchdog (below);
3. start an embedded Ray (dashboard off, on 127.0.0.1 only, token
   authentication on) or join ``--address``;
4. create the named, detached controller; if the name is taken, this Ray
   cluster already runs canopy in that namespace and serve refuses, saying
   where that instance listens;
5. the controller starts partitions and gateways, all or nothing.

Then it supervises: every :data:`HEALTH_INTERVAL` it asks the controller
what happened to the serving actors (partitions, gateways, the view
evaluator, the session tree actor). Ray restarts one that crashes and the
controller brings it back into the instance (a partition recovers its
topics from its journal); serve prints a line for the crash and one for the
recovery. The controller is restarted by Ray too (it takes the instance over
from the actors, which outlive it: :meth:`actors.controller.ControllerActor._adopt`);
serve prints a line when it crashes and one when it is back. When one cannot come
back (dead for good, crashing in a loop, or failing to start again), or the
controller is not back within :data:`CONTROLLER_TIMEOUT`, serve prints one
line naming it, records ``"state": "failed"`` and the reason in
``server.json`` (kept after exit), shuts everything down and exits with
status :data:`EXIT_FAILED`; it never goes on claiming to serve. Ctrl-C (SIGINT) or SIGTERM shuts every actor down, then
Ray (when it was embedded), removes ``server.json`` and exits with status 0.
A refused start exits with status 1 (:mod:`cluster.cli`).

The watchdog (:mod:`cluster.watchdog`) is a small process of its own that
stops what is left of the embedded Ray when serve is gone, however it went
(``kill -9`` included).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import ipaddress
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, cast

from actors import names
from actors.settings import InstanceSettings
from cluster import head, watchdog
from cluster.config import ConfigError, InstanceConfig, ServerConfig
from cluster.watchdog import LOCK_FILE, SERVER_FILE, write_json

HEALTH_INTERVAL = 1.0
CONTROLLER_TIMEOUT = 30.0
#: how long the controller may take to answer after the head came back (Ray reschedules it once it
#: has declared the old head dead; it then takes the instance over)
HEAD_TIMEOUT = 120.0
#: how often serve makes a new controller that takes the instance over when Ray gives one up for good
REVIVALS = 3
EXIT_FAILED = 3

RAY_TOKEN_FILE = "ray-auth-token"  # in the data directory, when ~/.ray cannot hold Ray's token
#: the directory holding canopy's packages (``cluster``, ``actors``, ``sessions``, ...): serve's
#: working directory, so the one that Ray's workers import from first (see :func:`_working_in`)
CODE_ROOT = Path(__file__).resolve().parents[1]


class ServeError(RuntimeError):
    """serve refused or failed to start; the message says why."""


# --- the data directory: its lock and server.json ---------------------------------------------


def _lock(data_dir: Path) -> IO[str]:
    handle = open(data_dir / LOCK_FILE, "a+", encoding="utf-8")
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


class ServerRecord:
    """``server.json``: what this instance says about itself while it runs, and why it failed.

    After :meth:`write`, either :meth:`fail` (the file stays, ``"state": "failed"``) or
    :meth:`close` (the file goes) — ``close`` keeps a failed record."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / SERVER_FILE
        self.info: dict[str, Any] | None = None

    def write(self, info: dict[str, Any]) -> None:
        self.info = {**info, "state": "serving"}
        write_json(self.path, self.info)

    def fail(self, reason: str) -> None:
        base = self.info or {"pid": os.getpid()}
        self.info = {**base, "state": "failed", "reason": reason, "failed_at": time.time()}
        write_json(self.path, self.info)

    def close(self) -> None:
        if self.info is not None and self.info.get("state") != "failed":
            self.path.unlink(missing_ok=True)


def _replace_stale(data_dir: Path, out: Callable[[str], None]) -> None:
    """Report and remove a ``server.json`` this process found (it holds the lock, so its writer is gone),
    stopping what is left of that instance's embedded Ray on this host."""
    path = data_dir / SERVER_FILE
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(old, dict):
            raise ValueError("not an object")
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        out(f"canopy: found an unreadable {SERVER_FILE} in {data_dir}; replacing it")
        path.unlink(missing_ok=True)
        return
    pid = old.get("pid")
    here = isinstance(pid, int) and old.get("host") == socket.gethostname()
    if here and isinstance(pid, int) and pid != os.getpid() and watchdog.holds(pid, data_dir / LOCK_FILE):
        # it runs, with a lock file someone replaced under it: two instances must not share the directory
        raise ServeError(f"canopy serve pid {pid} still serves {data_dir} ({LOCK_FILE} was replaced); stop it first")
    if old.get("state") == "failed":
        detail = f"it failed: {old.get('reason') or 'no reason given'}"
    else:
        detail = "it was not stopped cleanly"
    out(f"canopy: found a stale {SERVER_FILE} from pid {pid} ({detail}); replacing it")
    if here and isinstance(pid, int) and old.get("embedded"):
        stopped = watchdog.stop_instance(pid, float(old.get("serve_started") or 0))
        if stopped:
            out(f"canopy: stopped {stopped} leftover processes of its embedded Ray")
    path.unlink(missing_ok=True)


PARTITIONS_FILE = "partitions.json"


def _recorded_partitions(config: ServerConfig, data_dir: Path, out: Callable[[str], None]) -> ServerConfig:
    """The partition count the data directory was first served with (recorded in
    ``partitions.json`` then): a topic's partition is a hash of its path modulo that
    count, so the journals only make sense with it. Another ``--partitions`` later is
    ignored, with a note."""
    path = data_dir / PARTITIONS_FILE
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))["partitions"]
        if not isinstance(recorded, int) or isinstance(recorded, bool) or recorded < 1:
            raise ValueError(f"not a partition count: {recorded!r}")
    except FileNotFoundError:
        write_json(path, {"partitions": config.partitions})
        return config
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ServeError(f"{path} cannot be read ({e}); it says how many partitions the journals here use") from None
    if recorded == config.partitions:
        return config
    out(f"canopy: {data_dir} was first served with {recorded} partitions, and topics are placed by that count: "
        f"serving {recorded}, not {config.partitions}")
    return dataclasses.replace(config, partitions=recorded)


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


# --- Ray: loopback and token authentication ---------------------------------------------------


def _is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _address_host(address: str) -> str:
    return address.rsplit(":", 1)[0] if ":" in address else address


def ray_token_path() -> Path:
    """Where Ray looks for its token when neither ``$RAY_AUTH_TOKEN`` nor ``$RAY_AUTH_TOKEN_PATH`` says."""
    return Path.home() / ".ray" / "auth_token"


def ensure_token_file(path: Path) -> str | None:
    """Make ``path`` hold a Ray token readable by its owner only; say what was done, if anything.

    A missing token is created whole (written aside, then linked in), so that two serves
    starting at once agree on one token; an existing one is kept, its mode tightened."""
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return None  # another process created it meanwhile: use theirs
        finally:
            tmp.unlink(missing_ok=True)
        return f"created Ray's authentication token in {path}"
    if mode & 0o077:
        os.chmod(path, 0o600)
        return f"made Ray's token file {path} readable by its owner only (it was mode {mode:o})"
    return None


def _prepare_ray_environment(config: ServerConfig, data_dir: Path, out: Callable[[str], None]) -> None:
    """Set what Ray reads from the environment, for this process and every Ray process it starts.

    Call before ``import ray``: Ray reads these when it is imported.

    * Loopback: the embedded Ray, and a Ray joined at a loopback address, is a
      single-machine cluster: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray take
      the loopback address as the node address (as it does on macOS), so its GCS,
      raylet, object manager, agents and workers listen on 127.0.0.1 only, and so do
      the partitions' streams (they listen on the node address).
    * Token authentication: on for the embedded Ray (``RAY_AUTH_MODE=token``), with
      Ray's token file (``~/.ray/auth_token``) created or tightened to mode 600 unless
      ``$RAY_AUTH_TOKEN``/``$RAY_AUTH_TOKEN_PATH`` say where the token is; a home that
      cannot hold it gets one in the data directory. Joining a cluster, the token is
      used when there is one. An explicit ``RAY_AUTH_MODE`` is respected.
    """
    embedded = config.address is None
    if embedded or _is_loopback(_address_host(config.address or "")):
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    mode = os.environ.get("RAY_AUTH_MODE")
    user_token = "RAY_AUTH_TOKEN" in os.environ or "RAY_AUTH_TOKEN_PATH" in os.environ
    if mode is not None:
        if embedded and mode.lower() != "token":
            out(
                f"canopy: warning: Ray's token authentication is off (RAY_AUTH_MODE={mode}): "
                "any process on this machine can run code in the embedded Ray"
            )
        return
    if not embedded:
        if user_token or ray_token_path().exists():
            os.environ["RAY_AUTH_MODE"] = "token"
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    if user_token:
        return
    try:
        note = ensure_token_file(ray_token_path())
    except OSError:
        fallback = data_dir / RAY_TOKEN_FILE
        note = ensure_token_file(fallback)
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(fallback)
    if note:
        out(f"canopy: {note}")


def _health_checks(config: ServerConfig) -> dict[str, Any]:
    """How fast Ray declares a simulated node dead (about period x failures): failover waits
    for it; Ray's defaults take about half a minute."""
    return {
        "health_check_period_ms": config.health_check_period_ms,
        "health_check_timeout_ms": config.health_check_period_ms,
        "health_check_failure_threshold": config.health_check_failures,
    }


def _check_redis(address: str) -> None:
    """Fail unless a Redis server answers PING at ``address`` (HOST:PORT) without a password."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError as e:
        raise ServeError(f"gcs_redis_address {address}: no Redis server answers there ({e})") from None
    if reply.startswith(b"-NOAUTH"):
        raise ServeError(f"gcs_redis_address {address}: that Redis wants a password, and the embedded Ray "
                         "connects without one: give canopy a Redis of its own on a private address")
    if not reply.startswith(b"+PONG"):
        raise ServeError(f"gcs_redis_address {address}: answered {reply[:40]!r}, not as Redis does")


def _gcs_fault_tolerance(config: ServerConfig) -> str | None:
    """With ``gcs_redis_address``, make the embedded Ray's GCS keep its tables in that
    Redis (``$RAY_REDIS_ADDRESS``, read when Ray starts a head) under a key prefix
    of this start's own (``$RAY_external_storage_namespace``: a new Ray cluster must
    never resume an older one's tables, detached actors included); return the prefix.

    A GCS started again by this process (``canopy cluster restart-gcs``) reads them
    back; the prefix is deleted when serve stops (one left by a killed serve is
    never used again)."""
    if config.gcs_redis_address is None:
        return None
    _check_redis(config.gcs_redis_address)
    prefix = f"canopy-{secrets.token_hex(8)}"
    os.environ["RAY_REDIS_ADDRESS"] = config.gcs_redis_address
    os.environ["RAY_external_storage_namespace"] = prefix
    return prefix


def _drop_gcs_tables(config: ServerConfig, prefix: str | None, out: Callable[[str], None]) -> None:
    """Delete this start's GCS tables from Redis (the Ray cluster is gone)."""
    if config.gcs_redis_address is None or prefix is None:
        return
    from ray._private.gcs_utils import cleanup_redis_storage

    host, _, port = config.gcs_redis_address.rpartition(":")
    try:
        cleanup_redis_storage(host, int(port), "", False, prefix)
    except Exception as e:
        out(f"canopy: warning: could not delete Ray's tables ({prefix}) from Redis at "
            f"{config.gcs_redis_address}: {type(e).__name__}: {e}")


def _system_config(config: ServerConfig) -> dict[str, Any]:
    """Ray's settings for an embedded Ray's head."""
    # Ray runs workers at nice 15 by default, below every ordinary process; canopy's
    # actors are the server, and a busy client on the same machine starved them
    settings: dict[str, Any] = {"worker_niceness": 0}
    if config.gcs_redis_address is not None:
        settings["gcs_rpc_server_reconnect_timeout_s"] = config.gcs_reconnect_timeout
    return settings


def _check_loopback(allowed: str | None = None) -> None:
    import ray

    node = ray.util.get_node_ip_address()
    if not _is_loopback(node) and node != allowed:  # Ray ignored RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER: never listen wider
        ray.shutdown()
        raise ServeError(f"the embedded Ray took {node} as its address instead of 127.0.0.1; not starting")


def _in_namespace(network: Any, node: str) -> Any:
    """The block runs with the calling thread in ``node``'s network namespace (``node_namespaces``)."""
    return network.entered(node) if network is not None else contextlib.nullcontext()


def _local_cluster(config: ServerConfig) -> tuple[Any, Any]:
    """``local_nodes`` simulated Ray nodes on this machine (Ray's own multi-node test
    harness), labelled ``node-0`` ... (see :mod:`replication.nodes`); node-0 is the head.
    With ``node_namespaces`` each is in a network namespace of its own (:mod:`cluster.netns`),
    this process's Ray connection in node-0's. Returns the cluster and the network (or None)."""
    import ray
    from ray.cluster_utils import Cluster

    from replication.nodes import LABEL

    network = None
    if config.node_namespaces:
        from cluster import netns

        try:
            network = netns.Network.create()
        except netns.NetworkError as e:
            raise ServeError(str(e)) from None
    cluster = None
    try:
        head_address = network.add("node-0") if network is not None else None
        with _in_namespace(network, "node-0"):
            cluster = Cluster(
                initialize_head=True, connect=False,
                head_node_args={
                    "num_cpus": _node_cpus(config), "include_dashboard": False, "labels": {LABEL: "node-0"},
                    # no autoscaler: the simulated nodes are the ones asked for (its monitor
                    # process cost a CPU second at every start, and polled after)
                    "no_monitor": True,
                    "_system_config": {**_system_config(config), **_health_checks(config)},
                    **({"node_ip_address": head_address} if head_address else {}),
                },
            )
        for k in range(1, config.local_nodes):
            _start_local_node(cluster, config, f"node-{k}", network)
        cluster.wait_for_nodes()
        with _in_namespace(network, "node-0"):
            on_ip: dict[str, Any] = {"_node_ip_address": head_address} if head_address else {}
            ray.init(address=cluster.address, namespace=config.namespace, logging_level=logging.WARNING, **on_ip)
        _check_loopback(head_address)
    except BaseException:
        if cluster is not None:
            cluster.shutdown()
        if network is not None:
            network.close()
        raise
    return cluster, network


def _node_cpus(config: ServerConfig) -> int:
    return max(1, (os.cpu_count() or 1) // config.local_nodes)


def _start_local_node(cluster: Any, config: ServerConfig, name: str, network: Any = None) -> None:
    from replication.nodes import LABEL

    address = network.add(name) if network is not None else None
    with _in_namespace(network, name):
        cluster.add_node(num_cpus=_node_cpus(config), labels={LABEL: name},
                         **({"node_ip_address": address} if address else {}))


def reap(cluster: Any) -> None:
    """Collect the exit status of the simulated nodes' Ray processes that exited (a raylet that
    learnt it was declared dead, after a partition healed): a zombie raylet counts as alive to
    its workers, which would otherwise serve on."""
    for node in [cluster.head_node, *cluster.worker_nodes]:
        for found in list(getattr(node, "all_processes", {}).values()):
            for info in found:
                info.process.poll()


def local_node_processes(cluster: Any) -> list[dict[str, Any]]:
    """Each running simulated node's name and raylet pid (a crashed node's entry goes;
    one started again under its name gets a new entry)."""
    from actors.processes import alive
    from replication.nodes import LABEL

    out = []
    for node in [cluster.head_node, *cluster.worker_nodes]:
        params = getattr(node, "_ray_params", None)
        name = dict(getattr(params, "labels", None) or {}).get(LABEL)
        raylet = node.all_processes.get("raylet") or []
        pid = raylet[0].process.pid if raylet else None
        if pid is not None and alive(pid):
            out.append({"name": name, "node_id": node.unique_id, "raylet_pid": pid})
    out.sort(key=lambda n: str(n["name"]))
    return out


def _init_ray(config: ServerConfig) -> tuple[Any, Any]:
    """Start or join Ray; return the simulated local cluster when there is one (to shut down)
    and its network namespaces (``node_namespaces``), else None."""
    import ray

    if config.address is None and config.local_nodes > 1:
        return _local_cluster(config)
    if config.local_nodes > 1:
        raise ServeError("local_nodes starts simulated nodes of an embedded Ray; it does not go with address "
                         "(start the nodes of that cluster with `ray start` instead)")
    if config.address is None:
        ray.init(
            # "local": always a new instance of our own, never the cluster another program
            # (or a `ray start`) recorded in /tmp/ray/ray_current_cluster
            address="local",
            namespace=config.namespace,
            include_dashboard=False,
            num_cpus=os.cpu_count(),
            logging_level=logging.WARNING,
            _system_config=_system_config(config),
        )
        _check_loopback()
        return None, None
    try:
        ray.init(address=config.address, namespace=config.namespace, logging_level=logging.WARNING)
    except ConnectionError as e:
        raise ServeError(
            f"cannot join the Ray cluster at {config.address}: {e} (if it uses token authentication, "
            f"give this process its token: {ray_token_path()}, $RAY_AUTH_TOKEN_PATH or $RAY_AUTH_TOKEN)"
        ) from None
    return None, None


# --- serve ---------------------------------------------------------------------------------------


def serve(config: ServerConfig, out: Callable[[str], None] = print) -> int:
    """Run canopy until interrupted or until part of it dies; return the process exit status.

    serve works in :data:`CODE_ROOT`, not in the directory it was started in (see
    :func:`_working_in`); the configuration's relative paths name files of the latter."""
    config = _absolute_paths(_checked_tls(config))
    data_dir = Path(config.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(data_dir)
    record = ServerRecord(data_dir)
    guard = None
    try:
        with _working_in(CODE_ROOT):
            _replace_stale(data_dir, out)
            config = _recorded_partitions(config, data_dir, out)
            if config.address is None:
                _check_port(config.host, config.port)
                guard = watchdog.start(data_dir)
            return _run(config, data_dir, record, guard, out)
    finally:
        record.close()
        lock.close()  # the watchdog, waiting for this lock, now sweeps and exits


def _checked_tls(config: ServerConfig) -> ServerConfig:
    """``config`` with its TLS certificate and key loaded once (:func:`actors.tls.check`) and their
    paths made absolute, before anything starts; a file that cannot serve TLS is a
    :class:`ConfigError` naming it. Without TLS, ``config`` unchanged."""
    from actors import tls  # no Ray

    if config.tls_cert is None or config.tls_key is None:
        return config
    try:
        cert, key = tls.check(config.tls_cert, config.tls_key)
    except tls.TLSConfigError as e:
        raise ConfigError(str(e)) from None
    return dataclasses.replace(config, tls_cert=cert, tls_key=key)


def _absolute_paths(config: ServerConfig) -> ServerConfig:
    """``config`` with its local paths made absolute, against the directory serve was started in
    (the TLS files are already: :func:`_checked_tls`); so is ``$RAY_AUTH_TOKEN_PATH``."""
    history = config.history_dir
    if history and "://" not in history:  # not a URI (s3://, gs://, ...)
        history = str(Path(history).resolve())
    token = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if token and not os.path.isabs(os.path.expanduser(token)):
        os.environ["RAY_AUTH_TOKEN_PATH"] = os.path.abspath(token)
    return dataclasses.replace(config, data_dir=str(Path(config.data_dir).resolve()), history_dir=history)


@contextlib.contextmanager
def _working_in(directory: Path) -> Iterator[None]:
    """Run the block with ``directory`` as the working directory, then go back.

    Ray puts the driver's working directory at the front of every worker's ``sys.path``
    (the job's ``py_driver_sys_path``, recorded when the driver connects), and the processes
    serve starts inherit it: the embedded or simulated Ray nodes, so every worker and what a
    worker starts with ``python -m`` (Spark's Python workers), and the watchdog; ``python -m``
    imports first from it. In the user's directory a stray ``sessions.py`` took the place of
    canopy's ``sessions`` package in every actor."""
    try:
        started_in: str | None = os.getcwd()
    except FileNotFoundError:  # removed since: nothing to go back to
        started_in = None
    os.chdir(directory)
    try:
        yield
    finally:
        if started_in is not None:
            with contextlib.suppress(OSError):
                os.chdir(started_in)


def _run(
    config: ServerConfig,
    data_dir: Path,
    record: ServerRecord,
    guard: subprocess.Popen[bytes] | None,
    out: Callable[[str], None],
) -> int:
    _prepare_ray_environment(config, data_dir, out)
    gcs_prefix = _gcs_fault_tolerance(config)

    import ray

    from actors import controller as controller_module

    local, network = _init_ray(config)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    controller: Any = None
    try:
        cls = controller_module.remote_class()
        home = ray.get_runtime_context().get_node_id()
        # what every actor reads; typed by the protocol the actors know it by, so mypy checks the two agree
        settings: InstanceSettings = InstanceConfig.of(config, str(data_dir), _instance_id(config, data_dir))
        # the instance's actors outlive a head that died with its serve (Ray's GCS in Redis): a new
        # controller adopts them; a surviving one nobody supervises is taken over (_surviving)
        orphaned = names.CONFIG_LOG in ray.util.list_named_actors()
        try:
            controller = cls.options(
                name=names.CONTROLLER, lifetime="detached", **controller_module.pinned(home),
            ).remote(settings, home, orphaned)
        except ValueError:
            controller, info = _surviving(config, settings.instance_id, out)
        else:
            try:
                info = ray.get(controller.describe.remote() if orphaned else controller.start.remote(),
                               timeout=HEAD_TIMEOUT if orphaned else None)
            except ray.exceptions.RayTaskError as e:
                raise ServeError(str(e.cause) if e.cause else str(e)) from None
            if orphaned:
                out("canopy: the instance's actors outlived its controller; a new one took the instance over")
        recorded = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "serve_started": watchdog.process_start(os.getpid()),
            "embedded": config.address is None,
            "data_dir": str(data_dir),
            "ray_address": ray.get_runtime_context().gcs_address,
            **({"local_nodes": local_node_processes(local)} if local is not None else {}),
            **({"network": network.name, "client_address": network.client_address} if network is not None else {}),
            **info,
        }
        record.write(recorded)
        password = ray.get(controller.take_generated_password.remote())
        if password is not None:
            out(
                f"canopy: first start: created the security store with principal 'admin', password {password!r} "
                "(shown this once; set admin_password in the configuration to choose your own)"
            )
        where = "embedded Ray on 127.0.0.1" if config.address is None else f"Ray at {config.address}"
        if local is not None:
            where = f"{config.local_nodes} simulated nodes of an embedded Ray on 127.0.0.1"
            if network is not None:
                where = (f"{config.local_nodes} simulated nodes of an embedded Ray, each in a network namespace "
                         f"of its own on {network.client_address.rsplit('.', 1)[0]}.0/24")
        if config.gcs_redis_address is not None:
            where += f", Ray's GCS tables in Redis at {config.gcs_redis_address}"
        out(
            f"canopy serving {', '.join(info['urls'])} ({info['partitions']} partitions, "
            f"{where}, namespace {config.namespace!r}, data {data_dir}); Ctrl-C to stop"
        )
        if info.get("mqtt_urls"):
            sockets = ", ".join(f"{url}/mqtt" for url in info["urls"])
            out(f"canopy: MQTT 3.1.1 and 5.0 on {', '.join(info['mqtt_urls'])}, and over WebSocket at {sockets}")
        if info["urls"]:
            console = info["urls"][0].replace("ws", "http", 1)  # ws:// -> http://, wss:// -> https://
            out(f"canopy: the web console is at {console}/console (every gateway serves it)")
        sys.stdout.flush()
        def add_node(name: str) -> None:
            """Start a simulated node asked for by ``canopy cluster add-node`` (a dead one's
            name starts it again on its data directory)."""
            if local is None:
                return
            try:
                _start_local_node(local, config, name, network)
            except Exception as e:
                out(f"canopy: could not start node {name}: {type(e).__name__}: {e}")
                return
            recorded["local_nodes"] = local_node_processes(local)
            record.write(recorded)
            out(f"canopy: started node {name}")

        def restart_gcs(seconds: str) -> None:
            """Kill Ray's GCS and start it again (``canopy cluster restart-gcs``); it
            reads its tables back from Redis, and Ray's processes reconnect to it."""
            if local is None or config.gcs_redis_address is None:
                return
            head = local.head_node
            out(f"canopy: killing Ray's GCS (pid {head.all_processes['gcs_server'][0].process.pid}); "
                f"starting it again in {float(seconds):g} s")
            sys.stdout.flush()
            head.kill_gcs_server()
            stop.wait(float(seconds))
            began = time.monotonic()
            head.start_gcs_server()
            try:
                alive = len([n for n in ray.nodes() if n.get("Alive")])  # waits for it to answer
            except Exception as e:
                out(f"canopy: Ray's GCS was started again but does not answer: {type(e).__name__}: {e}")
                return
            out(f"canopy: Ray's GCS is back (pid {head.all_processes['gcs_server'][0].process.pid}, answering "
                f"{time.monotonic() - began:.1f} s after its start, {alive} nodes alive: its tables came back "
                "from Redis)")

        def kill_head(seconds: str) -> Any:
            """Kill the head node, every process on it, and start it again ``seconds`` later
            (``canopy cluster kill-head``: see :mod:`cluster.head`); connect again through its
            new raylet and return the controller, which Ray restarts there."""
            nonlocal controller
            if local is None or config.gcs_redis_address is None:
                return None
            node = local.head_node
            out(f"canopy: killing the head node node-0 (Ray's GCS, its raylet and every process on it: "
                f"{', '.join(f'{kind} {pid}' for kind, found in head.pids(node).items() for pid in found)}); "
                f"starting it again in {float(seconds):g} s")
            sys.stdout.flush()
            ray.shutdown()  # this process's raylet goes with the head
            killed = head.kill(node)
            stop.wait(float(seconds))
            began = time.monotonic()
            with _in_namespace(network, "node-0"):
                node_id = head.start(node)
                head.reconnect(local.address, config.namespace, node_id,
                               node_ip=network.address("node-0") if network is not None else None)
            recorded["local_nodes"] = local_node_processes(local)
            record.write(recorded)
            out(f"canopy: the head node is back ({len(killed)} processes were killed; Ray's GCS and the head's "
                f"raylet answer {time.monotonic() - began:.1f} s after their start, under node id {node_id[:8]}); "
                "the controller comes back on it and takes the instance over")
            sys.stdout.flush()
            try:
                controller = ray.get_actor(names.CONTROLLER)
            except ValueError:  # Ray gave it up while the head was away, and released its name
                controller = revive("gone when the head came back")
            return controller

        def revive(why: str) -> Any:
            """A controller that takes the instance over (``adopt``), on serve's node, for one Ray
            gave up for good: held to the head by its label, it cannot be restarted when Ray
            declares the old head dead before the new one registers (a long outage, a loaded
            machine); or someone killed it for good (``ray kill``). Raises ValueError while Ray
            still holds the old one's name."""
            nonlocal controller
            here = ray.get_runtime_context().get_node_id()
            controller = cls.options(
                name=names.CONTROLLER, lifetime="detached", **controller_module.pinned(here),
            ).remote(settings, here, True)
            out(f"canopy: Ray gave the controller up ({why}); a new one takes the instance over")
            sys.stdout.flush()
            return controller

        def refresh() -> None:
            """server.json from the controller that is back (Ray restarted it, or serve made a new
            one): its pid, and the gateways' URLs as they are now."""
            try:
                recorded.update(ray.get(controller.describe.remote(), timeout=CONTROLLER_TIMEOUT))
            except Exception as e:
                out(f"canopy: warning: server.json keeps the last controller's details: {type(e).__name__}: {e}")
                return
            record.write(recorded)

        cuts = Partitions(network, out, lambda name: add_node(name))

        def tick() -> None:
            if local is not None:
                reap(local)
                cuts.tick(local_node_processes(local))

        failure, controller_alive = _supervise(
            controller, stop, guard, out,
            {"add_node": add_node, "restart_gcs": restart_gcs, "kill_head": kill_head, "partition": cuts.start},
            tick, revive, refresh)
        if not controller_alive:
            controller = None
        if failure is None:
            out("canopy: shutting down")
            return 0
        out(f"canopy: {failure}; canopy stops")
        sys.stdout.flush()
        record.fail(failure)
        return EXIT_FAILED
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
        if local is not None:
            local.shutdown()
        if network is not None:
            network.close()
        _drop_gcs_tables(config, gcs_prefix, out)
        for s, handler in previous.items():
            signal.signal(s, handler)


class Partitions:
    """``canopy cluster partition``, carried out by serve: cut a node off (:meth:`start`), or with
    ``delay_ms`` delay its traffic (a delay line, :mod:`cluster.delayline`), heal it after the
    asked seconds, and start it again under its name once its raylet exited (Ray declared it dead
    while it was cut off or too late to answer; on healing it learns that and exits): it rejoins
    as a new node on its data directory, as after ``add-node``. Driven by serve's health loop
    (:meth:`tick`); nothing here blocks but the start of a delay line (a fraction of a second)."""

    #: how long after healing serve waits for a node's raylet to exit before it takes it for alive
    REJOIN_WAIT = 120.0

    def __init__(self, network: Any, out: Callable[[str], None], restart: Callable[[str], None]) -> None:
        self.network = network
        self.out = out
        self.restart = restart
        self.cut: dict[str, float] = {}  # node -> when to heal it
        self.delayed: dict[str, int] = {}  # delayed (not cut off) node -> its milliseconds
        self.healed: dict[str, tuple[float, int | None]] = {}  # node -> (give up at, raylet pid)

    def start(self, request: str) -> None:
        asked = json.loads(request)
        node, seconds, direction = str(asked["node"]), float(asked["seconds"]), str(asked.get("direction") or "both")
        delay_ms = int(asked["delay_ms"]) if asked.get("delay_ms") else None
        if self.network is None:
            return
        try:
            if delay_ms is not None:
                self.network.delay(node, asked.get("peers"), direction, delay_ms)
            else:
                self.network.partition(node, asked.get("peers"), direction)
        except Exception as e:
            self.out(f"canopy: could not {'delay' if delay_ms else 'cut off'} {node}: {type(e).__name__}: {e}")
            return
        what = {"both": "what it sends and receives", "in": "what it receives", "out": "what it sends"}[direction]
        peers = ", ".join(asked["peers"]) if asked.get("peers") else "every other node"
        self.delayed.pop(node, None)
        if delay_ms is not None:
            self.delayed[node] = delay_ms
            self.out(f"canopy: network delay: {node} delayed by {delay_ms} ms from {peers} ({what} arrives "
                     f"{delay_ms} ms late); removed in {seconds:g} s")
        else:
            self.out(f"canopy: network partition: {node} cut off from {peers} ({what} is dropped); "
                     f"healing in {seconds:g} s")
        sys.stdout.flush()
        self.cut[node] = time.monotonic() + seconds

    def tick(self, nodes: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        raylets = {n["name"]: n["raylet_pid"] for n in nodes}
        for node, heal_at in list(self.cut.items()):
            if now < heal_at:
                continue
            del self.cut[node]
            did = self.network.heal(node)
            if node in self.delayed:
                self.out(f"canopy: network delay removed: {node} ({self.delayed.pop(node)} ms): "
                         f"{did or 'the delay line had stopped'}")
            else:
                self.out(f"canopy: network partition healed: {node} reaches the other nodes again")
            sys.stdout.flush()
            self.healed[node] = (now + self.REJOIN_WAIT, raylets.get(node))
        for node, (give_up, pid) in list(self.healed.items()):
            if raylets.get(node) != pid or pid is None:  # its raylet exited: declared dead while cut off
                del self.healed[node]
                self.out(f"canopy: {node} was declared dead while cut off; starting it again on its data directory")
                sys.stdout.flush()
                self.restart(node)
            elif now > give_up:
                del self.healed[node]  # never declared dead: it stayed in the cluster


def _supervise(
    controller: Any,
    stop: threading.Event,
    guard: subprocess.Popen[bytes] | None,
    out: Callable[[str], None],
    requests: dict[str, Callable[[str], Any]],
    tick: Callable[[], None] = lambda: None,
    revive: Callable[[str], Any] | None = None,
    back: Callable[[], None] = lambda: None,
) -> tuple[str | None, bool]:
    """Wait for a stop signal or a death: ``(None, True)`` when asked to stop, else
    ``(what died, whether the controller still answers)``. ``requests`` carries out
    what the controller asks serve for (``add_node``, ``restart_gcs``, ``kill_head``);
    one that returns a handle replaced the controller's (``kill_head``: serve connected
    again), which may take up to :data:`HEAD_TIMEOUT` to answer. A controller Ray gives up
    for good is replaced by ``revive(why)`` (at most :data:`REVIVALS` times); ``back()`` is
    called when a controller answers again."""
    import ray

    from actors.liveness import death_reason

    down_since: float | None = None  # the controller crashed (Ray restarts it) or is unreachable
    limit = CONTROLLER_TIMEOUT  # how long it may take to come back
    revived = 0
    while not stop.wait(HEALTH_INTERVAL):
        tick()
        try:
            dead: list[dict[str, str]] = ray.get(controller.check.remote(), timeout=CONTROLLER_TIMEOUT)
        except ray.exceptions.GetTimeoutError:
            if down_since is not None and time.monotonic() - down_since < limit:
                continue  # still coming back (after the head's loss: scheduled once Ray declares the old head dead)
            return f"the controller did not answer for {CONTROLLER_TIMEOUT:.0f} s", False
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError) as e:
            # crashed or unreachable: Ray restarts it, give it time; given up after the head's loss: a new one
            gone = isinstance(e, (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnschedulableError))
            if gone and revive is not None and revived < REVIVALS:
                try:
                    controller = revive(death_reason(e))
                    revived += 1
                    down_since, limit = time.monotonic(), HEAD_TIMEOUT
                except ValueError:
                    pass  # its name is not released yet: again at the next check
                continue
            if down_since is None:
                down_since = time.monotonic()
                out(f"canopy: {names.CONTROLLER} (ControllerActor) crashed: {death_reason(e)}; Ray restarts it")
                sys.stdout.flush()
            elif time.monotonic() - down_since > limit:
                return (f"the controller ({names.CONTROLLER}, ControllerActor) did not come back within "
                        f"{limit:.0f} s: {death_reason(e)}"), False
            continue
        except Exception as e:
            return f"the controller failed: {type(e).__name__}: {e}", True
        if down_since is not None:
            out(f"canopy: {names.CONTROLLER} (ControllerActor) is back and serving")
            back()
        down_since, limit = None, CONTROLLER_TIMEOUT
        for d in dead:
            if d["event"] == "crashed":
                out(f"canopy: {d['name']} ({d['actor']}) crashed: {d['reason']}; Ray restarts it")
            elif d["event"] == "recovered":
                out(f"canopy: {d['name']} ({d['actor']}) is back and serving")
            elif d["event"] == "cluster":
                out(f"canopy: {d['reason']}")
            elif d["event"] in requests:
                replaced = requests[d["event"]](d["reason"])
                if replaced is not None:  # the head came back: the controller, through serve's new connection
                    controller = replaced
                    down_since, limit = time.monotonic(), HEAD_TIMEOUT
        final = [d for d in dead if d["event"] in ("dead", "failed")]
        if final:
            return "; ".join(
                f"{d['name']} ({d['actor']}) {'died' if d['event'] == 'dead' else 'could not be brought back'}: "
                f"{d['reason']}"
                for d in final
            ), True
        if dead:
            sys.stdout.flush()
        if guard is not None and guard.poll() is not None:
            out(
                f"canopy: warning: the watchdog exited (status {guard.returncode}); "
                "if this process is killed, Ray's processes may stay"
            )
            guard = None
    return None, True


#: how long a controller must have gone unchecked before a new canopy serve takes it over (the
#: serve that checked it every HEALTH_INTERVAL is gone)
UNSUPERVISED = 10.0


def _surviving(config: ServerConfig, instance_id: str, out: Callable[[str], None]) -> tuple[Any, dict[str, Any]]:
    """The controller of this instance (the same machine, data directory and namespace) that
    outlived its canopy serve, and its description: with Ray's GCS in Redis, a head that comes
    back restarts the controller, which takes the instance over (it may take a while: waited
    for up to :data:`HEAD_TIMEOUT`); this serve then supervises it. A controller of another
    instance, or one another serve still checks (within :data:`UNSUPERVISED`), is refused as
    already running."""
    import ray

    deadline = time.monotonic() + HEAD_TIMEOUT
    while True:
        try:
            existing = ray.get_actor(names.CONTROLLER)
            described = cast(dict[str, Any], ray.get(existing.describe.remote(), timeout=CONTROLLER_TIMEOUT))
        except Exception as e:  # restarting, adopting, or gone meanwhile
            if time.monotonic() > deadline:
                raise ServeError(f"{_already_running(config)} (it does not answer: {type(e).__name__})") from None
            time.sleep(HEALTH_INTERVAL)
            continue
        if described.get("instance_id") != instance_id or described.get("started_at") is None:
            raise ServeError(_already_running(config))
        ago = described.get("supervised_ago")
        if ago is None or ago > UNSUPERVISED:
            out("canopy: this instance's controller outlived its canopy serve; supervising it "
                f"({'restarted since' if ago is None else f'unchecked for {ago:.0f} s'})")
            return existing, described
        if time.monotonic() > deadline - HEAD_TIMEOUT + 2 * UNSUPERVISED:
            raise ServeError(_already_running(config))  # another serve checks it
        time.sleep(HEALTH_INTERVAL)


def _already_running(config: ServerConfig) -> str:
    import ray

    detail = ""
    try:
        existing = ray.get_actor(names.CONTROLLER)
        info = cast(dict[str, Any], ray.get(existing.describe.remote(), timeout=10))
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started_at") or 0))
        detail = f" (gateways {', '.join(info.get('urls', [])) or 'none'}, started {started})"
    except Exception:
        pass
    return (
        f"canopy is already running in namespace {config.namespace!r} of this Ray cluster{detail}; "
        "stop it first, or run this one with another --namespace"
    )


def _instance_id(config: ServerConfig, data_dir: Path) -> str:
    """This canopy instance, the same over its restarts and apart from every other: the machine,
    the data directory and the namespace (fan-out tiers use it to stop a request that comes back)."""
    import hashlib
    import socket

    seed = f"{socket.gethostname()}\0{data_dir.resolve()}\0{config.namespace}"
    return hashlib.sha256(seed.encode()).hexdigest()[:16]
