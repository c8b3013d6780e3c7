"""JSON pointers and patches for views: the hand-written modules against jsonpointer/jsonpatch.

Times what a view does to a decoded JSON value on every source update, on
documents of 10 and 200 members (scalars, small objects and small arrays):

* *resolve*: a pointer that ``<scalar()>``, ``<expand()>``, ``key`` or
  ``as <value()>`` reads (a hit two levels deep, an array element, a miss);
* *insert*: an ``insert ... at`` pointer (a new member, a nested member, an
  array append);
* *patch*: typical ``patch '[...]'`` clauses of one to three operations,
  one of which fails (the clause then makes no reference topic).

Each operation is run by:

* ``views`` (baseline): :mod:`topics.pointer` / :mod:`topics.patch`, pointers
  and patches parsed once as a view definition is;
* ``library``: jsonpointer/jsonpatch as documented, also parsed once: a
  ``JsonPointer`` for each pointer, ``JsonPointer.set(..., inplace=False)``
  for inserts and a ``JsonPatch`` subclass whose ``operations`` map ``test``
  to a CBOR byte-exact test operation, applied with ``apply(document)``.
  Neither mutates its input, which is the contract of the views modules
  (documents are immutable values there);
* ``library, fast copy``: the same operations applied in place to a copy of
  the document made by a dict/list walk, the cheapest whole-document copy
  that keeps the input unmutated, which ``apply(in_place=True)`` needs.

The views modules copy only the containers along a pointer; the library
copies the whole document (``copy.deepcopy``) before it applies anything.
Every library result is checked against the views result (and failures
against failures) before timing. Printed per case: the median over
``--repeats`` runs of the time per operation in µs and the ratio to the
views time; the CBOR decode + encode of the same document (what every
update of a JSON source pays anyway) is printed as the scale.

    .venv/bin/python bench/json_patch.py [--repeats 7] [--budget-ms 25]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import cbor2
import jsonpatch
import jsonpointer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from topics.patch import PatchFailed, apply_patch, parse_patch  # noqa: E402
from topics.pointer import MISSING, InsertError, insert_at, parse_pointer, resolve  # noqa: E402

SIZES = (10, 200)

RESOLVES = {
    "hit /m4/v": "/m4/v",
    "array /l5/1": "/l5/1",
    "miss /nope/v": "/nope/v",
}

INSERTS = {
    "new member /inserted": "/inserted",
    "nested /m4/extra": "/m4/extra",
    "append /l5/-": "/l5/-",
}

PATCHES = {
    "test+replace": [
        {"op": "test", "path": "/price", "value": 22},
        {"op": "replace", "path": "/price", "value": 23},
    ],
    "add+remove": [
        {"op": "add", "path": "/extra", "value": {"a": 1, "b": [1, 2]}},
        {"op": "remove", "path": "/name"},
    ],
    "copy+move+add": [
        {"op": "copy", "from": "/m4", "path": "/copied"},
        {"op": "move", "from": "/m1/v", "path": "/moved"},
        {"op": "add", "path": "/l5/0", "value": "first"},
    ],
    "failing test (2nd op)": [
        {"op": "add", "path": "/x", "value": 1},
        {"op": "test", "path": "/m4", "value": {"v": 4, "tags": ["b", "a"]}},
    ],
}


def document(members: int) -> dict[str, Any]:
    """A JSON topic value: a few named scalars, then objects, arrays and scalars in turn."""
    doc: dict[str, Any] = {"name": "instrument", "price": 22, "qty": 1.5}
    for i in range(members - len(doc)):
        kind = i % 3
        if kind == 0:
            doc[f"s{i}"] = f"value {i}"
        elif kind == 1:
            doc[f"m{i}"] = {"v": i, "tags": ["a", "b"]}
        else:
            doc[f"l{i}"] = [i, i + 1, {"k": i}]
    return doc


# -- the library-based implementation --------------------------------------------------


class CborTestOperation(jsonpatch.PatchOperation):
    """RFC 6902 ``test`` comparing CBOR encodings byte for byte (member order and number type count)."""

    def apply(self, obj: Any) -> Any:
        found = lib_resolve(obj, self.pointer)
        if found is MISSING:
            raise jsonpatch.JsonPatchTestFailed(f"path {self.location!r} does not exist")
        if cbor2.dumps(found) != cbor2.dumps(self.operation["value"]):
            raise jsonpatch.JsonPatchTestFailed(f"the value at {self.location!r} differs")
        return obj


class ViewPatch(jsonpatch.JsonPatch):
    """RFC 6902 with the byte-exact ``test``."""

    operations = MappingProxyType({**jsonpatch.JsonPatch.operations, "test": CborTestOperation})


LIB_ERRORS = (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException)


def lib_resolve(doc: Any, pointer: jsonpointer.JsonPointer) -> Any:
    """``JsonPointer.resolve`` with views' meaning: ``-`` (the end of an array) is no value."""
    found = pointer.resolve(doc, MISSING)
    return MISSING if isinstance(found, jsonpointer.EndOfList) else found


def lib_insert(doc: Any, pointer: jsonpointer.JsonPointer, item: Any) -> Any:
    return pointer.set(doc, item, inplace=False)


def lib_apply(doc: Any, patch: ViewPatch) -> Any:
    if not isinstance(doc, (dict, list)):
        raise jsonpatch.JsonPatchConflict("a patch applies to an array or an object")
    return patch.apply(doc)


def json_copy(value: Any) -> Any:
    """A deep copy of a decoded JSON value (dicts, lists and immutable scalars only)."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    return value


def fast_insert(doc: Any, pointer: jsonpointer.JsonPointer, item: Any) -> Any:
    return pointer.set(json_copy(doc), item)


def fast_apply(doc: Any, operations: list[jsonpatch.PatchOperation]) -> Any:
    if not isinstance(doc, (dict, list)):
        raise jsonpatch.JsonPatchConflict("a patch applies to an array or an object")
    doc = json_copy(doc)
    for operation in operations:
        doc = operation.apply(doc)
    return doc


# -- timing -----------------------------------------------------------------------------


def per_call_us(fn: Callable[[], Any], repeats: int, budget_ms: float) -> float:
    """Median over ``repeats`` runs of the time per call, in µs; each run lasts about ``budget_ms``."""
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    loops = max(1, int(budget_ms / 1000 / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter_ns() - start) / loops / 1000)
    return statistics.median(samples)


@dataclass(frozen=True)
class Case:
    """One operation on one document, as each implementation runs it."""

    name: str
    views: Callable[[], Any]
    library: Callable[[], Any]
    fast_copy: Callable[[], Any] | None
    errors: tuple[type[Exception], ...] = ()


def outcome(fn: Callable[[], Any], errors: tuple[type[Exception], ...]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except errors:
        return "failed", None


def same_result(name: str, views: tuple[str, Any], other: tuple[str, Any]) -> None:
    """Both succeed with the same JSON text (member order included), or both fail."""
    assert views[0] == other[0], f"{name}: views {views[0]}, library {other[0]}"
    shown = [repr(value) if value is MISSING else json.dumps(value) for value in (views[1], other[1])]
    assert shown[0] == shown[1], f"{name}: views {shown[0]}, library {shown[1]}"


def cases(doc: dict[str, Any]) -> list[Case]:
    """Every resolve, insert and patch case on ``doc``, pointers and patches parsed beforehand."""
    made = []
    for name, text in RESOLVES.items():
        tokens, pointer = parse_pointer(text), jsonpointer.JsonPointer(text)
        made.append(Case(f"resolve {name}", partial(resolve, doc, tokens), partial(lib_resolve, doc, pointer), None))
    for name, text in INSERTS.items():
        tokens, pointer = parse_pointer(text), jsonpointer.JsonPointer(text)
        made.append(Case(
            f"insert {name}",
            partial(insert_at, doc, tokens, "item"),
            partial(lib_insert, doc, pointer, "item"),
            partial(fast_insert, doc, pointer, "item"),
            (InsertError, jsonpointer.JsonPointerException),
        ))
    for name, operations in PATCHES.items():
        text = json.dumps(operations)
        prebuilt = [ViewPatch.operations[op["op"]](op) for op in json.loads(text)]
        made.append(Case(
            f"patch {name}",
            partial(apply_patch, doc, parse_patch(text)),
            partial(lib_apply, doc, ViewPatch.from_string(text)),
            partial(fast_apply, doc, prebuilt),
            (PatchFailed, *LIB_ERRORS),
        ))
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--budget-ms", type=float, default=25, help="length of one timed run")
    args = parser.parse_args()

    def time_it(fn: Callable[[], Any]) -> float:
        return per_call_us(fn, args.repeats, args.budget_ms)

    print(f"JSON pointers and patches, per operation (median of {args.repeats} runs), "
          f"jsonpointer {jsonpointer.__version__}, jsonpatch {jsonpatch.__version__}")
    for size in SIZES:
        doc = document(size)
        before = json.dumps(doc)
        encoded = cbor2.dumps(doc)
        scale = time_it(lambda: cbor2.dumps(cbor2.loads(encoded)))
        print(f"\n{size} members ({len(encoded)} CBOR bytes); CBOR decode + encode of the document: {scale:.1f} µs")
        print(f"  {'operation':28} {'views µs':>9} {'library µs':>11} {'x views':>8} {'fast copy µs':>13} {'x views':>8}")
        for case in cases(doc):
            expected = outcome(case.views, case.errors)
            runs = [case.views, case.library] + ([case.fast_copy] if case.fast_copy else [])
            for run in runs[1:]:
                same_result(case.name, expected, outcome(run, case.errors))
            if expected[0] == "failed":  # timed as the caller sees a failure: raised and caught
                runs = [partial(outcome, run, case.errors) for run in runs]
            views_us, library_us, *fast = [time_it(run) for run in runs]
            line = f"  {case.name:28} {views_us:9.2f} {library_us:11.2f} {library_us / views_us:7.1f}x"
            if fast:
                line += f" {fast[0]:13.2f} {fast[0] / views_us:7.1f}x"
            print(line)
        assert json.dumps(doc) == before, "an implementation mutated its input"

        miss = jsonpointer.JsonPointer(RESOLVES["miss /nope/v"])
        jsonpointer.VERBOSE_EXCEPTIONS = False  # the default (True) formats the whole document into the error
        quiet = time_it(partial(lib_resolve, doc, miss))
        jsonpointer.VERBOSE_EXCEPTIONS = True
        print(f"  {'resolve miss, not verbose':28} {'':9} {quiet:11.2f}   (jsonpointer.VERBOSE_EXCEPTIONS = False)")

    text = json.dumps(PATCHES["copy+move+add"])
    print("\nonce per view definition (not per update): parsing the copy+move+add patch")
    print(f"  views parse_patch {time_it(partial(parse_patch, text)):.2f} µs, "
          f"library JsonPatch.from_string {time_it(partial(ViewPatch.from_string, text)):.2f} µs")


if __name__ == "__main__":
    main()
