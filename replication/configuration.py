"""Cluster configuration kept in the data directory.

The security store, the branch mapping tables and the topic views are *configuration*: they
survive a restart of ``canopy serve``. Each lives in one JSON document in the
data directory, written atomically (a temporary file renamed over the old
one, after an fsync), so a crash leaves either the old or the new document,
never a torn one. The cluster issue replaces this with a replicated log; the
documents' shapes (:meth:`SecurityStore.to_dict`,
:meth:`SessionTrees.to_wire`) stay the interface.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

SECURITY_FILE = "security.json"
SESSION_TREES_FILE = "session_trees.json"
VIEWS_FILE = "views.json"


class ConfigurationFile:
    def __init__(self, data_dir: str | os.PathLike[str], name: str) -> None:
        self.path = Path(data_dir) / name

    def load(self) -> Any | None:
        """The stored document, or ``None`` when there is none yet."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return json.loads(text)

    def save(self, document: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=self.path.name, dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(document, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)  # it holds password hashes
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
