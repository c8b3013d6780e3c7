"""Server settings: declared once, read from defaults, a TOML file, the environment and flags.

Each setting is one field of :class:`ServerConfig`, made with :func:`setting`:
its name, type and default (the field), its help text, its bounds or check,
the environment variable that may give it (``$CANOPY_<NAME>`` unless declared
otherwise; tables have none), and whether it is also a
``canopy serve`` flag (``--queue-limit`` for ``queue_limit``) or only a
file key (``file_only=`` says why). From that declaration come:

* :data:`SETTINGS`, one :class:`Setting` per field, in declaration order;
* validation, on construction and on every override;
* :func:`load`, the TOML loader: each setting is a top-level key;
* the ``canopy serve`` flags and ``--help`` (:mod:`cluster.cli`), and
  :func:`settings_table`, the table of every setting.

Precedence: the defaults, then the TOML file, then the environment, then the
flags. Unknown keys, values of the wrong type and values out of bounds raise
:class:`ConfigError` naming the source (the file, ``$VARIABLE`` or
``command line``) and the setting.

What ``canopy serve`` hands its actors is an :class:`InstanceConfig`: these settings
with the data directory made absolute and the instance's id.

This is a leaf module: it needs no Ray, and every actor process loads it to
unpickle its :class:`InstanceConfig` (the actors read that by attribute, as
:class:`actors.settings.InstanceSettings`: they import nothing from ``cluster/``).
"""

from __future__ import annotations

import ipaddress
import os
import textwrap
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from topics import paths
from topics.errors import PathError
from topics.partitioning import default_partition_count

_DECLARATION = "canopy.setting"
_KINDS = {int: "an integer", str: "a string", bool: "true or false", dict: "a table"}


class ConfigError(ValueError):
    """An invalid setting; the message names its source and the setting."""


def setting(
    default: Any,
    help: str,
    *,
    shown: str | None = None,
    low: int | None = None,
    high: int | None = None,
    check: Callable[[Any], str | None] | None = None,
    env: str | None = None,
    file_only: str | None = None,
    metavar: str | None = None,
) -> Any:
    """Declare one field of :class:`ServerConfig` as a setting.

    ``shown`` is how the default reads in help text (when not the value
    itself); ``low``/``high`` bound an integer; ``check`` returns what is
    wrong with a value (a phrase that follows the setting's name) or None;
    ``env`` names an environment variable that may give the setting;
    ``file_only`` is the reason a setting has no flag.
    """
    declared: dict[str, Any] = dict(
        help=help, shown=shown, low=low, high=high, check=check, env=env, file_only=file_only, metavar=metavar
    )
    return field(default=default, metadata={_DECLARATION: declared})


def _not_empty(value: str) -> str | None:
    return None if value else "may not be empty"


def _topic_path(value: str) -> str | None:
    try:
        paths.normalise(value)
    except PathError as e:
        return f"is not a topic path: {e}"
    return None


def _fsync_policy(value: str) -> str | None:
    from replication.journal import FsyncPolicy  # a leaf module: no Ray

    try:
        FsyncPolicy.parse(value)
    except ValueError as e:
        return str(e)
    return None


def _password(value: str) -> str | None:
    return None if len(value) >= 8 else "must have at least 8 characters"


def _host_port(value: str) -> str | None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"must be HOST:PORT, got {value!r}"
    return None


def _country_table(table: dict[str, Any]) -> str | None:
    for network, code in table.items():
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError as e:
            return f"has an invalid network: {e}"
        if not isinstance(code, str):
            return f"must map {network!r} to a country code string, got {code!r}"
    return None


def _fanout_tables(tables: dict[str, Any]) -> str | None:
    from fanout.config import FanoutConfigError, from_tables  # pure: no Ray

    try:
        from_tables(tables)
    except FanoutConfigError as e:
        return f"is invalid: {e}"
    return None


@dataclass(frozen=True)
class ServerConfig:
    """One canopy instance's settings; construction validates them."""

    address: str | None = setting(
        None, "the Ray cluster to join: auto or HOST:PORT; unset starts an embedded local Ray",
        shown="embedded Ray", metavar="auto|HOST:PORT",
    )
    local_nodes: int = setting(
        1, "simulated Ray nodes to start on this machine (embedded Ray only): each has its own data "
        "directory (<data_dir>/nodes/node-<k>), gateway (port + k) and partition replicas, for trying "
        "failover and replication locally", low=1, high=16, metavar="N",
    )
    node_namespaces: bool = setting(
        False, "give each simulated node (--local-nodes) a network namespace and an address of its own on a "
        "private bridge (10.213.X.0/24, made and removed by serve; needs root), so that `canopy cluster partition` "
        "can cut nodes off each other; gateways then listen on their node's address",
    )
    gcs_redis_address: str | None = setting(
        None, "a Redis server (HOST:PORT) that keeps the embedded Ray's GCS tables, so that Ray's head "
        "(its GCS) can restart without losing the cluster (GCS fault tolerance); embedded Ray only (for a "
        "cluster you start, give `ray start --head` $RAY_REDIS_ADDRESS)", shown="none: the GCS keeps its "
        "tables in memory and the instance stops with it", check=_host_port, metavar="HOST:PORT",
    )
    gcs_reconnect_timeout: int = setting(
        60, "seconds Ray's processes wait for a restarted GCS before they give up (with gcs_redis_address)",
        low=5, high=3600, metavar="SECONDS",
    )
    health_check_period_ms: int = setting(
        500, "how often the embedded Ray's GCS checks each simulated node (--local-nodes); a node that misses "
        "health_check_failures checks in a row is declared dead and its partitions fail over (on a cluster you "
        "start: `ray start --head --system-config '{\"health_check_period_ms\": ...}'`)", low=100, high=60_000,
        metavar="MS",
    )
    health_check_failures: int = setting(
        3, "missed health checks in a row after which Ray declares a simulated node dead (--local-nodes)",
        low=1, high=100,
    )
    server_name: str = setting(
        "", "this server's name where other servers see it: in the server chain of missing-topic "
        "notifications, and to fan-out primaries", shown="HOST:PORT of the first gateway", metavar="NAME",
    )
    namespace: str = setting("canopy", "Ray namespace of this canopy instance", check=_not_empty, metavar="NAME")
    host: str = setting("127.0.0.1", "gateway listen address")
    port: int = setting(
        8080, "gateway port; gateway k of a multi-node cluster listens on port + k (see gateway_ports)",
        low=0, high=65535,
    )
    mqtt_port: int = setting(
        1883, "MQTT (3.1.1 and 5.0) over TCP; gateway k listens on mqtt_port + k like the gateway port (every "
        "gateway on mqtt_port with gateway_ports = 'same'; a port chosen at run time when port is 0); "
        "0 turns MQTT off (over TCP, TLS and WebSocket at /mqtt on the gateway port)", low=0, high=65535, env="CANOPY_MQTT_PORT",
    )
    mqtt_tls_port: int = setting(
        8883, "MQTT over TLS (with tls_cert and tls_key; then the gateways serve TLS only, so MQTT too: "
        "mqtt_port is not served), gateway k on mqtt_tls_port + k like mqtt_port; 0 turns it off",
        low=0, high=65535, env="CANOPY_MQTT_TLS_PORT",
    )
    mqtt_create_type: str = setting(
        "BINARY", "type of the topic an MQTT publish to a path with no topic adds (STRING, INT64, DOUBLE, JSON "
        "or BINARY)", check=lambda v: None if v in ("STRING", "INT64", "DOUBLE", "JSON", "BINARY") else
        f"must be STRING, INT64, DOUBLE, JSON or BINARY, got {v!r}", metavar="TYPE",
    )
    mqtt_max_session_expiry: int = setting(
        3600, "longest an MQTT session outlives its connection, in seconds (MQTT 5's Session Expiry Interval "
        "is capped to it; an MQTT 3.1.1 session with clean session 0 is kept this long); 0: sessions end with "
        "their connections", low=0, high=2**32 - 1, metavar="S",
    )
    sys_interval: int = setting(
        10, "how often each gateway publishes its figures under $SYS/broker/ (MQTT's convention: clients, "
        "sessions, messages, uptime), in seconds; 0: never", low=0, high=86_400, metavar="S",
    )
    metrics_anonymous: bool = setting(
        False, "serve /metrics on each gateway's port without credentials (else HTTP basic authentication as a "
        "principal with VIEW_SERVER); /healthz and /readyz never need any",
        file_only="it opens the server's figures to anyone who can reach the port: a choice for the file",
    )
    mqtt_checkpoint_ms: int = setting(
        1000, "how often an MQTT session with an expiry records where its messages stand in each partition "
        "(when they moved): a gateway taking it up sends again what came after, so at most about this much "
        "comes twice", low=50, high=3_600_000, metavar="MS",
    )
    mqtt_receive_maximum: int = setting(
        64, "QoS 1 and 2 messages an MQTT session may have unacknowledged each way (MQTT 5's Receive "
        "Maximum); more wait in the session's queue", low=1, high=65535, metavar="N",
    )
    mqtt_max_subscriptions: int = setting(
        100, "topic filters one MQTT session may subscribe to", low=1, high=100_000, metavar="N",
    )
    mqtt_max_keep_alive: int = setting(
        300, "longest keep-alive an MQTT client may ask for, in seconds (0 from the client: this); a longer "
        "one is answered with this as the Server Keep Alive (MQTT 5) or refused (3.1.1)", low=1, high=65535,
        metavar="S",
    )
    gateway_ports: str = setting(
        "offset", "where a multi-node cluster's gateways listen: 'offset' (gateway k on port + k, for nodes "
        "that share an address, as --local-nodes and containers on one host's network do) or 'same' "
        "(every gateway on port, for nodes with addresses of their own: machines, Kubernetes pods)",
        check=lambda v: None if v in ("offset", "same") else f"must be 'offset' or 'same', got {v!r}",
        metavar="offset|same",
    )
    partitions: int = setting(
        default_partition_count(os.cpu_count()), "number of topic partitions",
        shown="one per two cores, up to 8", low=1, high=1024, metavar="N",
    )
    data_dir: str = setting("data", "data directory, created if missing", metavar="DIR")
    queue_limit: int = setting(
        10_000, "values queued per session before the topic's CONFLATION policy decides", low=1
    )
    backpressure_threshold: int = setting(1_000, "queued values that count as back pressure", low=1)
    max_frame_size: int = setting(
        1_048_576, "largest WebSocket frame accepted, in bytes", low=1024, high=256 * 1024 * 1024
    )
    hub_root: str = setting("hub", "topic branch of the OpenAjax hub names", check=_topic_path, metavar="BRANCH")
    max_in_flight: int = setting(
        2, "unanswered batches per partition stream; more operations wait and leave as one larger batch",
        low=1, high=64,
    )
    max_batch: int = setting(2_000, "operations per batch to a partition", low=1)
    batch_window_ms: int = setting(
        0, "least time between two batches to one partition; a wider window makes fewer, larger batches",
        low=0, high=1000,
    )
    max_path_length: int = setting(
        1024, "longest topic path (or session path) a request may name, in characters", low=16, high=65536
    )
    max_path_segments: int = setting(64, "most segments in a topic path a request may name", low=2, high=4096)
    max_selector_length: int = setting(
        4096, "longest selector a request may give, in characters (a #-set counts whole)", low=16, high=1_048_576
    )
    session_buffer: int = setting(
        64 * 1024 * 1024, "bytes a session's outbound queue may hold (values, responses and notifications "
        "alike); a session over it is closed (QUEUE_LIMIT)", low=65536, high=1 << 34, metavar="BYTES",
    )
    max_requests_in_flight: int = setting(
        1000, "requests a session may have unanswered; while it has that many, its socket is not read "
        "(flow control: the client slows down, nothing is refused)", low=1, high=1_000_000,
    )
    max_wide_requests_in_flight: int = setting(
        4, "of those, how many may be wide (fetch, remove, subscribe, range queries, views, sessions, "
        "security, session trees): requests whose work grows with the tree", low=1, high=100_000,
    )
    max_messages_per_frame: int = setting(
        1000, "messages one client frame may carry; a bigger frame closes the session", low=1, high=1_000_000
    )
    missing_topic_timeout_ms: int = setting(
        10_000, "how long a subscription or fetch that matches no topic waits for its missing-topic handlers' "
        "answer; no answer in time counts as proceed", low=10, high=600_000, metavar="MS",
    )
    message_timeout_ms: int = setting(
        10_000, "how long a request to other sessions (messaging) waits for its response when it does not say; "
        "then the sender gets REQUEST_TIMEOUT", low=10, high=3_600_000, metavar="MS",
    )
    max_message_timeout_ms: int = setting(
        60_000, "the longest a request to other sessions may wait for its response (a longer timeout is cut "
        "to this)", low=10, high=3_600_000, metavar="MS",
    )
    max_message_requests: int = setting(
        100, "requests to other sessions one session may wait for at once; one more is LIMIT_EXCEEDED",
        low=1, high=100_000,
    )
    max_protocol_errors: int = setting(
        100, "protocol errors a session may make before it is closed", low=1, high=1_000_000
    )
    hello_timeout_ms: int = setting(
        10_000, "how long a new connection may take to send its HELLO; then it is closed with a reason",
        low=100, high=600_000, metavar="MS",
    )
    max_connections: int = setting(
        10_000, "connections one gateway holds at once; one more is refused (LIMIT_EXCEEDED, WebSocket close "
        "1013: try again later)", low=1, high=1_000_000,
    )
    max_connections_per_address: int = setting(
        1_000, "connections one client address may hold to one gateway at once; one more is refused "
        "(LIMIT_EXCEEDED)", low=1, high=1_000_000,
    )
    max_session_properties: int = setting(
        32, "user properties a session may carry (in its HELLO, and after changes); more are refused "
        "(INVALID_PROPERTIES)", low=0, high=10_000,
    )
    max_property_name_length: int = setting(
        64, "longest session property name, in characters", low=1, high=65_536
    )
    max_property_value_length: int = setting(
        1024, "longest session property value, in characters", low=1, high=1_048_576
    )
    session_grace_ms: int = setting(
        30_000, "how long a session whose connection dropped (no clean close by its client) is kept for the "
        "client to resume it: its subscriptions stay and updates are queued for it within session_buffer; "
        "0 ends it at once", low=0, high=3_600_000, metavar="MS",
    )
    journal_fsync: str = setting(
        "interval:100", "when the journal forces written changes to disk: always (before each answer), "
        "interval:<ms> or never; under every policy a change reaches the operating system before it is "
        "acknowledged, so a killed process loses nothing", check=_fsync_policy, metavar="POLICY",
    )
    snapshot_every: int = setting(
        100_000, "journaled changes after which a partition writes a snapshot (bounding what a restart replays)",
        low=100, high=1_000_000_000, metavar="CHANGES",
    )
    recent_messages: int = setting(
        100_000, "messages each partition keeps after they are delivered (its primary and its backup alike), "
        "from which an MQTT session taken up at another gateway gets what it missed; 0 keeps none (such a "
        "session then gets its topics' current values)", low=0, high=10_000_000, metavar="N",
    )
    journal_scrub_ms: int = setting(
        300_000, "how often each partition replica reads its journal's files back and checks every checksum "
        "(a damaged file is replaced by a snapshot of what the replica holds and set aside); 0: never",
        low=0, high=86_400_000, metavar="MS",
    )
    journal_segment_bytes: int = setting(
        64 * 1024 * 1024, "size at which a partition's journal closes its segment and opens the next",
        low=4096, high=1 << 40, metavar="BYTES",
    )
    history_dir: str | None = setting(
        None, "where closed journal segments are kept as Parquet for the Spark jobs (`canopy history`): a "
        "directory every node can write (a shared file system for a cluster across machines) or a URI "
        "pyarrow writes (s3://bucket/prefix, gs://, hdfs://)",
        shown="<data_dir>/history", metavar="DIR",
    )
    history_export_ms: int = setting(
        60_000, "how often each partition primary closes its journal segment and exports what its backup "
        "acknowledged to the history as Parquet (a worker thread; the publish path never waits); 0: never",
        low=0, high=86_400_000, metavar="MS",
    )
    history_retention_days: int = setting(
        0, "days of history kept as Parquet (older date directories are removed); 0 keeps everything",
        low=0, high=36_500, metavar="DAYS",
    )
    tls_cert: str | None = setting(
        None, "certificate chain (PEM) for wss://; with tls_key the gateways serve TLS only", shown="none",
        metavar="FILE",
    )
    tls_key: str | None = setting(None, "private key (PEM) of tls_cert", shown="none", metavar="FILE")
    admin_password: str | None = setting(
        None, "password of the admin principal: set at every start when given, else generated and printed "
        "once at the first start", shown="generated", check=_password, env="CANOPY_ADMIN_PASSWORD",
        file_only="a secret: a command line is visible to every user of the machine",
    )
    allow_anonymous: bool | None = setting(
        None, "whether sessions without a principal may connect", shown="as stored; true at the first start",
        file_only="it changes the stored security policy; `canopy security anonymous` is the command for that",
    )
    countries: dict[str, str] | None = setting(
        None, '$Country by client address: a table of "CIDR" = "CODE" (first match wins)', shown="none",
        check=_country_table, file_only="a table",
    )
    fanout: dict[str, Any] | None = setting(
        None, "fan-out connections to primaries whose branches this server mirrors: [fanout.NAME] tables with "
        "primaries, links, principal, password, retry_delay, reconnect_timeout (see fanout/config.py)",
        shown="none", check=_fanout_tables, file_only="tables",
    )

    def __post_init__(self) -> None:
        self.validate("configuration")

    def validate(self, source: str) -> None:
        """Raise :class:`ConfigError`, naming ``source``, for the first invalid setting."""
        for s in SETTINGS:
            s.verify(getattr(self, s.name), source)
        _check_together(self.as_dict(), source)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_overrides(self, overrides: Mapping[str, Any], source: str = "command line") -> ServerConfig:
        """These settings replaced (None means not given); errors name ``source``."""
        clean = {key: value for key, value in overrides.items() if value is not None}
        for key, value in clean.items():
            _named(key, source).verify(value, source)
        _check_together({**self.as_dict(), **clean}, source)
        return replace(self, **clean)


@dataclass(frozen=True)
class InstanceConfig(ServerConfig):
    """One running canopy instance's configuration, as ``canopy serve`` hands it to every actor
    (:meth:`of`): its settings, with ``data_dir`` made absolute (the actors work in another
    directory than serve was started in), and ``instance_id``, which names the instance the same
    way over its restarts (fan-out tiers use it to stop a request that comes back; empty where no
    serve made the value, as in tests).

    A subclass rather than a value holding a :class:`ServerConfig` beside ``data_dir`` and
    ``instance_id``: the actors read every setting as an attribute of one value
    (``config.port``, ``config.instance_id``), typed by the protocol
    :class:`actors.settings.InstanceSettings` (they cannot import this module), and there is one
    ``data_dir``, the resolved one, not a configured one beside it. ``instance_id`` is not a
    setting (no flag, no file key, not in :data:`SETTINGS`), so it is not a field of
    ServerConfig, every field of which is one. Frozen and picklable: Ray hands it to the actors
    by value."""

    instance_id: str = ""

    @classmethod
    def of(cls, settings: ServerConfig, data_dir: str, instance_id: str) -> InstanceConfig:
        """``settings`` with the absolute ``data_dir`` and ``instance_id`` (validated again, as any)."""
        values = {f.name: getattr(settings, f.name) for f in fields(ServerConfig)}
        return cls(**{**values, "data_dir": data_dir, "instance_id": instance_id})


def _check_together(values: Mapping[str, Any], source: str) -> None:
    """The rules between settings."""
    if values["gcs_redis_address"] is not None and values["address"] is not None:
        raise ConfigError(
            f"{source}: gcs_redis_address configures the embedded Ray's GCS; it does not go with address "
            "(start the head of that cluster with $RAY_REDIS_ADDRESS instead)")
    if values["gateway_ports"] == "same" and values["local_nodes"] > 1:
        raise ConfigError(
            f"{source}: gateway_ports = 'same' puts every gateway on one port, but the {values['local_nodes']} "
            "local_nodes share one address: use 'offset' (gateway k on port + k)")
    if values["node_namespaces"] and values["local_nodes"] < 2:
        raise ConfigError(f"{source}: node_namespaces puts simulated nodes in network namespaces: it goes with "
                          "local_nodes of 2 or more")
    if (values["tls_cert"] is None) != (values["tls_key"] is None):
        raise ConfigError(f"{source}: tls_cert and tls_key go together: give both or neither")


@dataclass(frozen=True)
class Setting:
    """One declared setting: how it is read, checked and described."""

    name: str
    kind: type[Any]  # int, str, bool or dict (a TOML table)
    optional: bool  # None is a valid value (meaning: not set)
    default: Any
    help: str
    shown: str | None
    low: int | None
    high: int | None
    check: Callable[[Any], str | None] | None
    env: str | None
    file_only: str | None
    metavar: str | None

    @property
    def flag(self) -> str | None:
        """The ``canopy serve`` option, or None for a file-only setting."""
        return None if self.file_only else "--" + self.name.replace("_", "-")

    @property
    def default_text(self) -> str:
        if self.shown is not None:
            return self.shown
        return str(self.default).lower() if self.kind is bool else str(self.default)

    @property
    def bounds(self) -> str | None:
        if self.low is None and self.high is None:
            return None
        if self.high is None:
            return f"at least {self.low}"
        if self.low is None:
            return f"at most {self.high}"
        return f"at least {self.low} and at most {self.high}"

    @property
    def description(self) -> str:
        """The help text with the default, the bounds and the environment variable."""
        text = f"{self.help} (default: {self.default_text}"
        text += f"; {self.bounds})" if self.bounds else ")"
        return text + (f"; also ${self.env}" if self.env else "")

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (a phrase that follows the setting's name), or None."""
        if value is None and self.optional:
            return None
        if not isinstance(value, self.kind) or (self.kind is int and isinstance(value, bool)):
            return f"must be {_KINDS[self.kind]}, got {value!r}"
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return f"must be {self.bounds}, got {value!r}"
        return self.check(value) if self.check is not None else None

    def verify(self, value: Any, source: str) -> None:
        problem = self.problem(value)
        if problem is not None:
            raise ConfigError(f"{source}: {self.name} {problem}")

    def from_text(self, text: str, source: str) -> Any:
        """The value a flag or an environment variable gives as ``text``."""
        if self.kind is str:
            return text
        if self.kind is int:
            try:
                return int(text)
            except ValueError:
                raise ConfigError(f"{source}: {self.name} must be an integer, got {text!r}") from None
        if self.kind is bool and text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ConfigError(f"{source}: {self.name} must be {_KINDS[self.kind]}, got {text!r}")


def _declare(f: Field[Any], hint: Any) -> Setting:
    """The :class:`Setting` of a field of :class:`ServerConfig` with type ``hint`` (``int``, ``str | None``...)."""
    declared = f.metadata.get(_DECLARATION)
    if declared is None:
        raise TypeError(f"ServerConfig.{f.name} is not declared with setting()")
    members = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    values = [m for m in members if m is not type(None)]
    kind = get_origin(values[0]) or values[0]
    if len(values) != 1 or kind not in _KINDS or (kind is dict and declared["file_only"] is None):
        raise TypeError(f"ServerConfig.{f.name}: no {hint} setting (one of {_KINDS}; a table is file-only)")
    if declared["env"] is None and kind is not dict:
        # every scalar setting may come from $CANOPY_<NAME> (the container image's way): tables are file-only
        declared = {**declared, "env": "CANOPY_" + f.name.upper()}
    return Setting(name=f.name, kind=kind, optional=len(values) < len(members), default=f.default, **declared)


_HINTS = get_type_hints(ServerConfig)
SETTINGS: tuple[Setting, ...] = tuple(_declare(f, _HINTS[f.name]) for f in fields(ServerConfig))
_BY_NAME = {s.name: s for s in SETTINGS}


def _named(key: str, source: str) -> Setting:
    found = _BY_NAME.get(key)
    if found is None:
        known = ", ".join(sorted(_BY_NAME))
        raise ConfigError(f"{source}: unknown setting {key!r}; known settings: {known}")
    return found


def _from_environment(environ: Mapping[str, str], config: ServerConfig) -> ServerConfig:
    """``config`` with the settings whose environment variable is set (not empty) in ``environ``."""
    for s in SETTINGS:
        text = environ.get(s.env, "") if s.env else ""
        if text:
            source = f"${s.env}"
            config = config.with_overrides({s.name: s.from_text(text, source)}, source)
    return config


def load(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerConfig:
    """The defaults, then the TOML file at ``path`` (if any), then ``environ``, then ``overrides``."""
    config = ServerConfig()
    if path is not None:
        source = str(path)
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{source}: no such configuration file") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{source}: not valid TOML: {e}") from None
        config = config.with_overrides(data, source)
    if environ is not None:
        config = _from_environment(environ, config)
    if overrides:
        config = config.with_overrides(overrides)
    return config


def settings_table(settings: tuple[Setting, ...] = SETTINGS, width: int = 100) -> str:
    """``settings`` as a plain-text table of TOML keys and their descriptions."""
    key_width = max(len(s.name) for s in settings) + 2
    lines = []
    for s in settings:
        wrapped = textwrap.wrap(s.description, max(width - key_width, 30))
        lines.append(f"{s.name:<{key_width}}{wrapped[0]}")
        lines.extend(" " * key_width + rest for rest in wrapped[1:])
    return "\n".join(lines)
