"""The KubeRay manifests (deploy/kuberay/) and canopy-node's KubeRay roles, checked offline.

* Kubernetes' own kinds against the API schemas of one Kubernetes version
  (:data:`KUBERNETES`, shipped by the kubernetes-validate package), strictly: an
  unknown field is an error, as ``kubectl apply`` (``--validate=strict``) makes it.
* The RayCluster against the OpenAPI v3 schema of KubeRay's RayCluster CRD, kept in
  ``data/kuberay/`` (see the README there), made strict the same way.
* What neither schema knows: the roles, the ``CANOPY_*`` variables, canopy.toml, the
  ports, the probes, the secrets and the volumes agree with canopy and with each other.
* canopy-node's ``kuberay-head`` and ``kuberay-worker`` branches, run by bash with
  fake ``ray``, ``canopy`` and ``python3`` commands given the command KubeRay v1.7.0
  would generate from raycluster.yaml (:func:`kuberay_command`).
* ``canopy-node health`` (the image's HEALTHCHECK and the head's startup probe) against a
  stand-in gateway's ``/healthz``; the other probes ask the gateways' ``/healthz`` and ``/readyz``.

No network, no cluster, no Docker.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from cluster.config import SETTINGS, load
from tests.conftest import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kuberay"
CANOPY_NODE = ROOT / "deploy" / "image" / "canopy-node"
DOCKERFILE = ROOT / "deploy" / "image" / "Dockerfile"
CRD_SCHEMA = Path(__file__).parent / "data" / "kuberay" / "rayclusters-v1.7.0.json"
#: the Kubernetes version whose API schemas the core kinds are checked against
KUBERNETES = "1.30.0"
HEALTH = ["canopy-node", "health"]


# --- the manifests ------------------------------------------------------------------------------


def manifest_files() -> list[str]:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    return list(kustomization["resources"])


def objects() -> list[dict[str, Any]]:
    """Every object the kustomization applies, in its order."""
    found = []
    for name in manifest_files():
        found += [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]
    return found


def named(kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in objects() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def raycluster() -> dict[str, Any]:
    return named("RayCluster")


def groups(cluster: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """("head", headGroupSpec), then ("worker", each workerGroupSpec)."""
    spec = cluster["spec"]
    return [("head", spec["headGroupSpec"])] + [("worker", g) for g in spec["workerGroupSpecs"]]


def container(group: dict[str, Any]) -> dict[str, Any]:
    """The Ray container: KubeRay takes the pod's first."""
    found: dict[str, Any] = group["template"]["spec"]["containers"][0]
    return found


def env(group: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(group).get("env", [])}


def canopy_toml(tmp_path: Path) -> Path:
    path = tmp_path / "canopy.toml"
    path.write_text(named("ConfigMap", "canopy-config")["data"]["canopy.toml"])
    return path


def test_the_kustomization_lists_every_manifest() -> None:
    present = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(manifest_files()) == sorted(present)


# --- Kubernetes' kinds: the API schemas -------------------------------------------------------------


def core_objects() -> list[dict[str, Any]]:
    """The objects of Kubernetes' own kinds, and each RayCluster group's pod template as a PodTemplate."""
    found = [o for o in objects() if o["apiVersion"] != "ray.io/v1"]
    for kind, group in groups(raycluster()):
        found.append({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"raycluster-{kind}"},
                      "template": group["template"]})
    return found


@pytest.mark.parametrize("obj", core_objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_kubernetes_kinds_validate_against_the_api_schema(obj: dict[str, Any]) -> None:
    assert kubernetes_validate.validate(obj, KUBERNETES, strict=True) == KUBERNETES.rsplit(".", 1)[0]


@pytest.mark.parametrize(
    ("kind", "name", "spoil", "error"),
    [
        ("Service", "canopy", lambda o: o["spec"]["ports"][0].update(targetport=8080), "'targetport' was unexpected"),
        ("Deployment", "canopy-redis", lambda o: o["spec"].update(replicas="1"), "'1' is not of type 'integer'"),
        ("PersistentVolumeClaim", "canopy-head-data", lambda o: o.update(specs=o.pop("spec")), "'specs' was unexpected"),
    ],
)
def test_the_api_schema_rejects_a_misspelled_field_and_a_wrong_type(kind: str, name: str, spoil: Any, error: str) -> None:
    obj = copy.deepcopy(named(kind, name))
    spoil(obj)
    with pytest.raises(kubernetes_validate.ValidationError, match=re.escape(error)):
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)


# --- the RayCluster: KubeRay's CRD schema ---------------------------------------------------------


def strict(schema: Any) -> Any:
    """``schema`` with unknown properties refused wherever it lists the known ones: the API
    server drops (or, validating strictly, refuses) fields a structural schema does not
    declare, where plain JSON Schema would let them through."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema and not schema.get(
        "x-kubernetes-preserve-unknown-fields"
    ):
        out["additionalProperties"] = False
    return out


def crd_validator() -> jsonschema.protocols.Validator:
    schema = strict(json.loads(CRD_SCHEMA.read_text()))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_the_raycluster_validates_against_kuberays_crd() -> None:
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in crd_validator().iter_errors(raycluster())]
    assert errors == []


@pytest.mark.parametrize(
    ("spoil", "error"),
    [
        # misspelled: workerGroupSpecs
        (lambda c: c["spec"].update(workerGroupSpec=c["spec"].pop("workerGroupSpecs")), "'workerGroupSpec' was unexpected"),
        # misplaced: replicas belongs to a worker group, not to the head's
        (lambda c: c["spec"]["headGroupSpec"].update(replicas=1), "'replicas' was unexpected"),
        # a wrong type: rayStartParams are strings
        (lambda c: c["spec"]["headGroupSpec"]["rayStartParams"].update(port=6379), "6379 is not of type 'string'"),
        (lambda c: c["spec"]["workerGroupSpecs"][0].update(replicas="2"), "'2' is not of type 'integer'"),
        # deep in the pod template
        (lambda c: container(c["spec"]["headGroupSpec"]).update(imagePullPolice="Always"), "'imagePullPolice' was unexpected"),
        (lambda c: c["spec"]["gcsFaultToleranceOptions"].update(backend="etcd"), "'etcd' is not one of"),
    ],
)
def test_the_crd_schema_rejects_misspelled_misplaced_and_mistyped_fields(spoil: Any, error: str) -> None:
    spoiled = copy.deepcopy(raycluster())
    spoil(spoiled)
    messages = [e.message for e in crd_validator().iter_errors(spoiled)]
    assert any(error in m for m in messages), messages


def test_the_crds_own_schema_lets_unknown_fields_through_which_is_why_it_is_made_strict() -> None:
    spoiled = copy.deepcopy(raycluster())
    spoiled["spec"]["headGroupSpec"]["replicas"] = 1
    assert list(jsonschema.Draft7Validator(json.loads(CRD_SCHEMA.read_text())).iter_errors(spoiled)) == []


# --- canopy: roles, variables, canopy.toml ------------------------------------------------------------


def canopy_node_roles() -> set[str]:
    """The roles canopy-node's ``serve`` command has a branch for."""
    text = CANOPY_NODE.read_text()
    body = text[text.index('case "$role" in'):text.index("    *)\n        say \"unknown CANOPY_ROLE")]
    return {role.strip() for labels in re.findall(r"^    ([a-z| -]+)\)$", body, re.M) for role in labels.split("|")}


def canopy_node_variables() -> set[str]:
    """The ``CANOPY_*`` variables canopy-node's comments document."""
    comments = "\n".join(line for line in CANOPY_NODE.read_text().splitlines() if line.lstrip().startswith("#"))
    return set(re.findall(r"\bCANOPY_[A-Z_]+\b", comments))


def test_the_roles_used_are_canopy_nodes() -> None:
    assert {"kuberay-head", "kuberay-worker"} <= canopy_node_roles()
    roles = {kind: env(group)["CANOPY_ROLE"]["value"] for kind, group in groups(raycluster())}
    assert roles == {"head": "kuberay-head", "worker": "kuberay-worker"}


def test_every_canopy_variable_is_a_setting_or_one_of_canopy_nodes() -> None:
    known = {s.env for s in SETTINGS if s.env} | canopy_node_variables()
    assert {"CANOPY_ROLE", "CANOPY_NODE_NAME"} <= canopy_node_variables()
    used = {name for o in core_objects() + [raycluster()] for name in re.findall(r"\bCANOPY_[A-Z_]+\b", json.dumps(o))}
    assert used and used <= known, used - known


def test_canopy_toml_loads_and_so_does_it_with_the_heads_environment(tmp_path: Path) -> None:
    path = canopy_toml(tmp_path)
    load(path)
    head = env(raycluster()["spec"]["headGroupSpec"])
    given = {name: e["value"] for name, e in head.items() if name.startswith("CANOPY_") and "value" in e}
    given["CANOPY_ADMIN_PASSWORD"] = named("Secret")["stringData"]["admin-password"]  # the example's
    config = load(path, environ=given)
    assert config.gateway_ports == "same"  # pods have addresses of their own
    assert config.address is None and config.gcs_redis_address is None  # canopy-node gives --address
    assert config.history_export_ms == 0 or config.history_dir is not None  # no per-pod history


def test_the_image_default_data_directory_is_where_the_volumes_are() -> None:
    assert re.search(r"CANOPY_DATA_DIR=/data\b", DOCKERFILE.read_text())
    for _, group in groups(raycluster()):
        mounts = {m["name"]: m["mountPath"] for m in container(group)["volumeMounts"]}
        assert mounts["data"] == "/data"
        assert all(name != "CANOPY_DATA_DIR" for name in env(group))


# --- canopy: ports, probes, the command -----------------------------------------------------------------


def test_the_services_target_is_the_gateway_port_on_every_pod(tmp_path: Path) -> None:
    port = load(canopy_toml(tmp_path)).port
    service = named("Service", "canopy")
    (entry,) = service["spec"]["ports"]
    for _, group in groups(raycluster()):
        ports = {p["name"]: p["containerPort"] for p in container(group)["ports"]}
        target = entry["targetPort"]
        assert (ports[target] if isinstance(target, str) else target) == port
        assert ports["gateway"] == port
        labels = group["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
    redis_labels = named("Deployment", "canopy-redis")["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= redis_labels.items()
    assert named("PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]


def test_rays_ports_are_apart_from_the_gateways_and_the_gcs_port_is_the_heads(tmp_path: Path) -> None:
    gateway = load(canopy_toml(tmp_path)).port
    for kind, group in groups(raycluster()):
        params = group["rayStartParams"]
        # KubeRay gives Ray's metrics exporter port 8080 unless told otherwise
        assert int(params["metrics-export-port"]) != gateway
        ports = {p["name"]: p["containerPort"] for p in container(group)["ports"]}
        assert ports["metrics"] == int(params["metrics-export-port"])  # else KubeRay adds "metrics": 8080
        if kind == "head":
            # the head's Service (which workers join through) has the head container's ports
            assert ports["gcs-server"] == int(params.get("port", 6379))


def test_probes_ask_the_gateways_health_endpoints_and_ray_keeps_its_liveness(tmp_path: Path) -> None:
    head = container(raycluster()["spec"]["headGroupSpec"])
    assert head["startupProbe"]["exec"]["command"] == HEALTH  # serve is serving (10 minutes for the journals)
    assert head["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "gateway"}
    assert head["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "gateway"}
    for _, group in groups(raycluster())[1:]:
        worker = container(group)
        assert worker["livenessProbe"]["exec"]["command"] == HEALTH  # its raylet runs
        assert worker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "gateway"}
    gateway = load(canopy_toml(tmp_path)).port
    for _, group in groups(raycluster()):
        ports = {p["name"]: p["containerPort"] for p in container(group)["ports"]}
        assert ports["gateway"] == gateway  # the probes' named port is the gateways'
        for probe in ("readinessProbe", "livenessProbe"):
            # an answer within the probe's time-out: /readyz and /healthz never wait on another actor
            assert container(group)[probe].get("timeoutSeconds", 1) < container(group)[probe]["periodSeconds"]


def test_the_containers_run_canopy_node_which_runs_kuberays_command() -> None:
    cluster = raycluster()
    assert cluster["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    assert 'ENTRYPOINT ["tini", "--", "canopy-node"]' in DOCKERFILE.read_text()
    for _, group in groups(cluster):
        assert "command" not in container(group)  # the image's entrypoint
        assert container(group)["args"] == ["serve"]
    head = env(cluster["spec"]["headGroupSpec"])
    assert head["CANOPY_NODE_NAME"]["value"] == "head"  # its journals, on its volume, found again by name
    assert all("CANOPY_NODE_NAME" not in env(g) for _, g in groups(cluster)[1:])  # the pod's name


def test_what_kuberay_refuses_beyond_the_schema() -> None:
    """KubeRay v1.7.0's own checks of a RayCluster (ray-operator/controllers/ray/utils/validation.go)."""
    cluster = raycluster()
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", cluster["metadata"]["name"])  # a DNS-1035 label
    assert cluster["spec"]["upgradeStrategy"]["type"] in ("Recreate", "None")
    for _, group in groups(cluster):
        assert "labels" not in group["rayStartParams"]  # canopy-node adds the canopy-node label
        assert "resources" not in group  # would clash with rayStartParams
    assert not cluster["spec"]["enableInTreeAutoscaling"]
    for _, group in groups(cluster)[1:]:  # without the autoscaler both bounds are required
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    head = env(cluster["spec"]["headGroupSpec"])
    for name in ("RAY_REDIS_ADDRESS", "REDIS_PASSWORD", "REDIS_USERNAME"):  # gcsFaultToleranceOptions sets them
        assert name not in head, name


def test_health_checks_reach_ray_as_one_system_config() -> None:
    value = raycluster()["spec"]["headGroupSpec"]["rayStartParams"]["system-config"]
    (word,) = shlex.split(value)  # the shell that runs KubeRay's command sees one word
    assert json.loads(word) == {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
                                "health_check_failure_threshold": 3}


# --- canopy: secrets, volumes, GCS fault tolerance ------------------------------------------------------


def secret_refs(obj: Any) -> Iterator[tuple[str, str]]:
    if isinstance(obj, dict):
        if "secretKeyRef" in obj:
            yield obj["secretKeyRef"]["name"], obj["secretKeyRef"]["key"]
        for value in obj.values():
            yield from secret_refs(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from secret_refs(value)


def test_every_secret_used_is_in_the_example_secret_and_its_password_is_one_canopy_takes() -> None:
    secret = named("Secret")
    refs = set(secret_refs(objects()))
    assert refs and refs <= {(secret["metadata"]["name"], key) for key in secret["stringData"]}
    assert load(environ={"CANOPY_ADMIN_PASSWORD": secret["stringData"]["admin-password"]}).admin_password


def test_rays_token_reaches_every_node_from_the_secret() -> None:
    for _, group in groups(raycluster()):
        variables = env(group)
        assert variables["RAY_AUTH_MODE"]["value"] == "token"
        assert "secretKeyRef" in variables["RAY_AUTH_TOKEN"]["valueFrom"]


def test_gcs_fault_tolerance_uses_the_redis_service() -> None:
    cluster = raycluster()
    options = cluster["spec"]["gcsFaultToleranceOptions"]
    host, _, port = options["redisAddress"].rpartition(":")
    redis = named("Service", host)
    assert int(port) in [p["port"] for p in redis["spec"]["ports"]]
    assert redis["spec"]["selector"].items() <= named("Deployment", host)["spec"]["template"]["metadata"]["labels"].items()
    # KubeRay refuses these beside gcsFaultToleranceOptions
    assert "RAY_REDIS_ADDRESS" not in env(cluster["spec"]["headGroupSpec"])
    assert "ray.io/ft-enabled" not in cluster["metadata"]["annotations"]
    assert "redis-password" not in cluster["spec"]["headGroupSpec"]["rayStartParams"]


def test_the_heads_data_is_on_a_claim_and_each_workers_on_a_volume_of_its_pod() -> None:
    head, worker = (g["template"]["spec"] for _, g in groups(raycluster())[:2])
    (head_data,) = [v for v in head["volumes"] if v["name"] == "data"]
    assert named("PersistentVolumeClaim", head_data["persistentVolumeClaim"]["claimName"])
    (worker_data,) = [v for v in worker["volumes"] if v["name"] == "data"]
    assert worker_data["ephemeral"]["volumeClaimTemplate"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    (config,) = [v for v in head["volumes"] if v["name"] == "config"]
    assert config["configMap"]["name"] == named("ConfigMap")["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container(raycluster()["spec"]["headGroupSpec"])["volumeMounts"]}
    assert mounts["config"] == "/etc/canopy" and config["configMap"]["items"] == [{"key": "canopy.toml", "path": "canopy.toml"}]
    for spec in (head, worker):
        assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["fsGroup"] == 10001  # the image's user


# --- KubeRay's generated command, and canopy-node running it ------------------------------------------


def quantity(text: str | int) -> int:
    """A Kubernetes quantity rounded up to an integer, as resource.Quantity.Value() does."""
    units = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text))
    assert match, text
    number, unit = match.groups()
    if unit == "m":
        return -(-int(number) // 1000)
    return int(float(number) * units[unit] + 0.999999)


def kuberay_command(cluster: dict[str, Any], kind: str, group: dict[str, Any], head_address: str = "") -> str:
    """$KUBERAY_GEN_RAY_START_CMD as KubeRay v1.7.0 makes it (ray-operator/controllers/ray/common/
    pod.go: setMissingRayStartParams, generateRayStartCommand, convertParamMap; configureRedisFT)."""
    params = dict(group["rayStartParams"])
    if kind == "head":
        params.setdefault("dashboard-host", "0.0.0.0")
        if cluster["spec"].get("gcsFaultToleranceOptions", {}).get("redisPassword"):
            params["redis-password"] = "$REDIS_PASSWORD"
    else:
        params.setdefault("address", head_address)
    params.setdefault("metrics-export-port", "8080")
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", "52365")
    limits = container(group)["resources"]["limits"]
    params.setdefault("num-cpus", str(quantity(limits["cpu"])))
    params.setdefault("memory", str(quantity(limits["memory"])))
    flags = ""
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in ("log-color", "include-dashboard", "include-log-monitor"):
            flags += f" --{key} " if value.lower() == "true" else ""
        else:
            flags += f" --{key}={value} "
    return ("ray start --head" if kind == "head" else "ray start") + flags


def test_kuberays_command_for_canopys_head_and_workers() -> None:
    cluster = raycluster()
    head = kuberay_command(cluster, "head", cluster["spec"]["headGroupSpec"])
    worker = kuberay_command(cluster, *groups(cluster)[1], head_address="canopy-head-svc.ns.svc.cluster.local:6379")
    assert " --block " in head and " --block " in worker
    assert " --include-dashboard=false " in head and " --metrics-export-port=8090 " in head
    assert " --address=canopy-head-svc.ns.svc.cluster.local:6379 " in worker and " --port" not in worker


FAKE_RAY = """\
    import json, os, signal, socket, subprocess, sys, time
    def note(line):
        with open(os.environ["FAKE_LOG"], "a") as f:
            f.write(line + "\\n")
    note("ray " + json.dumps(sys.argv[1:]))
    labels = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--labels-file=")]
    if labels:
        note("labels " + open(labels[-1]).read().strip())
    if "--head" not in sys.argv:
        sys.exit(int(os.environ.get("FAKE_RAY_STATUS", "0")))
    raylet = None
    def stop(*_):
        note("ray got SIGTERM")
        if raylet:
            raylet.kill()
        sys.exit(1)
    signal.signal(signal.SIGTERM, stop)
    time.sleep(float(os.environ.get("FAKE_RAY_STARTUP", "0.5")))
    if "FAKE_RAY_FAILS" in os.environ:
        note("ray failed")
        sys.exit(int(os.environ["FAKE_RAY_FAILS"]))
    port = [int(a.split("=")[1]) for a in sys.argv if a.startswith("--port=")] or [int(os.environ["RAY_PORT"])]
    gcs = socket.create_server(("127.0.0.1", port[0]))
    raylet = subprocess.Popen(["bash", "-c", "exec -a fake/raylet/raylet sleep 600"])
    note("ray up")
    time.sleep(float(os.environ.get("FAKE_RAY_LIFETIME", "600")))
    raylet.kill()
    note("ray ended")
    sys.exit(int(os.environ.get("FAKE_RAY_STATUS", "0")))
"""

FAKE_CANOPY = """\
    import json, os, signal, socket, sys, time
    def note(line):
        with open(os.environ["FAKE_LOG"], "a") as f:
            f.write(line + "\\n")
    host, _, port = sys.argv[sys.argv.index("--address") + 1].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        note("serve " + json.dumps(sys.argv[1:]) + " with the GCS up")
    except OSError:
        note("serve " + json.dumps(sys.argv[1:]) + " with the GCS DOWN")
    def stop(*_):
        note("serve got SIGTERM")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    time.sleep(float(os.environ.get("FAKE_SERVE_LIFETIME", "600")))
    note("serve ended")
    sys.exit(int(os.environ.get("FAKE_SERVE_STATUS", "0")))
"""


class Node:
    """canopy-node in a pod of its own: fake ``ray``, ``canopy`` and ``python3`` on its PATH."""

    def __init__(self, tmp_path: Path, role: str, command: str, **variables: str) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name, body in (("ray", FAKE_RAY), ("canopy", FAKE_CANOPY)):
            (bin_dir / name).write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
        # canopy-node's look for a previous instance's actors
        (bin_dir / "python3").write_text('#!/bin/bash\necho "python3 $*" >>"$FAKE_LOG"\ncat >/dev/null\n')
        for path in bin_dir.iterdir():
            path.chmod(0o755)
        self.log = tmp_path / "log"
        self.log.touch()
        self.env = {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
            "FAKE_LOG": str(self.log), "CANOPY_ROLE": role, "CANOPY_NODE_IP": "127.0.0.1",
            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t0ken", "REDIS_PASSWORD": "redis-secret",
            "KUBERAY_GEN_RAY_START_CMD": command, **variables,
        }
        self.process = subprocess.Popen(["bash", str(CANOPY_NODE), "serve"], env=self.env, start_new_session=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def saw(self, prefix: str) -> bool:
        return any(line.startswith(prefix) for line in self.lines())

    def wait(self, timeout: float = 30) -> tuple[int, str]:
        """canopy-node's exit status and output (its children's too, which hold its stdout)."""
        try:
            output, _ = self.process.communicate(timeout=timeout)
        finally:
            self.kill()
        return self.process.returncode, output

    def kill(self) -> None:
        """Whatever is left of it and its children."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        node.kill()


def head_command(port: int, with_port_flag: bool) -> tuple[str, dict[str, str]]:
    """KubeRay's head command from raycluster.yaml, with the GCS on ``port``: as a --port
    rayStartParam, or as KubeRay's $RAY_PORT when rayStartParams have none."""
    cluster = copy.deepcopy(raycluster())
    head = cluster["spec"]["headGroupSpec"]
    if with_port_flag:
        head["rayStartParams"]["port"] = str(port)
        return kuberay_command(cluster, "head", head), {"RAY_PORT": "6379"}  # the flag wins
    return kuberay_command(cluster, "head", head), {"RAY_PORT": str(port)}


@pytest.mark.parametrize("with_port_flag", [True, False], ids=["port-param", "RAY_PORT"])
def test_the_head_serves_once_ray_is_up_and_stops_ray_when_serve_ends(
    tmp_path: Path, nodes: list[Node], with_port_flag: bool
) -> None:
    port = free_port()
    command, variables = head_command(port, with_port_flag)
    node = Node(tmp_path, "kuberay-head", command, CANOPY_NODE_NAME="head", FAKE_RAY_STARTUP="1.5",
                FAKE_SERVE_LIFETIME="0.5", FAKE_SERVE_STATUS="3", **variables)
    nodes.append(node)
    status, output = node.wait()
    assert status == 3, output  # serve's: "part of canopy died"
    lines = node.lines()
    args = json.loads(lines[0].removeprefix("ray "))  # the arguments as the shell gave them
    assert args[:2] == ["start", "--head"] and "--block" in args
    assert '--system-config={"health_check_period_ms":1000,"health_check_timeout_ms":1000,' \
           '"health_check_failure_threshold":3}' in args
    assert "--redis-password=redis-secret" in args  # KubeRay's $REDIS_PASSWORD, expanded
    assert args[-1] == f"--labels-file={tmp_path}/canopy-node-labels.yaml"
    assert lines[1] == 'labels canopy-node: "head"'
    assert [line.split(" ")[0] for line in lines[2:]] == ["ray", "python3", "serve", "serve", "ray"]
    assert lines[2] == "ray up"
    assert lines[3] == f"python3 - 127.0.0.1:{port}"  # a previous instance's actors, looked for
    assert lines[4] == f'serve ["serve", "--address", "127.0.0.1:{port}"] with the GCS up'
    assert lines[5:] == ["serve ended", "ray got SIGTERM"]
    assert "canopy serve ended (status 3); stopping Ray" in output


def test_the_head_stops_serve_when_ray_ends(tmp_path: Path, nodes: list[Node]) -> None:
    command, variables = head_command(free_port(), True)
    node = Node(tmp_path, "kuberay-head", command, FAKE_RAY_STARTUP="0.2", FAKE_RAY_LIFETIME="2",
                FAKE_RAY_STATUS="1", **variables)
    nodes.append(node)
    status, output = node.wait()
    assert status == 1, output
    assert node.lines()[-2:] == ["ray ended", "serve got SIGTERM"], node.lines()
    assert "Ray's head ended (status 1); stopping canopy serve" in output


def test_the_head_never_serves_when_ray_does_not_come_up(tmp_path: Path, nodes: list[Node]) -> None:
    command, variables = head_command(free_port(), True)
    node = Node(tmp_path, "kuberay-head", command, FAKE_RAY_STARTUP="0.2", FAKE_RAY_FAILS="5", **variables)
    nodes.append(node)
    status, output = node.wait()
    assert status == 5, output
    assert not node.saw("serve") and not node.saw("python3")
    assert "Ray's head ended before it was up (status 5)" in output


def test_sigterm_stops_serve_first_then_ray(tmp_path: Path, nodes: list[Node]) -> None:
    command, variables = head_command(free_port(), True)
    node = Node(tmp_path, "kuberay-head", command, FAKE_RAY_STARTUP="0.2", **variables)
    nodes.append(node)
    wait_for(lambda: node.saw("serve "), timeout=20, what="canopy serve to start", describe=node.lines)
    node.process.send_signal(signal.SIGTERM)
    status, output = node.wait()
    assert status == 0, output  # serve's, stopped by SIGTERM
    assert node.lines()[-2:] == ["serve got SIGTERM", "ray got SIGTERM"], node.lines()


def test_a_worker_runs_kuberays_command_with_its_pods_name(tmp_path: Path, nodes: list[Node]) -> None:
    cluster = raycluster()
    command = kuberay_command(cluster, *groups(cluster)[1], head_address="canopy-head-svc.ns.svc.cluster.local:6379")
    node = Node(tmp_path, "kuberay-worker", command, FAKE_RAY_STATUS="7")
    nodes.append(node)
    status, output = node.wait()
    assert status == 7, output  # `ray start --block`'s own: canopy-node execs it
    hostname = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
    ray, labels = node.lines()
    args = json.loads(ray.removeprefix("ray "))
    assert args[:2] == ["start", "--address=canopy-head-svc.ns.svc.cluster.local:6379"] and "--block" in args
    assert args[-1] == f"--labels-file={tmp_path}/canopy-node-labels.yaml"
    assert labels == f'labels canopy-node: "{hostname}"'  # the pod's name


@pytest.mark.parametrize("role", ["kuberay-head", "kuberay-worker"])
def test_without_kuberays_command_canopy_node_says_what_is_missing(tmp_path: Path, nodes: list[Node], role: str) -> None:
    node = Node(tmp_path, role, "")
    nodes.append(node)
    status, output = node.wait()
    assert status == 1 and "no KUBERAY_GEN_RAY_START_CMD: is ray.io/overwrite-container-cmd set?" in output
    assert node.lines() == []


# --- canopy-node health: the image's HEALTHCHECK and the head's startup probe ------------------------------


@pytest.mark.parametrize("how", ["env", "file"])
def test_the_health_check_asks_the_gateways_healthz_once_serve_is_serving(tmp_path: Path, how: str) -> None:
    import http.server
    import threading

    answer = {"status": 200}

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            status = answer["status"] if self.path == "/healthz" else 404
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    config = tmp_path / "canopy.toml"
    config.write_text(f"port = {port}\nhost = \"0.0.0.0\"\n")
    variables = {"CANOPY_PORT": str(port)} if how == "env" else {"CANOPY_CONFIG": str(config)}
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CANOPY_ROLE": "single",
           "CANOPY_DATA_DIR": str(tmp_path), **variables}

    def health() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(CANOPY_NODE), "health"], env=env, capture_output=True, text=True, timeout=30)

    try:
        assert "no server.json yet" in health().stderr
        (tmp_path / "server.json").write_text(json.dumps({"state": "serving", "pid": os.getpid()}))
        passed = health()
        assert passed.returncode == 0, passed.stderr
        answer["status"] = 503
        failed = health()
        assert failed.returncode != 0 and f"127.0.0.1:{port}/healthz" in failed.stderr, failed.stderr
        answer["status"] = 200
        (tmp_path / "server.json").write_text(json.dumps({"state": "failed", "reason": "partition-1 died",
                                                          "pid": os.getpid()}))
        assert "partition-1 died" in health().stderr
    finally:
        server.shutdown()
        server.server_close()
    (tmp_path / "server.json").write_text(json.dumps({"state": "serving", "pid": os.getpid()}))
    gone = health()  # nothing listens on the port any more
    assert gone.returncode != 0 and "/healthz" in gone.stderr, gone.stderr
