"""The wire protocol's document, ``docs/PROTOCOL.md``, made from :mod:`canopy.protocol`.

The protocol is described once, in :mod:`canopy.protocol`'s docstring, beside the code that
speaks it; this module renders that description with the tables both clients are checked
against: each message type's code and field count, and every operation the server knows.
``tests/unit/canopy/test_protocol_doc.py`` fails when the document is out of date (write it
again with ``python -m canopy.protocol_doc > docs/PROTOCOL.md``), and the JavaScript client's
``clients/js/test/protocol.test.js`` reads the same tables.
"""

from __future__ import annotations

import sys

from canopy import protocol

#: the message types in code order, as the tables name them
MESSAGES = ("HELLO", "WELCOME", "REQUEST", "RESPONSE", "ERROR", "SUBSCRIBED", "VALUE", "UNSUBSCRIBED",
            "CLOSE", "EVENT", "NOTIFY", "DELTA", "COMPRESSED")


def render() -> str:
    """The document's text."""
    lines = [
        f"# canopy wire protocol, version {protocol.PROTOCOL_VERSION}",
        "",
        "<!-- generated from canopy/protocol.py by `python -m canopy.protocol_doc`; do not edit -->",
        "",
        "What the Python client (`canopy/client/`), the JavaScript client (`clients/js/`) and every",
        "gateway speak over WebSocket. The tables below are checked against both clients' code by",
        "their tests; the description after them is `canopy/protocol.py`'s.",
        "",
        "## Message types",
        "",
        "| code | message | fields after the code |",
        "|---:|---|---:|",
    ]
    for name in MESSAGES:
        code = getattr(protocol, name)
        lines.append(f"| {code} | {name} | {protocol._ARITY[code] - 1} |")
    lines += [
        "",
        "A HELLO may leave out its last field (resume); a VALUE not retained adds one (retained, false).",
        "",
        "## Operations",
        "",
        "| operation |",
        "|---|",
        *(f"| `{op}` |" for op in sorted(protocol.OPERATIONS)),
        "",
        "## Description",
        "",
        "```text",
        (protocol.__doc__ or "").strip(),
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render())
