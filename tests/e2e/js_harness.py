"""What the JavaScript client's tests (clients/js/test/) ask of the Python side, one command per run:

    js_harness.py set PATH JSON_VALUE [TYPE]     the Python client sets a topic (adding it if missing)
    js_harness.py fetch SELECTOR                 prints [[path, type, value]...] as JSON (bytes as lists)
    js_harness.py kill-gateway SERVE_PID         SIGKILLs the GatewayActor under `canopy serve`

The URL and credentials come from CANOPY_URL, CANOPY_PRINCIPAL and CANOPY_PASSWORD.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from canopy.sync import connect_sync


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, bytes) else value


def main(argv: list[str]) -> int:
    command, *args = argv
    if command == "kill-gateway":
        from tests.e2e.test_supervision import _actor_pid

        os.kill(_actor_pid(int(args[0]), "GatewayActor"), signal.SIGKILL)
        return 0
    url = os.environ["CANOPY_URL"]
    with connect_sync(url, os.environ.get("CANOPY_PRINCIPAL"), os.environ.get("CANOPY_PASSWORD")) as session:
        if command == "set":
            value = json.loads(args[1])
            topic_type = args[2] if len(args) > 2 else None
            if topic_type == "BINARY":
                value = bytes(value)
            session.topics.add_and_set(args[0], value, topic_type)
            return 0
        if command == "fetch":
            rows = session.topics.fetch(args[0])
            print(json.dumps([[t.path, t.type.value, _plain(t.value)] for t in rows]))
            return 0
    print(f"unknown command {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
