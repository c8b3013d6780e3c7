"""The records of MQTT sessions that outlive their connections (a session expiry).

A session with an expiry is recorded as a persistent JSON topic under ``$MQTT/sessions/``
(its principal, expiry, subscriptions and when its client left), through the gateway's
partition link: journaled and on a backup like every persistent topic, so that another
gateway, or this one restarted, takes the session up when its client comes back with clean
start 0 (:meth:`actors.mqtt.MQTTConnection._restore`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from topics.protocol import FetchTopics, Ok, RemoveTopics, SetValue
from topics.selectors import parse_selector
from topics.types import TopicType
from topics.types import decode as decode_value
from topics.types import encode as encode_value

log = logging.getLogger("canopy.mqtt")


class SessionRecords:
    """The MQTT sessions kept for absent clients (and those whose clients are connected with a
    session expiry), recorded as persistent JSON topics under ``$MQTT/sessions/`` through the
    gateway's partition link: journaled and on a backup, so that another gateway, or this one
    restarted, takes a session up (:meth:`MQTTConnection._restore`)."""

    BRANCH = "$MQTT/sessions"

    def __init__(self, link: Any) -> None:
        self.link = link

    def path(self, client_id: str) -> str:
        return f"{self.BRANCH}/{client_id.encode().hex() or '-'}"

    def save(self, client_id: str, record: dict[str, Any]) -> None:
        path = self.path(client_id)
        self.link.route(path, SetValue(path, encode_value(TopicType.JSON, record), False, "JSON", True))
        self.link.flush()

    def drop(self, client_id: str) -> None:
        path = self.path(client_id)
        self.link.route(path, RemoveTopics(">" + path))
        self.link.flush()

    async def every(self) -> list[tuple[str, dict[str, Any]]]:
        """Every record, by client identifier (none from a partition that did not answer)."""
        selector = parse_selector("?" + re.escape(self.BRANCH) + "/.+")
        out: list[tuple[str, dict[str, Any]]] = []
        for future in self.link.everywhere(selector, FetchTopics(str(selector))):
            try:
                result = await asyncio.wait_for(future, 10)
            except Exception:  # that partition away: its records wait for the next sweep
                continue
            if not isinstance(result, Ok):
                continue
            for row in result.value:
                try:
                    client_id = bytes.fromhex(row.path.rsplit("/", 1)[1]).decode() if not row.path.endswith("/-") else ""
                    record = decode_value(TopicType.JSON, row.value) if row.value is not None else None
                except Exception:
                    continue
                if isinstance(record, dict):
                    out.append((client_id, record))
        return out

    async def load(self, client_id: str) -> dict[str, Any] | None:
        path = self.path(client_id)
        try:
            result = await asyncio.wait_for(self.link.request_route(path, FetchTopics(">" + path)), 10)
        except Exception as e:  # its partition away: no record to take up now
            log.warning("the record of MQTT client %r could not be read: %s", client_id, e)
            return None
        if not isinstance(result, Ok) or not result.value:
            return None
        row = result.value[0]
        try:
            record = decode_value(TopicType.JSON, row.value) if row.value is not None else None
        except Exception:
            return None
        return record if isinstance(record, dict) else None
