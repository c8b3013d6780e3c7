"""The pure packages import no Ray, no asyncio, no PySpark and do no I/O."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PURE = ["topics", "sessions", "views"]
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


def _modules(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PURE)
def test_no_forbidden_import_statements(package: str) -> None:
    offenders = []
    for file in _modules(package):
        tree = ast.parse(file.read_text(), str(file))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{file.relative_to(ROOT)}:{node.lineno} imports {name}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                offenders.append(f"{file.relative_to(ROOT)}:{node.lineno} calls open()")
    assert offenders == []


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
