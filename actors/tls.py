"""TLS for the gateways: the server's SSL context, and an early check of its files.

The settings ``tls_cert`` (a PEM certificate chain, the server's certificate
first) and ``tls_key`` (its unencrypted PEM private key) come both or neither
(:mod:`cluster.config`); with them every gateway serves ``wss://`` only, TLS 1.2
or later.

``canopy serve`` calls :func:`check` before it starts Ray, so a file that is
missing, unreadable, not PEM or a key that does not match the certificate
stops the start with a :class:`TLSConfigError` naming the file (serve reports
it as the configuration error it is); each gateway then builds its context
with :func:`server_context`, which raises the same errors::

    ValueError
    └── TLSConfigError     a certificate or key file that cannot serve TLS

This is a leaf module: no Ray, and it knows the settings only by the two paths.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import NoReturn

__all__ = ["TLSConfigError", "check", "context_for", "server_context"]


class TLSConfigError(ValueError):
    """A certificate or key file that cannot serve TLS; the message names the file."""


def check(cert: str, key: str) -> tuple[str, str]:
    """Load the certificate chain ``cert`` and the key ``key`` now, or raise :class:`TLSConfigError`.

    Returns both paths made absolute: the gateways open them in other
    processes, whose working directory may differ.
    """
    cert, key = str(Path(cert).resolve()), str(Path(key).resolve())
    server_context(cert, key)
    return cert, key


def context_for(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The server context for the settings ``tls_cert`` and ``tls_key`` (a gateway's), or None without TLS."""
    if cert is None or key is None:
        return None
    return server_context(cert, key)


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context for the chain in ``cert`` and the key in ``key`` (TLS 1.2+).

    Raises :class:`TLSConfigError` naming the file at fault.
    """
    cert_text = _read(cert, "tls_cert")
    _read(key, "tls_key")
    try:  # parse the chain on its own, so that a bad certificate is not blamed on the key
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=cert_text)
    except ssl.SSLError:
        raise TLSConfigError(f"tls_cert {cert} holds no PEM certificate") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2

    def encrypted() -> NoReturn:  # called instead of prompting on the terminal
        raise TLSConfigError(
            f"tls_key {key} is encrypted; canopy needs an unencrypted key (protect it with file permissions)"
        )

    try:
        context.load_cert_chain(cert, key, password=encrypted)
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            raise TLSConfigError(f"tls_key {key} does not match the certificate in tls_cert {cert}") from None
        detail = f" ({e.reason})" if e.reason else ""
        raise TLSConfigError(f"tls_key {key} holds no PEM private key{detail}") from None
    except OSError as e:  # the file changed under us
        raise TLSConfigError(f"cannot load tls_cert {cert} / tls_key {key}: {e}") from None
    return context


def _read(path: str, setting: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        raise TLSConfigError(f"{setting} {path}: no such file") from None
    except IsADirectoryError:
        raise TLSConfigError(f"{setting} {path} is a directory, not a PEM file") from None
    except OSError as e:
        raise TLSConfigError(f"{setting} {path} cannot be read: {e.strerror or e}") from None
