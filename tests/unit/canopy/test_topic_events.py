"""The client builds its most common TopicEvents as plain tuples (no keyword handling on the
hot path): every such tuple must hold every field, or a field added later reads past its end."""

from __future__ import annotations

import ast
from pathlib import Path

from canopy import client
from canopy.client import TopicEvent


def test_every_event_built_as_a_tuple_has_every_field() -> None:
    trees = [ast.parse(module.read_text()) for module in sorted(Path(client.__file__).parent.glob("*.py"))]
    built = [
        node.args[1] for tree in trees for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_new_event"
        and isinstance(node.args[0], ast.Name) and node.args[0].id == "TopicEvent"
    ]
    assert len(built) >= 4
    for fields in built:
        assert isinstance(fields, ast.Tuple), ast.unparse(fields)
        assert len(fields.elts) == len(TopicEvent._fields), ast.unparse(fields)
