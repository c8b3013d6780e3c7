"""The web console (console/static/, served by actors/console.py) in a real browser: Debian's
chromium, headless, driven by selenium through chromium-driver, against a real 3-node
`canopy serve --local-nodes 3`.

One cluster and one browser serve the whole module (the tests run in order; the last kills a
node). A user logs in, watches a value change live when a Python client sets it, sees a view's
syntax error at its position and then its reference topics, reads the security, session tree,
handler and fan-out pages, closes another session, and watches the cluster page show a failover.
Every wait polls with a deadline. A screenshot of each page is kept under the module's temporary
directory; `console-topics.png` and `console-cluster.png` are copied to docs/images/ for the
README when missing there or when ``CANOPY_CONSOLE_SCREENSHOTS=update``.

Without chromium and chromedriver (installed from Debian here when missing, as `.ci/run` does)
the module skips, loudly.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import canopy
from tests.conftest import wait_for
from tests.e2e.conftest import ADMIN, Server, serving
from tests.e2e.installs import apt_install

UNTESTED = "the web console goes untested in a browser"
ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
#: seconds: Ray declares a killed node dead within ~5 s here; two busy cores make the rest slow
FAILOVER = 90.0
WAIT = 30.0
PREFIX = "console-e2e"


def _binaries() -> tuple[str, str]:
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        apt_install("chromium", "chromium-driver")
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("CHROMIUM/CHROMEDRIVER ARE NOT INSTALLED (apt-get install chromium chromium-driver; .ci/run "
                    f"installs them): {UNTESTED}")
    return chromium, driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A headless chromium under selenium, for the whole module."""
    chromium, chromedriver = _binaries()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip(f"SELENIUM IS NOT INSTALLED (pip install -e '.[test]'): {UNTESTED}")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900",
                 "--no-first-run", "--disable-extensions", "--disable-background-networking",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    _binaries()  # skip before paying for a cluster
    yield from serving(tmp_path_factory, "console", "--local-nodes", "3", "--partitions", "2", own_session=True,
                       timeout=180)


@pytest.fixture(scope="module")
def admin(cluster: Server) -> Iterator[Any]:
    """A Python client's session beside the browser's."""
    with canopy.connect_sync(cluster.url, *ADMIN) as session:
        yield session


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("console-screenshots")
    print(f"[console] screenshots in {where}")
    return where


def base(cluster: Server) -> str:
    return f"http://127.0.0.1:{cluster.port}/console/"


def until(driver: Any, check: Callable[[Any], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll ``check(driver)`` until it is truthy (a vanished element counts as not yet)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.05,
                             ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(check)
    except TimeoutException:
        shown = driver.execute_script("return document.body.innerText")[-3000:]
        logged = [entry["message"] for entry in driver.get_log("browser")][-20:]
        raise AssertionError(f"waited {timeout:g} s for {what}; the page shows:\n{shown}\nand logged:\n"
                             + "\n".join(logged)) from None


def css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def all_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def go(driver: Any, page: str) -> None:
    driver.execute_script("location.hash = arguments[0]", page)
    name = page.split(":", 1)[0]
    until(driver, lambda d: css(d, f"#page-{name}").is_displayed(), f"the {name} page")


def shoot(driver: Any, shots: Path, name: str, readme: str | None = None) -> None:
    path = shots / f"{name}.png"
    assert driver.save_screenshot(str(path)), path
    if readme is not None and (not (IMAGES / readme).exists() or os.environ.get("CANOPY_CONSOLE_SCREENSHOTS") == "update"):
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, IMAGES / readme)


def problems(driver: Any) -> list[str]:
    """What the page logged that means a bug: script errors, Content-Security-Policy refusals."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry["level"] == "SEVERE" or "Content Security Policy" in entry["message"]]


def log_in(driver: Any, cluster: Server, principal: str, password: str, hash_: str = "") -> None:
    driver.get("about:blank")  # a load of its own, even when only the hash differs
    driver.get(base(cluster) + hash_)
    until(driver, lambda d: d.execute_script("return document.documentElement.dataset.ready"), "the console to load")
    for field, text in (("#principal", principal), ("#password", password)):
        css(driver, field).clear()
        css(driver, field).send_keys(text)
    css(driver, "#login-button").click()


@pytest.fixture
def console(browser: Any, cluster: Server) -> Any:
    """The browser with the console logged in as the administrator (logging in if it is not)."""
    if css_state(browser) != "connected":
        log_in(browser, cluster, *ADMIN)
        until(browser, lambda d: css_state(d) == "connected", "the console to log in")
    return browser


def css_state(driver: Any) -> str | None:
    try:
        return str(css(driver, "#connection").get_attribute("data-state"))
    except Exception:
        return None


def test_log_in_and_watch_a_value_change_live(browser: Any, cluster: Server, admin: Any, shots: Path) -> None:
    path = f"{PREFIX}/live/value"
    admin.topics.add_and_set(path, 1.5, "DOUBLE")
    hostile = '<img src=x onerror="document.title=\'pwned\'"><b>bold</b>'
    admin.topics.add_and_set(f"{PREFIX}/live/html", hostile, "STRING")

    log_in(browser, cluster, "nobody", "wrong-password")
    refused = until(browser, lambda d: css(d, "#login-status").get_attribute("data-state") == "error"
                    and css(d, "#login-status").text, "the refused login to say why")
    assert "AUTHENTICATION" in refused and css(browser, "#password").get_attribute("value") == ""

    started = time.monotonic()
    log_in(browser, cluster, *ADMIN, f"#topics:{path}")
    until(browser, lambda d: css(d, "#topic-value").text == "1.5", "the topic's value")
    wall_ms = (time.monotonic() - started) * 1000
    in_page = browser.execute_script("return document.documentElement.dataset.firstLiveValue")
    print(f"[console] time to first live value: {in_page} ms from navigation start (page load, login, "
          f"WebSocket, subscription), {wall_ms:.0f} ms wall clock with selenium's typing")
    assert "password" not in browser.current_url and ADMIN[1] not in browser.current_url
    assert css(browser, "#password").get_attribute("value") == ""
    assert browser.execute_script("return [localStorage.length, sessionStorage.length, document.cookie]") == [0, 0, ""]

    for value, shown in ((2.25, "2.25"), (-7.0, "-7"), (1e-3, "0.001")):
        admin.topics.set(path, value)
        until(browser, lambda d: css(d, "#topic-value").text == shown, f"the console to show {shown}")
    until(browser, lambda d: css(d, f"li[data-path='{path}'] .value").text == "0.001", "the tree row's live value")

    # text from the server is text: nothing in it becomes markup
    row = until(browser, lambda d: css(d, f"li[data-path='{PREFIX}/live/html'] .value"), "the hostile value's row")
    until(browser, lambda d: row.text == hostile, "the hostile value, as text")
    assert all_css(browser, "#topic-tree img, #topic-tree b") == [] and browser.title == "canopy console"
    # and the Content-Security-Policy holds: an inline script does not run
    browser.execute_script("const s = document.createElement('script'); s.textContent = 'window.injected = 1';"
                           "document.body.appendChild(s);")
    assert browser.execute_script("return window.injected === undefined")
    refusals = [m for m in problems(browser) if "Content Security Policy" in m]
    assert refusals and all("inline script" in m for m in refusals), refusals
    shoot(browser, shots, "topics")


def test_a_view_s_error_shows_where_and_its_reference_topics_show_in_the_tree(
    console: Any, admin: Any, shots: Path
) -> None:
    admin.topics.add_and_set(f"{PREFIX}/source/a", "alpha", "STRING")
    admin.topics.add_and_set(f"{PREFIX}/source/sensor", {"temperature": 21.5, "unit": "C", "ok": True}, "JSON")
    go(console, "views")
    name, spec = css(console, "#view-name"), css(console, "#view-spec")
    name.clear()
    name.send_keys(f"{PREFIX}-view")
    spec.clear()
    spec.send_keys(f"map ?{PREFIX}/source// to {PREFIX}/ref/<path(2)>\nthrottle to 1 update evry 1 second")
    css(console, "#view-submit").click()
    error = until(console, lambda d: css(d, "#view-error").is_displayed() and css(d, "#view-error"), "the view's error")
    assert error.get_attribute("data-code") == "VIEW_SYNTAX"
    assert (error.get_attribute("data-line"), error.get_attribute("data-column")) == ("2", "22")
    assert "line 2, column 22" in css(console, "#view-error-summary").text
    excerpt = css(console, "#view-error-excerpt").text.splitlines()
    assert excerpt[-2] == "throttle to 1 update evry 1 second" and excerpt[-1] == " " * 21 + "^", excerpt
    # the cursor is put where the error is
    assert console.execute_script("return document.getElementById('view-spec').selectionStart") == len(
        f"map ?{PREFIX}/source// to {PREFIX}/ref/<path(2)>\n") + 21
    shoot(console, shots, "views-error")

    spec.clear()
    spec.send_keys(f"map ?{PREFIX}/source// to {PREFIX}/ref/<path(2)>")
    css(console, "#view-submit").click()
    until(console, lambda d: css(d, f"tr[data-view='{PREFIX}-view']"), "the view in the list")
    assert css(console, f"tr[data-view='{PREFIX}-view']").text.count("active") == 1
    shoot(console, shots, "views")
    css(console, "#view-browse").click()
    row = until(console, lambda d: css(d, f"li[data-path='{PREFIX}/ref/a'] .value"), "the reference topic in the tree")
    until(console, lambda d: row.text == "alpha", "the reference topic's value")
    admin.topics.set(f"{PREFIX}/source/a", "beta")
    until(console, lambda d: row.text == "beta", "the reference topic to follow its source")
    css(console, f"li[data-path='{PREFIX}/ref/sensor'] .name").click()
    until(console, lambda d: '"temperature": 21.5' in css(d, "#topic-value").text, "the selected reference topic")
    css(console, f"li[data-path='{PREFIX}/source'] .toggle").click()
    until(console, lambda d: css(d, f"li[data-path='{PREFIX}/source/sensor'] .value").text, "the source branch open")
    shoot(console, shots, "topics-views", "console-topics.png")
    assert problems(console) == []


def test_the_security_trees_handlers_and_fanout_pages(console: Any, admin: Any, shots: Path) -> None:
    admin.session_trees.put_table(f"{PREFIX}/tree", [("TIER is 'gold'", f"{PREFIX}/source")])
    registration = admin.missing_topics.add_handler(f"{PREFIX}/missing", lambda notification: True)
    try:
        go(console, "security")
        until(console, lambda d: "admin" in css(d, "#security-principals").text, "the principals")
        assert "ADMINISTRATOR" in css(console, "#security-roles").text
        shoot(console, shots, "security")
        go(console, "trees")
        until(console, lambda d: f"{PREFIX}/source" in css(d, f"[data-branch='{PREFIX}/tree']").text, "the table")
        shoot(console, shots, "session-trees")
        go(console, "handlers")
        until(console, lambda d: f"{PREFIX}/missing" in css(d, "#handlers-table").text, "the handler")
        shoot(console, shots, "missing-topic-handlers")
        go(console, "fanout")
        until(console, lambda d: "No fan-out connections" in css(d, "#fanout-body").text, "the fan-out page")
        shoot(console, shots, "fanout")
    finally:
        admin.missing_topics.remove_handler(registration)
    assert problems(console) == []


def test_close_a_session_from_the_sessions_page(console: Any, cluster: Server, shots: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    victim = canopy.connect_sync(cluster.url, properties={"CONSOLE_E2E": "victim"}, reconnect_timeout=60)
    try:
        go(console, "sessions")
        box = css(console, "#sessions-filter")
        box.clear()
        box.send_keys("CONSOLE_E2E is 'victim'", Keys.ENTER)
        until(console, lambda d: css(d, f"tr[data-session='{victim.session_id}']"), "the victim's row")
        shoot(console, shots, "sessions")
        until(console, lambda d: css(d, f"button[data-close='{victim.session_id}']").click() or True, "a click on Close")
        until(console, lambda d: "closed session" in css(d, "#sessions-outcome").text, "the console to say so")
        wait_for(lambda: victim.closed, 10, "the victim's session to end")
        reason = victim._session.close_reason
        assert reason is not None and reason.code == "CLOSED_BY_CLIENT_CONTROL" and victim._session.reconnects == 0
        until(console, lambda d: all_css(d, f"tr[data-session='{victim.session_id}']") == [], "the row to go")
    finally:
        victim.close()
    assert css_state(console) == "connected"  # the console's own session goes on
    assert problems(console) == []
    css(console, "#logout").click()
    until(console, lambda d: css(d, "#login").is_displayed() and css_state(d) == "logged-out", "the login form again")
    assert all_css(console, "#pages .page") == [] and not css(console, "#tabs").is_displayed()


def test_the_cluster_page_charts_and_shows_a_killed_node_fail_over(
    console: Any, cluster: Server, admin: Any, shots: Path
) -> None:
    go(console, "cluster")
    until(console, lambda d: len(all_css(d, "#cluster-nodes tr[data-alive='true']")) == 3, "three nodes alive")
    status = admin.server.cluster_status()
    before = {p["partition"]: p for p in status["partitions"]}
    home = {n["name"] for n in status["nodes"] if n["home"]}
    mine = {g["node"] for g in status["gateways"] if g["url"] == cluster.url}
    candidates = sorted({p["primary"] for p in before.values()} - home - mine) or sorted(
        {n["name"] for n in status["nodes"]} - home - mine)
    victim = candidates[0]
    moved = [i for i, p in before.items() if p["primary"] == victim]
    for burst in range(3):  # something for the updates/s chart: three polls' worth, each seen by the page
        for i in range(60):
            admin.topics.add_and_set(f"{PREFIX}/load/{i % 20}", burst * 60 + i, "INT64")
        written = sum(p["sequence"] for p in admin.server.cluster_status()["partitions"])
        until(console, lambda d: sum(int(r.get_attribute("data-sequence") or 0) for r in all_css(
            d, "#cluster-partitions tr[data-partition]")) >= written, f"the page to show journal positions {written}")
    until(console, lambda d: float(css(d, "#chart-updates").get_attribute("data-max") or 0) > 0, "updates/s above 0")
    until(console, lambda d: float(css(d, "#chart-sessions").get_attribute("data-last") or 0) >= 2, "the sessions chart")
    shoot(console, shots, "cluster", "console-cluster.png")

    killed_at = time.monotonic()
    admin.server.kill_node(victim)

    def failed_over(d: Any) -> bool:
        if css(d, f"#cluster-nodes tr[data-node='{victim}']").get_attribute("data-alive") != "false":
            return False
        for i in moved:
            row = css(d, f"#cluster-partitions tr[data-partition='{i}']")
            if row.get_attribute("data-primary") in (victim, "") or int(row.get_attribute("data-epoch")) <= before[i]["epoch"]:
                return False
        return True

    until(console, failed_over, f"the cluster page to show {victim} dead and partitions {moved} failed over", FAILOVER)
    print(f"[console] the cluster page showed {victim} dead and partitions {moved} on new primaries "
          f"{time.monotonic() - killed_at:.1f} s after the kill")
    shoot(console, shots, "cluster-failover")
    assert css_state(console) == "connected"
