"""The web console's static files (actors/console.py) without a gateway: which paths are served
and which refused, the headers every answer carries, and the files themselves (no inline script
or style, nothing that parses HTML from data, every module they import there)."""

from __future__ import annotations

import re
import types
from html.parser import HTMLParser
from pathlib import Path

import pytest
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

import console
from actors import console as serving
from actors.console import CSP, Console
from actors.http_endpoints import Endpoints


def get(site: Console, path: str, method: str = "GET", **headers: str) -> Response:
    return site.serve(Request(path, Headers([("Host", "x"), *headers.items()]), method))


@pytest.fixture
def site(tmp_path: Path) -> Console:
    static, client = tmp_path / "static", tmp_path / "client"
    static.mkdir()
    client.mkdir()
    (static / "index.html").write_text("<!doctype html><title>page</title>")
    (static / "app.js").write_text("export const app = 1;")
    (static / "style.css").write_text("body { margin: 0 }")
    (static / "notes.txt").write_text("not served: an unknown extension")
    (static / "sub").mkdir()
    (static / "sub" / "deep.js").write_text("export const deep = 1;")
    (client / "index.js").write_text("export const client = 1;")
    (tmp_path / "secret.js").write_text("export const secret = 1;")  # beside the directories, not in them
    (static / "escape.js").symlink_to(tmp_path / "secret.js")
    return Console(static, client)


def test_the_page_answers_at_every_spelling_of_the_console(site: Console) -> None:
    for path in ("/console", "/console/", "/console/index.html", "/console/?x=1", "/console/index.html?v=2"):
        answer = get(site, path)
        assert answer.status_code == 200, path
        assert answer.headers["Content-Type"] == "text/html; charset=utf-8"
        assert answer.body == b"<!doctype html><title>page</title>"


@pytest.mark.parametrize(("path", "content_type", "body"), [
    ("/console/app.js", "text/javascript; charset=utf-8", b"export const app = 1;"),
    ("/console/style.css", "text/css; charset=utf-8", b"body { margin: 0 }"),
    ("/console/sub/deep.js", "text/javascript; charset=utf-8", b"export const deep = 1;"),
    ("/console/client/index.js", "text/javascript; charset=utf-8", b"export const client = 1;"),
])
def test_files_are_served_with_their_type(site: Console, path: str, content_type: str, body: bytes) -> None:
    answer = get(site, path)
    assert (answer.status_code, answer.headers["Content-Type"], answer.body) == (200, content_type, body)
    assert answer.headers["Content-Length"] == str(len(body))


def test_every_answer_carries_the_security_headers(site: Console) -> None:
    for path, status in (("/console/app.js", 200), ("/console/nothing.js", 404), ("/console/../x", 400)):
        answer = get(site, path)
        assert answer.status_code == status
        headers = answer.headers
        assert headers["Content-Security-Policy"] == CSP
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "no-referrer"
        assert headers["X-Frame-Options"] == "DENY"
        assert headers["Connection"] == "close"
        assert headers["Cache-Control"] in ("no-cache", "no-store")
    for directive in ("default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
                      "frame-ancestors 'none'", "form-action 'none'", "base-uri 'none'"):
        assert directive in CSP
    assert "unsafe" not in CSP


def test_only_the_client_s_modules_may_be_imported_from_other_origins(site: Console) -> None:
    shared = get(site, "/console/client/index.js").headers
    assert shared["Access-Control-Allow-Origin"] == "*" and shared["Cross-Origin-Resource-Policy"] == "cross-origin"
    assert shared["Content-Security-Policy"] == CSP and shared["X-Content-Type-Options"] == "nosniff"
    for path in ("/console/", "/console/app.js", "/console/client/none.js"):
        own = get(site, path).headers
        assert "Access-Control-Allow-Origin" not in own and own["Cross-Origin-Resource-Policy"] == "same-origin", path


def test_a_revalidation_with_the_same_etag_is_not_modified(site: Console) -> None:
    first = get(site, "/console/app.js")
    etag = first.headers["ETag"]
    again = get(site, "/console/app.js", **{"If-None-Match": f'"other", {etag}'})
    assert again.status_code == 304 and again.body == b"" and again.headers["ETag"] == etag
    assert get(site, "/console/app.js", **{"If-None-Match": '"other"'}).status_code == 200


@pytest.mark.parametrize("path", [
    "/console/../pyproject.toml", "/console/..", "/console/client/../../secret.js", "/console/%2e%2e/secret.js",
    "/console/client%2Findex.js", "/console/app.js%00.css", "/console/.hidden.js", "/console/./app.js",
    "/console//app.js", "/console/sub\\deep.js", "/console/a..b.js", "/console/app.js/", "/console/-x.js",
])
def test_traversal_and_encoded_names_are_refused(site: Console, path: str) -> None:
    answer = get(site, path)
    assert answer.status_code == 400, (path, answer.status_code)
    assert b"plain names" in answer.body


@pytest.mark.parametrize("path", [
    "/console/nothing.js", "/console/notes.txt", "/console/sub", "/console/client", "/console/client/none.js",
    "/console/escape.js", "/console/a/b/c/d/e.js",
])
def test_only_known_files_inside_the_directories_are_served(site: Console, path: str) -> None:
    assert get(site, path).status_code == 404, path


def test_bounds_and_methods(site: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    long = "/console/" + "a" * serving.MAX_TARGET + ".js"
    assert get(site, long).status_code == 414
    for method in ("POST", "HEAD", "PUT", "DELETE", "OPTIONS"):
        answer = get(site, "/console/app.js", method)
        assert answer.status_code == 405 and answer.headers["Allow"] == "GET", method
    monkeypatch.setattr(serving, "MAX_FILE", 4)
    assert get(site, "/console/app.js").status_code == 404  # over the size limit: not served


def test_the_gateway_hands_the_console_its_paths_and_nothing_else(monkeypatch: pytest.MonkeyPatch, site: Console) -> None:
    monkeypatch.setattr(serving, "CONSOLE", site)
    endpoints = Endpoints(types.SimpleNamespace(), anonymous=True)
    answer = endpoints.handle(Request("/console/app.js", Headers([("Host", "x")])), "127.0.0.1", lambda: True)
    assert isinstance(answer, Response) and answer.status_code == 200 and answer.body == b"export const app = 1;"
    assert endpoints.requests["/console"] == 1
    for path in ("/consolex", "/app.js", "/x/console/app.js"):
        other = endpoints.handle(Request(path, Headers([("Host", "x")])), "127.0.0.1", lambda: True)
        assert isinstance(other, Response) and other.status_code == 404 and b"page" not in other.body


# -- the console's own files ----------------------------------------------------------------------

STATIC = console.STATIC
SCRIPTS = sorted(STATIC.glob("*.js"))


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.urls: list[str] = []
        self._tag = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        names = dict(attrs)
        for name in names:
            if name.startswith("on") or name == "style":
                self.problems.append(f"<{tag} {name}=...>")
        if tag == "style":
            self.problems.append("<style>")
        if tag == "script" and not names.get("src"):
            self.problems.append("<script> without src")
        for name in ("src", "href"):
            value = names.get(name)
            if value and not value.startswith(("data:", "#")):
                self.urls.append(value)

    def handle_data(self, data: str) -> None:
        if self._tag == "script" and data.strip():
            self.problems.append("inline script text")


def test_the_page_has_no_inline_script_or_style_and_links_only_its_own_files() -> None:
    markup = _Markup()
    markup.feed((STATIC / "index.html").read_text(encoding="utf-8"))
    assert markup.problems == []
    site = Console()
    for url in markup.urls:
        assert url.startswith("/console/"), url
        assert get(site, url).status_code == 200, url


def test_the_scripts_never_parse_html_from_data_and_every_module_they_import_is_served() -> None:
    assert {p.name for p in SCRIPTS} >= {"app.js", "dom.js", "topics.js", "views.js", "pages.js", "cluster.js", "chart.js"}
    site = Console()
    forbidden = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
                           r"setAttribute\(\s*['\"]style|localStorage|sessionStorage|document\.cookie")
    for script in SCRIPTS:
        text = script.read_text(encoding="utf-8")
        assert not forbidden.search(text), f"{script.name}: {forbidden.search(text)}"
        assert len(text.splitlines()) <= 600, f"{script.name} has grown past 600 lines: split it"
        for module in re.findall(r"""(?:from|import)\s*\(?\s*['"](\./[^'"]+)['"]""", text):
            path = "/console/" + module.removeprefix("./")
            if path.startswith("/console/client/") and not site.client.joinpath(module.removeprefix("./client/")).is_file():
                pytest.skip(f"the JavaScript client is not where the console looks for it: {site.client}")
            assert get(site, path).status_code == 200, f"{script.name} imports {module}"


def test_the_console_s_functions_under_node() -> None:
    """console_functions.test.mjs: what the pages compute (selectors, typed values, error
    positions, rates), under ``node --test``; without a node it skips, loudly."""
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("NODE IS NOT INSTALLED (apt-get install nodejs): the console's functions go untested outside a browser")
    script = Path(__file__).with_name("console_functions.test.mjs")
    done = subprocess.run([node, "--test", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
