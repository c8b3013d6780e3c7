"""The web console at ``/console`` on every gateway's port: static files, and nothing else.

``GET /console``, ``/console/`` and ``/console/index.html`` answer the console's page,
``/console/<file>`` its other files (``console/static/``), and ``/console/client/<file>.js``
the JavaScript client's modules: from ``console/static/client/`` when a build put them there
(the image does), else from the checkout's ``clients/js/src/``. The page then opens a canopy
session over the same origin's WebSocket (``ws(s)://host/``) and does everything through it.
:meth:`Console.serve` is sans-I/O but for reading the file; ``Endpoints.handle``
(:mod:`actors.http_endpoints`) hands it every plain HTTP request under ``/console``.

What is served, and how (:class:`Refused` says why something is not):

* only ``GET`` (405 with ``Allow: GET``); a request target over :data:`MAX_TARGET` bytes is 414;
* the path below ``/console/`` is at most :data:`MAX_DEPTH` segments, each letters, digits,
  ``_``, ``-`` and ``.`` starting with a letter or digit, so no ``..``, no percent-encoding (no
  encoded slash, dot or NUL), no backslash (400); its extension must be one of :data:`TYPES`,
  and the file must exist as a regular file of at most :data:`MAX_FILE` bytes whose resolved
  path lies inside its directory (a symlink out of it is not followed) (404 otherwise);
* every answer carries :data:`CSP` (no inline script or style, nothing from or to another
  origin, no framing, no form posting), ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer`` and ``Cache-Control: no-cache`` with an ``ETag`` (a
  revalidation answers 304), and closes the connection as every plain HTTP answer does;
* the client's modules alone may be imported by pages of other origins
  (``Access-Control-Allow-Origin: *``, ``Cross-Origin-Resource-Policy: cross-origin``): they are
  the same public code as ``clients/js/src/``, and a request for them carries no credentials.

**Authority.** The console holds none: its files are public, and it logs in by putting the
principal and password in the HELLO of the WebSocket session it opens to the gateway; they go
into no URL, cookie or storage, and the page forgets them once the session is open. Every
action is a request over that authenticated session, and the gateway authorizes each one as it
does any client's (:mod:`sessions.authorization`). There is no cookie, basic-auth realm or other
ambient authority for another site's page to ride, so there is nothing to forge a request with
(CSRF): a page elsewhere may open a WebSocket to the gateway too, but gets only what its own
credentials, or an anonymous session, allow.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

import console

#: where the console is served
PREFIX = "/console"
#: the longest request target (path and query) answered
MAX_TARGET = 512
#: the deepest path below ``/console/``
MAX_DEPTH = 4
#: the largest file served
MAX_FILE = 2 * 1024 * 1024
#: the page that ``/console`` and ``/console/`` answer
INDEX = "index.html"
#: the client's modules are under this first segment
CLIENT = "client"
#: what is served, by extension
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: the headers of every answer under /console
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)
#: the headers of the JavaScript client's modules: the same, but any page may import them (they are
#: public code, fetched without credentials; a module script from another origin needs CORS)
SHARED_HEADERS = (
    *(h for h in SECURITY_HEADERS if h[0] != "Cross-Origin-Resource-Policy"),
    ("Cross-Origin-Resource-Policy", "cross-origin"),
    ("Access-Control-Allow-Origin", "*"),
)
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")


def is_console(path: str) -> bool:
    """Whether a request path (without its query) is the console's."""
    return path == PREFIX or path.startswith(PREFIX + "/")


class Refused(Exception):
    """A request the console does not answer with a file: the HTTP status and why."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def _target_path(request: Request) -> list[str]:
    """The segments below ``/console/`` a request names (``[]`` for the page itself), or
    :class:`Refused`."""
    if request.method != "GET":
        raise Refused(405, "Method Not Allowed", f"{request.method} is not served here: only GET")
    if len(request.path) > MAX_TARGET:
        raise Refused(414, "URI Too Long", f"a request target of at most {MAX_TARGET} bytes")
    path = request.path.split("?", 1)[0].split("#", 1)[0]
    if not is_console(path):
        raise Refused(404, "Not Found", "not the console")
    rest = path[len(PREFIX) + 1:]  # "" for /console and /console/
    if not rest:
        return []
    segments = rest.split("/")
    if len(segments) > MAX_DEPTH:
        raise Refused(404, "Not Found", "no such file")
    for segment in segments:
        if not _SEGMENT.match(segment) or ".." in segment:
            raise Refused(400, "Bad Request", "a path of plain names: letters, digits, '_', '-' and '.'")
    return segments


class Console:
    """The console's files: ``static`` (its own) and ``client`` (the JavaScript client's
    modules; the bundled copy when there is one, else the checkout's)."""

    def __init__(self, static: Path | None = None, client: Path | None = None) -> None:
        self.static = (static or console.STATIC).resolve()
        if client is None:
            client = console.BUNDLED_CLIENT if console.BUNDLED_CLIENT.is_dir() else console.CHECKOUT_CLIENT
        self.client = client.resolve()

    def serve(self, request: Request) -> Response:
        """The answer to a plain HTTP request for a path under ``/console``."""
        try:
            segments = _target_path(request)
            file = self._file(segments or [INDEX])
            body = _read(file)
        except Refused as refused:
            return _answer(refused.status, refused.reason, f"{refused.message}\n".encode(),
                           "text/plain; charset=utf-8", cache="no-store")
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        shared = segments[:1] == [CLIENT]
        if etag in (tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")):
            return _answer(304, "Not Modified", b"", None, etag=etag, shared=shared)
        return _answer(200, "OK", body, TYPES[file.suffix], etag=etag, shared=shared)

    def _file(self, segments: list[str]) -> Path:
        root = self.static
        if segments[0] == CLIENT and len(segments) > 1:
            root, segments = self.client, segments[1:]
        suffix = Path(segments[-1]).suffix
        if suffix not in TYPES:
            raise Refused(404, "Not Found", "no such file")
        try:
            file = root.joinpath(*segments).resolve(strict=True)
        except (OSError, RuntimeError):
            raise Refused(404, "Not Found", "no such file") from None
        if not file.is_relative_to(root) or file.suffix != suffix or not file.is_file():
            raise Refused(404, "Not Found", "no such file")
        return file


def _read(file: Path) -> bytes:
    try:
        with file.open("rb") as f:
            body = f.read(MAX_FILE + 1)
    except OSError:
        raise Refused(404, "Not Found", "no such file") from None
    if len(body) > MAX_FILE:
        raise Refused(404, "Not Found", "no such file")
    return body


def _answer(status: int, reason: str, body: bytes, content_type: str | None, *, etag: str | None = None,
            cache: str = "no-cache", shared: bool = False) -> Response:
    headers = Headers([*(SHARED_HEADERS if shared else SECURITY_HEADERS), ("Cache-Control", cache),
                       ("Connection", "close")])
    if content_type is not None:
        headers["Content-Type"] = content_type
        headers["Content-Length"] = str(len(body))
    if etag is not None:
        headers["ETag"] = etag
    if status == 405:
        headers["Allow"] = "GET"
    return Response(status, reason, headers, body)


#: the console every gateway serves
CONSOLE = Console()
