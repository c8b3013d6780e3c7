"""``canopy demo``: a walk through the pure topic model (no server needed)."""

from __future__ import annotations

from canopy import __version__


def run() -> int:
    from topics import SubscriptionIndex, TopicSpecification, TopicTree, TopicType
    from topics import conversions, openajax
    from topics import types as values
    from topics.timeseries import Anchor, RangeQuery

    write = print
    tree = TopicTree()
    json_spec = TopicSpecification.of("JSON")
    prices = {
        "market/prices/fish/cod": {"price": 12.51, "currency": "GBP"},
        "market/prices/fish/hake": {"price": 9.1, "currency": "GBP"},
        "market/prices/veg/leek": {"price": 1.25, "currency": "EUR"},
        "backend/delayed/fish/cod": {"price": 12.4, "currency": "GBP"},
    }
    for path, value in prices.items():
        tree.add(path, json_spec)
        tree.set_value(path, values.encode(TopicType.JSON, value))
    write(f"canopy {__version__}: topic model demo ({len(tree)} topics)")
    for expression in (">market/prices/fish/cod", "?market/prices/.*/", "*.*/cod", "#?market/.*/veg//////>backend/delayed/fish/cod"):
        chosen = sorted(t.path for t in tree.select(expression))
        write(f"  select {expression!r:50} -> {chosen}")

    index: SubscriptionIndex[str] = SubscriptionIndex()
    index.add("?market/prices/fish/", "fish-desk")
    index.add("*.*/cod", "cod-watcher")
    index.add(openajax.parse_pattern("org.example.**").to_selector("hub"), "hub-app")
    for path in ("market/prices/fish/cod", "market/prices/veg/leek", openajax.name_to_path("org.example.log", "hub")):
        write(f"  update {path!r:32} reaches {sorted(index.match(path))}")

    cod_topic = tree.get("market/prices/fish/cod")
    assert cod_topic is not None and cod_topic.value is not None
    cod = values.decode(TopicType.JSON, cod_topic.value)
    as_int = conversions.convert(cod["price"], TopicType.DOUBLE, TopicType.INT64)
    write(f"  DOUBLE {cod['price']} as INT64 -> {as_int}; as STRING -> "
          f"{conversions.convert(cod['price'], TopicType.DOUBLE, TopicType.STRING)!r}")

    ts_spec = TopicSpecification.of(
        "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "DOUBLE", "TIME_SERIES_RETAINED_RANGE": "limit 5"}
    )
    topic, _ = tree.add("market/history/cod", ts_spec)
    assert topic.log is not None
    for i, price in enumerate([12.0, 12.2, 12.1, 12.6, 12.5, 12.9, 13.1]):
        topic.log.append(values.encode(TopicType.DOUBLE, price), 1_000 + i, "demo")
    topic.log.edit(4, values.encode(TopicType.DOUBLE, 12.45), 2_000, "auditor")
    last3 = topic.log.query(RangeQuery(Anchor.LAST, 3)).events
    write("  time series, last 3 (retained: limit 5, edit of #4 applied): "
          + ", ".join(f"#{e.sequence}={values.decode(TopicType.DOUBLE, e.value)}" for e in last3))
    return 0
