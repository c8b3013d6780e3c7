"""The pure packages import no Ray, no asyncio, no PySpark and do no I/O; the client stands alone.

The layers, each importing only those before it, with no exception: topics <- sessions <- views
<- mqtt (the MQTT codec and mapping) <- canopy (the client) <- replication/fanout/history (distributed logic) <-
actors (the Ray shells) <- cluster. A leaf module lives in the lowest layer that may hold it
(partitioning in topics, node names and placement in replication, Ray names and processes in actors),
so that nothing needs to reach up for one.
The client installs without the server extra, so nothing it imports may need
Ray, PySpark or a server package.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import subprocess
import sys
import tomllib
from typing import NamedTuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PURE = ["topics", "sessions", "views", "mqtt"]
# Pure modules in a package that is not: decisions whose shells live in actors/.
PURE_MODULES = ["replication/replica.py", "replication/placement.py", "replication/journal_agreement.py",
                "replication/config_entries.py", "replication/config_writer.py"]
FORBIDDEN = {
    "ray",
    "asyncio",
    "pyspark",
    "py4j",
    "socket",
    "websockets",
    "aiohttp",
    "sqlite3",
    "subprocess",
    "threading",
    "multiprocessing",
    "urllib",
    "http",
    "requests",
    "time",
}


# What the pure packages may not pull in through a library either (lark, for
# one, imports threading for a lock, which is not I/O).
TRANSITIVE = FORBIDDEN - {"time", "threading"}


# Each project package, and the project packages above it in the layering.
LAYERS = ["topics", "sessions", "views", "mqtt", "canopy", "replication", "fanout", "history", "actors", "cluster"]
ABOVE = {
    "topics": LAYERS[1:],
    "sessions": LAYERS[2:],
    "views": LAYERS[3:],
    "mqtt": LAYERS[4:],
    "canopy": LAYERS[5:],
    "replication": ["actors", "cluster"],
    "fanout": ["actors", "cluster"],
    "history": ["actors", "cluster"],
    "actors": ["cluster"],
}
# What only the server extra installs: the client may not import it, even lazily.
SERVER_ONLY = {"ray", "pyspark", "py4j", "lark", "jsonpatch", "jsonpointer"}
CLIENT_MODULES = ["canopy", "canopy.client", "canopy.sync", "canopy.cli", "canopy.errors", "canopy.protocol",
                  "canopy.constraints", "canopy.demo", "cluster.cli"]


def _modules(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


class Import(NamedTuple):
    where: str  # FILE:LINE
    module: str

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def _imports(package: str) -> list[Import]:
    """Every absolute import in ``package``, at any depth (a lazy import counts)."""
    return [i for file in _modules(package) for i in _file_imports(file)]


def _file_imports(file: pathlib.Path) -> list[Import]:
    found: list[Import] = []
    where = str(file.relative_to(ROOT))
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found.extend(Import(f"{where}:{node.lineno}", a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from cluster import config`` uses cluster.config
            found.extend(Import(f"{where}:{node.lineno}", f"{node.module}.{a.name}") for a in node.names)
    return found


@pytest.mark.parametrize("package", PURE)
def test_no_forbidden_import_statements(package: str) -> None:
    offenders = [f"{i.where} imports {i.module}" for i in _imports(package) if i.top in FORBIDDEN]
    for file in _modules(package):
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                offenders.append(f"{file.relative_to(ROOT)}:{node.lineno} calls open()")
    assert offenders == []


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_import_no_io_and_only_the_pure_core(module: str) -> None:
    """No clock, no file system, no journal: only the standard library's pure parts, ``topics``
    and the other pure modules (``replication.placement`` names ``replication.replica``'s roles)."""
    file = ROOT / module
    project = set(LAYERS) - {"topics"}
    pure = {m.removesuffix(".py").replace("/", ".") for m in PURE_MODULES}
    offenders = [f"{i.where} imports {i.module}" for i in _file_imports(file)
                 if i.top in FORBIDDEN | {"os", "pathlib", "shutil", "io", "secrets", "random"} | project
                 and not any(i.module == p or i.module.startswith(p + ".") for p in pure)]
    offenders += [f"{module}:{node.lineno} calls open()" for node in ast.walk(ast.parse(file.read_text()))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"]
    assert offenders == []


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_nothing_imports_a_layer_above_it(package: str) -> None:
    forbidden = set(ABOVE[package]) | ({"ray", "pyspark", "py4j"} if package == "canopy" else set())
    offenders = [f"{i.where} imports {i.module}" for i in _imports(package) if i.top in forbidden]
    assert offenders == []


def test_the_client_needs_only_the_base_dependencies() -> None:
    """What importing the client loads comes from the standard library, the project or a base dependency."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {re.match(r"[A-Za-z0-9._-]+", req).group().lower() for req in project["dependencies"]}  # type: ignore[union-attr]
    code = (
        "import importlib, importlib.metadata, json, sys\n"
        "before = set(sys.modules)\n"
        f"for name in {CLIENT_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "import canopy\n"
        "canopy.connect, canopy.connect_sync, canopy.TopicType\n"
        "owners = importlib.metadata.packages_distributions()\n"
        "loaded = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(json.dumps({m: owners.get(m, []) for m in sorted(loaded)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    loaded: dict[str, list[str]] = json.loads(out.stdout)
    server = sorted(m for m in loaded if m in SERVER_ONLY or m in LAYERS[5:-1] or m in ("sessions", "views", "mqtt"))
    assert server == [], f"the client imports server-side modules: {server}"
    foreign = {m: d for m, d in loaded.items() if d and not {x.lower() for x in d} & (base | {"canopy"})}
    assert foreign == {}, f"the client imports modules outside its base dependencies {sorted(base)}: {foreign}"


def test_importing_the_pure_packages_loads_no_forbidden_module() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import topics, topics.openajax, topics.conversions, topics.timeseries, "
        "topics.sublist, topics.tree, sessions, views\n"
        "import pkgutil, importlib\n"
        "for pkg in (topics, sessions, views):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        f"bad = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in {sorted(TRANSITIVE)!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "", f"pure packages pulled in: {out.stdout.strip()}"
