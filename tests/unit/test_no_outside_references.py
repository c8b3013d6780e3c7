"""The repository stands on its own: no tracked Python or Markdown file points outside it.

The design lives in ``ARCHITECTURE.md`` and the features are named in the project's own
words, so nothing may send a reader to the workspace directory beside the repository or to the
numbered reference documents it holds. The patterns are spelled in pieces, so that this file
passes its own check.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
THIS = pathlib.Path(__file__).resolve().relative_to(ROOT).as_posix()

FORBIDDEN = [
    ("a path outside the repository", re.compile(re.escape("../" + "shared"))),
    ("a numbered reference document", re.compile("se" + r"ed 00[0-9]", re.IGNORECASE)),
]


def _tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", "*.py", "*.md"], cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()
    return sorted(f for f in out.split("\0") if f)


def test_the_check_sees_the_repository() -> None:
    files = _tracked()
    assert "README.md" in files and THIS in files  # this file too: it names nothing outside


def test_no_tracked_file_refers_outside_the_repository() -> None:
    offenders = []
    for name in _tracked():
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet in the index
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN:
                if pattern.search(line):
                    offenders.append(f"{name}:{number}: {what}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)
