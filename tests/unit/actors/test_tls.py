"""The gateway's TLS files: checked early, every fault named by its file."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest

from actors import tls
from tests.certificates import CertificateAuthority, Issued, encrypt_key


@dataclass(frozen=True)
class Files:
    ca: CertificateAuthority
    server: Issued
    other: Issued


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    directory = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority.make(directory)
    server = ca.issue(directory, "server", ["DNS:localhost", "IP:127.0.0.1"])
    return Files(ca, server, ca.issue(directory, "other", ["DNS:other"]))


def refused(cert: Path | str, key: Path | str) -> str:
    with pytest.raises(tls.TLSConfigError) as caught:
        tls.check(str(cert), str(key))
    return str(caught.value)


def test_a_matching_pair_passes_and_the_paths_become_absolute(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(files.server.cert.parent)
    cert, key = tls.check(files.server.cert.name, files.server.key.name)
    assert (cert, key) == (str(files.server.cert), str(files.server.key))
    context = tls.context_for(cert, key)
    assert isinstance(context, ssl.SSLContext)
    assert context.minimum_version is ssl.TLSVersion.TLSv1_2


def test_without_tls_nothing_is_loaded() -> None:
    assert tls.context_for(None, None) is None


def test_a_missing_file_is_named(files: Files, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    assert refused(missing, files.server.key) == f"tls_cert {missing}: no such file"
    assert refused(files.server.cert, missing) == f"tls_key {missing}: no such file"


def test_a_key_that_does_not_match_the_certificate(files: Files) -> None:
    message = refused(files.server.cert, files.other.key)
    assert message == f"tls_key {files.other.key} does not match the certificate in tls_cert {files.server.cert}"


def test_files_that_are_not_what_they_should_be(files: Files, tmp_path: Path) -> None:
    assert refused(files.server.key, files.server.key) == f"tls_cert {files.server.key} holds no PEM certificate"
    assert refused(files.server.cert, files.server.cert) == f"tls_key {files.server.cert} holds no PEM private key"
    assert refused(tmp_path, files.server.key) == f"tls_cert {tmp_path} is a directory, not a PEM file"


def test_an_encrypted_key_is_refused_without_a_prompt(files: Files, tmp_path: Path) -> None:
    locked = encrypt_key(files.server.key, tmp_path / "locked.key", "a password")
    assert "is encrypted" in refused(files.server.cert, locked)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_named(files: Files, tmp_path: Path) -> None:
    hidden = tmp_path / "hidden.key"
    hidden.write_bytes(files.server.key.read_bytes())
    hidden.chmod(0)
    assert refused(files.server.cert, hidden) == f"tls_key {hidden} cannot be read: Permission denied"
