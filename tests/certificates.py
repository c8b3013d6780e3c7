"""Test certificates made with the ``openssl`` command line: a CA and certificates it signs.

::

    ca = CertificateAuthority.make(tmp_path)
    server = ca.issue(tmp_path, "server", ["DNS:localhost", "IP:127.0.0.1"])
    server.cert, server.key  # PEM files

Keys are P-256 (fast to make); certificates carry the extensions strict
X.509 verification asks for (basic constraints, key usage, key identifiers).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str | Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line is needed to make test certificates")
    done = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"openssl {' '.join(map(str, args))} failed:\n{done.stderr}")


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass(frozen=True)
class CertificateAuthority:
    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: Path, name: str = "ca") -> CertificateAuthority:
        cert, key = directory / f"{name}.pem", directory / f"{name}.key"
        _openssl(
            "req", "-x509", *_KEY, "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN=canopy test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-addext", "subjectKeyIdentifier=hash",
        )
        return cls(cert, key)

    def issue(self, directory: Path, name: str, alt_names: list[str]) -> Issued:
        """A server certificate for ``alt_names`` (``DNS:host``, ``IP:address``) and its key."""
        cert, key, request = directory / f"{name}.pem", directory / f"{name}.key", directory / f"{name}.csr"
        extensions = directory / f"{name}.ext"
        extensions.write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid\n"
            f"subjectAltName={','.join(alt_names)}\n"
        )
        _openssl("req", "-new", *_KEY, "-keyout", key, "-out", request, "-subj", f"/CN={name}")
        _openssl(
            "x509", "-req", "-in", request, "-CA", self.cert, "-CAkey", self.key,
            "-set_serial", str(secrets.randbelow(2**62) + 1), "-days", "2", "-out", cert, "-extfile", extensions,
        )
        return Issued(cert, key)


def encrypt_key(key: Path, out: Path, password: str) -> Path:
    """``key`` encrypted with ``password`` (AES-256), written to ``out``."""
    _openssl("pkey", "-in", key, "-out", out, "-aes256", "-passout", f"pass:{password}")
    return out
