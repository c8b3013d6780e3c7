"""The `canopy` command line against a running `canopy serve`."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.request

from tests.e2e.conftest import ADMIN, BIN, Server, cli


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_topic_commands(server: Server) -> None:
    url = server.url
    assert ok(cli("topic", "add", "cli/s", "--type", "STRING", url=url)).strip() == "CREATED"
    assert ok(cli("topic", "add", "cli/s", "--type", "STRING", url=url)).strip() == "EXISTS"
    ok(cli("topic", "add", "cli/j", "--type", "JSON", "--property", "CONFLATION=off", url=url))
    ok(cli("topic", "set", "cli/s", "hello world", url=url))
    ok(cli("topic", "set", "cli/j", '{"b": [1, 2], "a": null}', url=url))
    ok(cli("topic", "set", "cli/d", "12.5", "--type", "DOUBLE", url=url))
    ok(cli("topic", "set", "cli/bin", "AAH/", "--type", "BINARY", url=url))
    lines = ok(cli("topic", "fetch", "?cli//", "--json", "--properties", url=url)).splitlines()
    records = [json.loads(line) for line in lines]
    assert records == [
        {"path": "cli/bin", "type": "BINARY", "value": "AAH/", "properties": {}},
        {"path": "cli/d", "type": "DOUBLE", "value": 12.5, "properties": {}},
        {"path": "cli/j", "type": "JSON", "value": {"b": [1, 2], "a": None}, "properties": {"CONFLATION": "off"}},
        {"path": "cli/s", "type": "STRING", "value": "hello world", "properties": {}},
    ]
    plain = ok(cli("topic", "fetch", ">cli/j", url=url))
    assert plain.strip() == 'cli/j JSON {"b":[1,2],"a":null}'
    assert ok(cli("topic", "remove", "?cli//", url=url)).strip() == "4"
    assert ok(cli("topic", "fetch", "?cli//", url=url)) == ""


def test_subscribe_prints_events_and_stops_after_count(server: Server) -> None:
    url = server.url
    ok(cli("topic", "set", "follow/a", "1", "--type", "INT64", url=url))
    proc = subprocess.Popen(
        [str(BIN / "canopy"), "topic", "subscribe", "?follow//", "--count", "4", "--json", "--url", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first == {"event": "subscribed", "path": "follow/a", "type": "INT64", "value": 1}
        ok(cli("topic", "set", "follow/a", "2", url=url))
        ok(cli("topic", "set", "follow/a", "3", url=url))
        ok(cli("topic", "set", "follow/a", "4", "--no-retain", url=url))  # delivered, not kept
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert [(r["value"], r.get("retained", True)) for r in map(json.loads, out.splitlines())] == [
        (2, True), (3, True), (4, False)]
    assert ok(cli("topic", "fetch", ">follow/a", url=url)).strip() == "follow/a INT64 3"


def test_hub_commands(server: Server) -> None:
    url = server.url
    proc = subprocess.Popen(
        [str(BIN / "canopy"), "hub", "subscribe", "org.example.**", "--count", "2", "--url", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # the subscription is live once the hub topics exist for it to see; publish until both arrive
        ok(cli("hub", "publish", "org.example.a", '{"n": 1}', url=url))
        ok(cli("hub", "publish", "org.example.b.c", "plain text", url=url))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert sorted(line.split(" ", 2)[1] for line in out.splitlines()) == ["org.example.a", "org.example.b.c"]
    fetched = ok(cli("topic", "fetch", "?hub/org/example//", "--json", url=url)).splitlines()
    assert [json.loads(line)["value"] for line in fetched] == [{"n": 1}, "plain text"]


def test_errors_are_one_line_and_nonzero(server: Server) -> None:
    url = server.url
    cases = [
        (("topic", "fetch", "?a//b"), "INVALID_SELECTOR"),
        (("topic", "add", "x", "--type", "NOPE"), "INVALID_TYPE"),
        (("topic", "set", "nowhere/at/all", "1"), "NO_SUCH_TOPIC"),
        (("topic", "set", "e2e/n", "abc", "--type", "INT64"), "INVALID_VALUE"),
        (("topic", "add", "x", "--type", "STRING", "--property", "CONFLATION"), "INVALID_SPECIFICATION"),
        (("hub", "publish", "a.*", "1"), "INVALID_NAME"),
    ]
    for args, code in cases:
        result = cli(*args, url=url)
        assert result.returncode == 1, (args, result)
        assert result.stderr.count("\n") == 1 and code in result.stderr, (args, result.stderr)
    unreachable = cli("topic", "fetch", ">a", "--url", "ws://127.0.0.1:1")
    assert unreachable.returncode == 1 and "CONNECT_FAILED" in unreachable.stderr


def test_bad_input_is_one_line_never_a_traceback(server: Server) -> None:
    url = server.url
    ok(cli("topic", "add", "cli-bad/j", "--type", "JSON", url=url))
    ok(cli("topic", "add", "cli-bad/ts", "--type", "TIME_SERIES", "--property", "TIME_SERIES_EVENT_VALUE_TYPE=DOUBLE",
           url=url))
    deep = "[" * 5000 + "]" * 5000
    cases = [
        (("topic", "set", "cli-bad/j", deep), "INVALID_VALUE", "nested deeper than 256 levels"),
        (("topic", "set", "cli-bad/j", "[" * 300 + "]" * 300), "INVALID_VALUE", "nested deeper than 256 levels"),
        (("topic", "set", "cli-bad/j", "1e400"), "INVALID_VALUE", "out of range"),
        (("topic", "set", "cli-bad/j", "[1, NaN]"), "INVALID_VALUE", "NaN is not JSON"),
        (("topic", "set", "cli-bad/d", "1e400", "--type", "DOUBLE"), "INVALID_VALUE", "out of range"),
        (("hub", "publish", "cli.bad", "[1e400]"), "INVALID_VALUE", "out of range"),
        (("ts", "append", "cli-bad/ts", "1", "--timestamp", "99999999999999999999"), "INVALID_REQUEST",
         "integer 99999999999999999999 is outside the 64-bit range"),
        (("ts", "query", "cli-bad/ts", "--from-sequence", "-99999999999999999999"), "INVALID_REQUEST", "64-bit"),
        (("topic", "add", "cli-bad/r", "--type", "TIME_SERIES", "--property", "TIME_SERIES_EVENT_VALUE_TYPE=INT64",
          "--property", "TIME_SERIES_RETAINED_RANGE=limit 999999999999999999999"),
         "INVALID_SPECIFICATION", "'limit 999999999999999999999' is out of range"),
        (("topic", "add", "cli-bad/r", "--type", "TIME_SERIES", "--property", "TIME_SERIES_EVENT_VALUE_TYPE=INT64",
          "--property", "TIME_SERIES_SUBSCRIPTION_RANGE=last 999999999h"), "INVALID_SPECIFICATION", "out of range"),
    ]
    for args, code, fragment in cases:
        result = cli(*args, url=url)
        assert result.returncode == 1, (args[:3], result.stderr[-500:])
        assert result.stderr.startswith(f"canopy: {code}: ") and result.stderr.count("\n") == 1, result.stderr[-500:]
        assert fragment in result.stderr, result.stderr
        assert len(result.stderr) < 400  # a 10,000-character VALUE is not echoed back whole
    ok(cli("topic", "remove", "?cli-bad//", url=url))


def test_json_output_is_strict_json(server: Server) -> None:
    url = server.url

    def strict(line: str) -> dict[str, object]:
        def refuse(name: str) -> object:
            raise AssertionError(f"{name} is not JSON: {line}")

        record: dict[str, object] = json.loads(line, parse_constant=refuse)
        return record

    for name, text in (("nan", "nan"), ("pinf", "inf"), ("ninf", "-Infinity"), ("one", "1.5")):
        ok(cli("topic", "set", "--type", "DOUBLE", "--", f"cli-nf/{name}", text, url=url))  # --: "-Infinity"
    expected = {"cli-nf/nan": "NaN", "cli-nf/ninf": "-Infinity", "cli-nf/one": 1.5, "cli-nf/pinf": "Infinity"}
    fetched = [strict(line) for line in ok(cli("topic", "fetch", "?cli-nf//", "--json", url=url)).splitlines()]
    assert {r["path"]: r["value"] for r in fetched} == expected
    subscribed = [strict(line) for line in ok(cli("topic", "subscribe", "?cli-nf//", "--json", "--count", "4",
                                                 url=url)).splitlines()]
    assert {r["path"]: r["value"] for r in subscribed} == expected
    plain = ok(cli("topic", "fetch", ">cli-nf/nan", url=url))
    assert plain.strip() == "cli-nf/nan DOUBLE NaN"  # plain text is not JSON and says NaN as it is

    ok(cli("topic", "add", "cli-nf/ts", "--type", "TIME_SERIES", "--property", "TIME_SERIES_EVENT_VALUE_TYPE=DOUBLE",
           url=url))
    ok(cli("ts", "append", "--", "cli-nf/ts", "-inf", url=url))
    events = [strict(line) for line in ok(cli("ts", "query", "cli-nf/ts", "--json", url=url)).splitlines()]
    assert [e["value"] for e in events] == ["-Infinity"]
    ok(cli("topic", "remove", "?cli-nf//", url=url))


def test_values_may_start_with_a_dash(server: Server) -> None:
    url = server.url
    ok(cli("topic", "set", "cli-dash/d", "-inf", "--type", "DOUBLE", url=url))  # no -- needed
    ok(cli("topic", "set", "cli-dash/e", "-1e5", "--type", "DOUBLE", url=url))
    ok(cli("topic", "set", "cli-dash/s", "-x", "--type", "STRING", url=url))
    fetched = [json.loads(line) for line in ok(cli("topic", "fetch", "?cli-dash//", "--json", url=url)).splitlines()]
    assert {r["path"]: r["value"] for r in fetched} == {"cli-dash/d": "-Infinity", "cli-dash/e": -1e5, "cli-dash/s": "-x"}
    ok(cli("topic", "add", "cli-dash/i", "--type", "INT64", url=url))
    result = cli("topic", "set", "cli-dash/i", "-inf", url=url)  # the value parser's error, not argparse's
    assert result.returncode == 1
    assert result.stderr == ("canopy: INVALID_VALUE: VALUE '-inf' is not a valid INT64 value: -inf is not a finite "
                             "number (INT64 has no NaN or infinity)\n")
    ok(cli("topic", "remove", "?cli-dash//", url=url))


def test_pause_seconds_are_checked_before_anything_is_sent() -> None:
    for seconds in ("NaN", "inf", "-1", "0", "86400"):
        result = cli("cluster", "pause-node", "node-1", "--seconds", seconds, "--url", "ws://127.0.0.1:1")
        assert result.returncode == 2, result.stderr  # a usage error: nothing was sent (no server there)
        assert f"--seconds: expected a number of seconds, more than 0 and at most 3600, got '{seconds}'" in result.stderr


def test_usage_errors_exit_2() -> None:
    assert cli("topic").returncode == 2
    assert cli("topic", "add", "x").returncode == 2


def test_time_series_commands(server: Server) -> None:
    url = server.url
    ok(cli("topic", "add", "cli/ts", "--type", "TIME_SERIES", "--property", "TIME_SERIES_EVENT_VALUE_TYPE=DOUBLE",
           url=url))
    meta = json.loads(ok(cli("ts", "append", "cli/ts", "1.5", "--timestamp", "1000", "--json", url=url)))
    assert meta == {"sequence": 0, "timestamp": 1000, "author": "admin"}
    ok(cli("ts", "append", "cli/ts", "2.5", "--timestamp", "2000", url=url))
    assert ok(cli("ts", "edit", "cli/ts", "0", "1.75", url=url)).split()[0] == "2"
    lines = ok(cli("ts", "query", "cli/ts", "--json", url=url)).splitlines()
    assert [json.loads(line)["value"] for line in lines] == [1.75, 2.5]
    plain = ok(cli("ts", "query", "cli/ts", "--edits", "all", url=url)).splitlines()
    assert plain[0] == "0 1000 admin 1.5" and plain[2] == "1 2000 admin 2.5"
    sequence, stamped, author, *rest = plain[1].split()
    assert (sequence, author, rest) == ("2", "admin", ["1.75", "(edit", "of", "0)"]) and int(stamped) > 2000
    assert ok(cli("ts", "query", "cli/ts", "--from-last", "1", url=url)).split()[0] == "1"
    late = cli("ts", "append", "cli/ts", "3", "--timestamp", "10", url=url)
    assert late.returncode == 1 and "TIMESTAMP_ORDER" in late.stderr
    wrong = cli("ts", "append", "cli/ts", "abc", url=url)
    assert wrong.returncode == 1 and "INVALID_VALUE" in wrong.stderr
    both = cli("ts", "query", "cli/ts", "--next", "1", "--previous", "2", url=url)
    assert both.returncode == 2


def test_security_tree_and_session_commands(server: Server) -> None:
    url = server.url
    ok(cli("security", "principal", "add", "clara", "--new-password", "clara-password", "--roles", "CLIENT,EXTRA",
           url=url))
    ok(cli("security", "role", "EXTRA", "--default", "READ_TOPIC,SELECT_TOPIC", "--path", "cli-sec/w=UPDATE_TOPIC",
           "--global", "VIEW_SESSION", url=url))
    shown = json.loads(ok(cli("security", "show", "--json", url=url)))
    assert shown["principals"]["clara"]["roles"] == ["CLIENT", "EXTRA"]
    assert shown["roles"]["EXTRA"]["paths"] == {"cli-sec/w": ["UPDATE_TOPIC"]}
    denied = cli("security", "show", url=url, admin=False)
    assert denied.returncode == 1 and "PERMISSION_DENIED" in denied.stderr and "VIEW_SECURITY" in denied.stderr
    bad = cli("security", "role", "EXTRA", "--default", "FLY", url=url)
    assert bad.returncode == 1 and "INVALID_SECURITY_COMMAND" in bad.stderr

    ok(cli("topic", "set", "cli-sec/real/p", "7", "--type", "INT64", url=url))
    ok(cli("tree", "put", "cli-sec/virtual", "--map", "TIER is 'gold'", "cli-sec/real", url=url))
    listed = [json.loads(line) for line in ok(cli("tree", "list", "--json", url=url)).splitlines()]
    assert {"branch": "cli-sec/virtual", "mappings": [["TIER is 'gold'", "cli-sec/real"]]} in listed
    # the tables name the topic branches behind session paths: not for sessions that only read them
    hidden = cli("tree", "get", "cli-sec/virtual", url=url, admin=False)
    assert hidden.returncode == 1 and "PERMISSION_DENIED" in hidden.stderr and "MODIFY_TOPIC" in hidden.stderr
    assert ok(cli("tree", "list", "--json", url=url, admin=False)) == ""
    bad_filter = cli("tree", "put", "cli-sec/v2", "--map", "TIER is", "x", url=url)
    assert bad_filter.returncode == 1 and "INVALID_BRANCH_MAPPING" in bad_filter.stderr

    proc = subprocess.Popen(
        [str(BIN / "canopy"), "topic", "subscribe", "?cli-sec/virtual//", "--json", "--count", "1", "--url", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # the subscriber is anonymous with no TIER: nothing shows until a control session gives it one
        def gave_gold() -> bool:
            return ok(cli("session", "set", "--filter", "$Principal is ''", "TIER=gold", url=url)).strip() != "0"

        from tests.conftest import wait_for

        wait_for(gave_gold, 60, "the anonymous subscriber to connect and get TIER=gold")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out) == {"event": "subscribed", "path": "cli-sec/virtual/p", "type": "INT64", "value": 7}
    wait_for(lambda: ok(cli("session", "get", "--filter", "TIER is 'gold'", url=url)) == "", 30,
             "the subscriber's session to end with its process")
    ok(cli("tree", "remove", "cli-sec/virtual", url=url))
    missing = cli("tree", "get", "cli-sec/virtual", url=url)
    assert missing.returncode == 1 and "NO_SUCH_TABLE" in missing.stderr


def test_session_close_ends_a_subscriber_for_good(server: Server) -> None:
    from tests.conftest import wait_for

    url = server.url

    def anonymous() -> set[str]:
        return {json.loads(line)["session"] for line in ok(cli("session", "get", "--filter", "$Principal is ''",
                                                               "--json", url=url)).splitlines()}

    before = anonymous()
    proc = subprocess.Popen(
        [str(BIN / "canopy"), "topic", "subscribe", "?cli-close//", "--reconnect-timeout", "60", "--url", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        def subscriber() -> str | None:
            new = anonymous() - before
            return new.pop() if len(new) == 1 else None

        sid = wait_for(subscriber, 60, "the anonymous subscriber's session")
        assert ok(cli("session", "close", sid, url=url)).strip() == "1"
        _, err = proc.communicate(timeout=30)  # it ends, rather than reconnecting for 60 s
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "CLOSED_BY_CLIENT_CONTROL" in err, err
    assert ok(cli("session", "close", "--filter", f"$SessionId is '{sid}'", url=url)).strip() == "0"
    denied = cli("session", "close", "--id", sid, url=url, admin=False)
    assert denied.returncode == 1 and "PERMISSION_DENIED" in denied.stderr


def test_view_commands(server: Server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = server.url
    ok(cli("topic", "set", "cli-view/src/a", "1", "--type", "INT64", url=url))
    created = ok(cli("view", "create", "cli-mirror", "map ?cli-view/src// to cli-view/out/<path(2)>", url=url))
    assert created.startswith("cli-mirror (precedence ")
    spec_file = tmp_path / "spec.view"
    spec_file.write_text("# from a file\nmap ?cli-view/src//\nto cli-view/text/<path(2)>\ntype STRING\n")
    ok(cli("view", "create", "cli-file", "--file", str(spec_file), url=url))
    listed = [json.loads(line) for line in ok(cli("view", "list", "--json", url=url)).splitlines()]
    names = [v["name"] for v in listed]
    assert names.index("cli-mirror") < names.index("cli-file")
    assert all(v["state"] == "active" for v in listed)

    from tests.conftest import wait_for

    def fetched() -> list[tuple[str, object]]:
        rows = [json.loads(line) for line in ok(cli("topic", "fetch", "?cli-view//", "--json", url=url)).splitlines()]
        return [(r["path"], r["value"]) for r in rows if not r["path"].startswith("cli-view/src")]

    wait_for(lambda: fetched() == [("cli-view/out/a", 1), ("cli-view/text/a", "1")], 30, "the reference topics")
    bad = cli("view", "create", "cli-bad", "map ?cli-view// to", url=url)
    assert bad.returncode == 1 and "VIEW_SYNTAX" in bad.stderr and "line 1, column 19" in bad.stderr
    denied = cli("view", "list", url=url, admin=False)
    assert denied.returncode == 1 and "READ_TOPIC_VIEWS" in denied.stderr
    ok(cli("view", "remove", "cli-mirror", url=url))
    ok(cli("view", "remove", "cli-file", url=url))
    ok(cli("view", "remove", "cli-file", url=url))  # absent: fine
    wait_for(lambda: fetched() == [], 30, "the reference topics to go")


def test_missing_topics_handle_creates_the_topic_or_cancels(server: Server) -> None:
    """``canopy missing-topics handle``: the handler makes the missing topic and the subscriber
    gets it; with --cancel the fetch is abandoned."""
    url = server.url
    env = {**os.environ, "CANOPY_URL": url, "CANOPY_PRINCIPAL": ADMIN[0], "CANOPY_PASSWORD": ADMIN[1]}
    handler = subprocess.Popen(
        [str(BIN / "canopy"), "missing-topics", "handle", "made", "--create", "STRING", "--count", "2", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    canceller = subprocess.Popen(
        [str(BIN / "canopy"), "missing-topics", "handle", "refused", "--cancel", "--count", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        for proc in (handler, canceller):
            assert proc.stderr is not None
            assert "handling missing topics" in proc.stderr.readline()
        listed = cli("missing-topics", "list", "--json", url=url)
        assert {json.loads(line)["path"] for line in listed.stdout.splitlines()} >= {"made", "refused"}, listed
        subscribed = cli("topic", "subscribe", "made/a", "--count", "1", "--json", url=url, admin=False)
        assert subscribed.returncode == 0, subscribed.stderr
        assert json.loads(subscribed.stdout) == {"event": "subscribed", "path": "made/a", "type": "STRING", "value": None}
        fetched = cli("topic", "fetch", "?made/b//", url=url, admin=False)
        assert fetched.returncode == 0 and fetched.stdout.startswith("made/b STRING"), fetched
        out, err = handler.communicate(timeout=60)
        assert handler.returncode == 0, err
        records = [json.loads(line) for line in out.splitlines()]
        assert [(r["selector"], r["created"], r["answer"]) for r in records] == [
            (">made/a", "CREATED", "proceed"), ("?made/b//", "CREATED", "proceed")]
        assert records[0]["properties"]["$Principal"] == "" and len(records[0]["servers"]) == 1
        refused = cli("topic", "fetch", "refused/x", url=url, admin=False)
        assert refused.returncode == 1 and "CANCELLED" in refused.stderr, refused
        out, err = canceller.communicate(timeout=60)
        assert canceller.returncode == 0 and "missing >refused/x" in out and "cancel" in out, (out, err)
    finally:
        for proc in (handler, canceller):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_metrics_collector_commands_and_the_scrape_that_exports_them(server: Server) -> None:
    url = server.url
    assert ok(cli("metrics", "collector", "add", "cli-topics", "--topics", "?cli-metrics//", "--group-by-type",
                  url=url)).strip() == "cli-topics: added (topics ?cli-metrics//, by type)"
    added = ok(cli("metrics", "collector", "add", "cli-sessions", "--sessions", "$Principal is 'admin'",
                   "--group-by", "$Principal", "--group-by", "user-tier", url=url))
    assert added.strip() == "cli-sessions: added (sessions $Principal is 'admin', by $Principal, user-tier)"
    assert ok(cli("metrics", "collector", "add", "cli-topics", "--topics", "?cli-metrics//", url=url)).startswith(
        "cli-topics: replaced")
    ok(cli("topic", "set", "cli-metrics/a", "1", "--type", "INT64", url=url))
    listed = [json.loads(line) for line in ok(cli("metrics", "collector", "list", "--json", url=url)).splitlines()]
    assert [c["name"] for c in listed] == ["cli-topics", "cli-sessions"]
    assert listed[1] == {"kind": "session", "name": "cli-sessions", "filter": "$Principal is 'admin'",
                         "group_by": ["$Principal", "user-tier"], "remove_metrics_with_no_matches": False}
    assert ok(cli("metrics", "collector", "list", url=url)).splitlines()[0] == "cli-topics\ttopics ?cli-metrics//"
    # what `curl -u admin:... http://127.0.0.1:PORT/metrics` shows
    request = urllib.request.Request(url.replace("ws://", "http://") + "/metrics", headers={
        "Authorization": "Basic " + base64.b64encode(f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode()})
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read().decode()
    assert 'canopy_topic_collector_topics{collector="cli-topics"} 1' in text
    assert 'canopy_session_collector_opened_total{collector="cli-sessions",_Principal="admin",user_tier=""}' in text
    assert "canopy_cluster_status_up 1" in text
    for args, fragment in [
        (("add", "bad name", "--topics", ">a"), "INVALID_COLLECTOR: topic metric collector 'bad name': a name is"),
        (("add", "c", "--topics", "?a//b"), "is not a topic selector"),
        (("add", "c", "--sessions", "Tier is"), "invalid session filter"),
        (("add", "c", "--sessions", "all", "--group-by-type"), "INVALID_COLLECTOR: --group-by-type goes with --topics"),
        (("add", "c", "--topics", ">a", "--group-by", "Tier"), "--group-by and --remove-metrics-with-no-matches go"),
    ]:
        result = cli("metrics", "collector", *args, url=url)  # a bad filter is shown with a caret under the fault
        assert result.returncode == 1 and result.stderr.startswith("canopy: INVALID_COLLECTOR: "), result.stderr
        assert fragment in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert cli("metrics", "collector", "add", "c", url=url).returncode == 2  # --topics or --sessions is required
    assert ok(cli("metrics", "collector", "remove", "cli-topics", url=url)).strip() == "cli-topics: removed"
    assert ok(cli("metrics", "collector", "remove", "cli-topics", url=url)).strip() == "cli-topics: no such collector"
    ok(cli("metrics", "collector", "remove", "cli-sessions", url=url))
    assert ok(cli("metrics", "collector", "list", url=url)) == ""
    ok(cli("topic", "remove", "?cli-metrics//", url=url))
