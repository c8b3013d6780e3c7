"""The services of a compose file in deploy/compose/, started with testcontainers as written.

No ``docker compose`` runs here (its plugin is not installed, and no registry is
reachable), so the tests read the compose file themselves: the part of the compose
format those files use — ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}``
interpolation, YAML merge keys, ``x-`` extension fields, ``image``, ``command``,
``environment``, ``volumes`` (named volumes and binds relative to the file),
``network_mode``, ``shm_size`` and ``depends_on`` — and start each service as the
file says. Anything else in a service is refused, so the files cannot drift into
what the tests do not run. Containers and named volumes are removed by :meth:`down`,
which the fixtures call on failure too.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from testcontainers.core.container import DockerContainer

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:-|:\?)([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_KNOWN = {"image", "command", "environment", "volumes", "network_mode", "shm_size", "depends_on", "restart",
          "stop_grace_period"}


class ComposeError(ValueError):
    pass


def interpolate(value: Any, env: dict[str, str], where: str = "") -> Any:
    if isinstance(value, dict):
        return {k: interpolate(v, env, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, where) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        given = env.get(name, "")
        if m.group(2) == ":-":
            return given or m.group(3)
        if m.group(2) == ":?" and not given:
            raise ComposeError(f"{where}: {name}: {m.group(3)}")
        return given

    return _VARIABLE.sub(one, value)


def load(path: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The services of the compose file at ``path``, interpolated with ``env``."""
    document = yaml.safe_load(path.read_text())
    services = interpolate(document.get("services") or {}, env, path.name)
    for name, service in services.items():
        unknown = set(service) - _KNOWN
        if unknown:
            raise ComposeError(f"{path.name}: service {name}: keys the tests do not run: {sorted(unknown)}")
    return services


def _order(services: dict[str, dict[str, Any]]) -> list[str]:
    done: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in done:
            return
        if name in path:
            raise ComposeError(f"depends_on cycle: {' -> '.join(path + (name,))}")
        for dependency in services[name].get("depends_on") or []:
            visit(dependency, path + (name,))
        done.append(name)

    for name in services:
        visit(name, ())
    return done


@dataclass
class Project:
    """The services of one compose file, started under a project name of their own."""

    path: Path
    env: dict[str, str]
    name: str = field(default_factory=lambda: f"canopy-test-{uuid.uuid4().hex[:8]}")
    containers: dict[str, DockerContainer] = field(default_factory=dict)
    volumes: set[str] = field(default_factory=set)
    #: services a test stopped itself (an exit is not a failure)
    down_on_purpose: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.services = load(self.path, self.env)

    def container_name(self, service: str) -> str:
        return f"{self.name}-{service}"

    def up(self, *only: str) -> None:
        """Start the services (``only`` those), dependencies first."""
        for service in _order(self.services):
            if (not only or service in only) and service not in self.containers:
                self.start(service)

    def _volumes(self, spec: dict[str, Any]) -> dict[str, dict[str, str]]:
        """The service's volumes as the Docker API takes them: a bind's source resolved from the
        file's directory, a named volume prefixed by the project (and remembered for down())."""
        volumes = {}
        for volume in spec.get("volumes") or []:
            source, target, *mode = volume.split(":")
            if source.startswith((".", "/")):
                source = str((self.path.parent / source).resolve())
            else:
                source = f"{self.name}_{source}"
                self.volumes.add(source)
            volumes[source] = {"bind": target, "mode": mode[0] if mode else "rw"}
        return volumes

    def start(self, service: str) -> DockerContainer:
        spec = self.services[service]
        container = DockerContainer(spec["image"])
        container.with_name(self.container_name(service))
        for key, value in (spec.get("environment") or {}).items():
            container.with_env(key, "" if value is None else str(value))
        if spec.get("command"):
            container.with_command(spec["command"])
        for source, mount in self._volumes(spec).items():
            container.with_volume_mapping(source, mount["bind"], mount["mode"])
        kwargs: dict[str, Any] = {}
        if spec.get("network_mode"):
            kwargs["network_mode"] = spec["network_mode"]
        if spec.get("shm_size"):
            kwargs["shm_size"] = spec["shm_size"]
        container.with_kwargs(**kwargs)
        self.containers[service] = container  # before start: down() removes it even if start fails
        container.start()
        return container

    def stop(self, service: str, timeout: int = 30) -> None:
        """``docker stop``: SIGTERM (canopy serve stops cleanly), SIGKILL after ``timeout`` s."""
        self.down_on_purpose.add(service)
        self.containers[service].get_wrapped_container().stop(timeout=timeout)

    def run(self, service: str, *command: str, timeout: float = 300) -> tuple[int, str]:
        """``docker compose run --rm SERVICE COMMAND``: a one-off container of the service's image,
        environment and volumes with ``command`` as its command; its exit status and output."""
        spec = self.services[service]
        volumes = self._volumes(spec)
        client = self.containers[service].get_docker_client().client
        one = client.containers.run(
            spec["image"], list(command), detach=True, environment=spec.get("environment") or {},
            volumes=volumes, network_mode=spec.get("network_mode"), name=f"{self.container_name(service)}-run",
        )
        try:
            code = one.wait(timeout=timeout)["StatusCode"]
            return code, one.logs().decode(errors="replace")
        finally:
            one.remove(force=True)

    def kill(self, service: str) -> None:
        """``docker kill``: SIGKILL of every process in the container."""
        self.containers[service].get_wrapped_container().kill()

    def restart(self, service: str) -> None:
        """``docker start`` of the (killed) container: same volumes, same name."""
        wrapped = self.containers[service].get_wrapped_container()
        wrapped.reload()
        deadline = time.monotonic() + 30
        while wrapped.status not in ("exited", "created", "dead"):  # the kill takes a moment to be seen
            if time.monotonic() > deadline:
                raise AssertionError(f"{service} still {wrapped.status} after it was killed")
            time.sleep(0.1)
            wrapped.reload()
        wrapped.start()

    def health(self, service: str) -> str | None:
        """The container's health (starting, healthy, unhealthy) by the image's HEALTHCHECK."""
        wrapped = self.containers[service].get_wrapped_container()
        wrapped.reload()
        health = wrapped.attrs.get("State", {}).get("Health") or {}
        return health.get("Status")

    def logs(self, service: str) -> str:
        try:
            return self.containers[service].get_wrapped_container().logs().decode(errors="replace")
        except Exception as e:
            return f"(no logs: {e})"

    def exec(self, service: str, *command: str) -> tuple[int, str]:
        code, output = self.containers[service].get_wrapped_container().exec_run(list(command))
        return code, output.decode(errors="replace")

    def down(self) -> None:
        """Remove every container (running or not) and named volume of the project."""
        for container in self.containers.values():
            try:
                container.stop()
            except Exception:
                pass
        self.containers.clear()
        if self.volumes:
            import docker

            client = docker.from_env()
            try:
                for volume in self.volumes:
                    try:
                        client.volumes.get(volume).remove(force=True)
                    except Exception:
                        pass
            finally:
                client.close()
