"""Where ``canopy serve`` works, and how it reads the relative paths of its settings
(serve itself, against a real Ray: tests/e2e/test_serve.py and test_serve_workdir.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cluster import serve
from cluster.config import ConfigError, ServerConfig


def test_serve_works_where_canopys_packages_are_and_goes_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with serve._working_in(serve.CODE_ROOT):
        assert Path.cwd().resolve() == serve.CODE_ROOT
        assert (Path.cwd() / "cluster" / "serve.py").is_file() and (Path.cwd() / "sessions").is_dir()
    assert Path.cwd().resolve() == tmp_path.resolve()


def test_relative_paths_are_taken_from_where_serve_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "keys/token")
    absolute = serve._absolute_paths(ServerConfig(data_dir="d", history_dir="h"))
    here = tmp_path.resolve()
    assert (absolute.data_dir, absolute.history_dir) == (str(here / "d"), str(here / "h"))
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(here / "keys" / "token")
    assert serve._absolute_paths(ServerConfig(history_dir="s3://bucket/h")).history_dir == "s3://bucket/h"
    assert serve._absolute_paths(ServerConfig()).history_dir is None  # <data_dir>/history
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "~/token")  # not relative to the working directory: as given
    serve._absolute_paths(ServerConfig())
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == "~/token"


def test_a_tls_file_that_cannot_serve_is_a_configuration_error(tmp_path: Path) -> None:
    """What ``canopy serve`` reports as one line, naming the file (the checks: tests/unit/actors/test_tls.py)."""
    missing = tmp_path / "nowhere.pem"
    with pytest.raises(ConfigError, match=f"^{re.escape(f'tls_cert {missing}: no such file')}$"):
        serve._checked_tls(ServerConfig(tls_cert=str(missing), tls_key=str(tmp_path / "server.key")))
    config = ServerConfig()
    assert serve._checked_tls(config) is config  # without TLS nothing is loaded
