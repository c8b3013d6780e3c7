"""docs/PROTOCOL.md is canopy/protocol.py's description, up to date, and its tables are the code's."""

from __future__ import annotations

import re
from pathlib import Path

from canopy import protocol, protocol_doc

DOC = Path(__file__).parents[3] / "docs" / "PROTOCOL.md"


def test_the_document_is_up_to_date() -> None:
    assert DOC.read_text() == protocol_doc.render(), (
        "docs/PROTOCOL.md is out of date: python -m canopy.protocol_doc > docs/PROTOCOL.md"
    )


def test_the_message_table_is_what_the_python_codec_decodes() -> None:
    rows = re.findall(r"^\| (\d+) \| ([A-Z]+) \| (\d+) \|$", DOC.read_text(), re.M)
    assert len(rows) == len(protocol._ARITY)
    for code, name, fields in rows:
        assert getattr(protocol, name) == int(code)
        assert protocol._ARITY[int(code)] == int(fields) + 1


def test_every_operation_the_python_client_sends_is_documented() -> None:
    documented = set(re.findall(r"^\| `([a-z_]+)` \|$", DOC.read_text(), re.M))
    assert documented == set(protocol.OPERATIONS)
    source = "\n".join(m.read_text() for m in sorted((Path(protocol.__file__).parent / "client").glob("*.py")))
    sent = set(re.findall(r"_(?:call|call_again|request)\(\s*\"([a-z_]+)\"", source))
    assert sent and sent <= documented, sent - documented
