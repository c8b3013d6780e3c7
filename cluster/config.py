"""Server configuration: defaults, a TOML file, command-line overrides.

Every setting can be given in a TOML file (``canopy serve --config FILE``)
as a top-level key, and on the command line as ``--key-with-dashes``; the
command line wins. Unknown keys and values of the wrong type are refused
with the file and key named.

==========================  =======================  ===========================================
key                         default                  meaning
==========================  =======================  ===========================================
address                     (embedded)               Ray to join: ``auto`` or ``HOST:PORT``;
                                                     unset starts an embedded local Ray
namespace                   ``canopy``               Ray namespace of this canopy instance
host                        ``127.0.0.1``            gateway listen address
port                        ``8080``                 gateway port (gateway *k* of a multi-node
                                                     cluster listens on port + k)
partitions                  one per two cores (1..8) number of topic partitions
data_dir                    ``data``                 data directory (created if missing)
queue_limit                 ``10000``                values queued per session before the
                                                     topic's CONFLATION policy decides
backpressure_threshold      ``1000``                 queued values that count as back pressure
max_frame_size              ``1048576``              largest WebSocket frame accepted (bytes)
hub_root                    ``hub``                  topic branch of the OpenAjax hub names
max_in_flight               ``2``                    gateway→partition calls in flight per partition
max_batch                   ``2000``                 operations per gateway→partition call
batch_window_ms             ``0``                    least time between two calls to one partition
                                                     (a wider window: fewer, larger calls)
admin_password              (generated)              password of the ``admin`` principal; set at
                                                     every start when given, else generated and
                                                     printed once at the first start
allow_anonymous             (as stored; true)        whether sessions without a principal connect
countries                   (none)                   ``$Country`` by client address: a table of
                                                     ``"CIDR" = "CODE"`` (first match wins)
==========================  =======================  ===========================================
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from cluster.partitioning import default_partition_count
from topics import paths
from topics.errors import PathError


class ConfigError(ValueError):
    """An invalid setting; the message names the setting and its source."""


@dataclass(frozen=True)
class ServerConfig:
    address: str | None = None
    namespace: str = "canopy"
    host: str = "127.0.0.1"
    port: int = 8080
    partitions: int = default_partition_count(os.cpu_count())
    data_dir: str = "data"
    queue_limit: int = 10_000
    backpressure_threshold: int = 1_000
    max_frame_size: int = 1_048_576
    hub_root: str = "hub"
    max_in_flight: int = 2
    max_batch: int = 2_000
    batch_window_ms: int = 0
    admin_password: str | None = None
    allow_anonymous: bool | None = None
    countries: dict[str, str] | None = None

    def __post_init__(self) -> None:
        self.validate("configuration")

    def validate(self, source: str) -> None:
        def positive(name: str, limit: int | None = None) -> None:
            value = getattr(self, name)
            if value < 1 or (limit is not None and value > limit):
                bound = f" and at most {limit}" if limit else ""
                raise ConfigError(f"{source}: {name} must be at least 1{bound}, got {value}")

        positive("partitions", 1024)
        positive("queue_limit")
        positive("backpressure_threshold")
        positive("max_in_flight", 64)
        positive("max_batch")
        if not 0 <= self.batch_window_ms <= 1000:
            raise ConfigError(f"{source}: batch_window_ms must be 0..1000, got {self.batch_window_ms}")
        if not 1024 <= self.max_frame_size <= 256 * 1024 * 1024:
            raise ConfigError(f"{source}: max_frame_size must be between 1 KiB and 256 MiB")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"{source}: port must be 0..65535, got {self.port}")
        if not self.namespace:
            raise ConfigError(f"{source}: namespace may not be empty")
        try:
            paths.normalise(self.hub_root)
        except PathError as e:
            raise ConfigError(f"{source}: hub_root: {e}") from None
        if self.admin_password is not None and len(self.admin_password) < 8:
            raise ConfigError(f"{source}: admin_password must have at least 8 characters")
        for network, code in (self.countries or {}).items():
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError as e:
                raise ConfigError(f"{source}: countries: {e}") from None
            if not isinstance(code, str):
                raise ConfigError(f"{source}: countries: the code for {network!r} must be a string")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_overrides(self, overrides: dict[str, Any], source: str = "command line") -> ServerConfig:
        clean = {k: v for k, v in overrides.items() if v is not None}
        _check_types(clean, source)
        try:
            return replace(self, **clean)
        except ConfigError as e:
            raise ConfigError(str(e).replace("configuration", source, 1)) from None


_TYPES = {f.name: f.type for f in fields(ServerConfig)}


def _check_types(values: dict[str, Any], source: str) -> None:
    for key, value in values.items():
        if key not in _TYPES:
            known = ", ".join(sorted(_TYPES))
            raise ConfigError(f"{source}: unknown setting {key!r}; known settings: {known}")
        wanted = str(_TYPES[key])
        if wanted.startswith("int"):
            ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif wanted.startswith("bool"):
            ok, kind = isinstance(value, bool), "true or false"
        elif wanted.startswith("dict"):
            ok, kind = isinstance(value, dict), "a table"
        else:
            ok, kind = isinstance(value, str), "a string"
        if not ok:
            raise ConfigError(f"{source}: {key} must be {kind}, got {value!r}")


def load(path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None) -> ServerConfig:
    """Defaults, then the TOML file at ``path`` (if any), then ``overrides``."""
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
    if overrides:
        config = config.with_overrides(overrides)
    return config
