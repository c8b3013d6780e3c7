"""Remote server definitions: the servers remote topic views take their sources from.

A definition is plain data, checked here (pure). They are kept in the replicated
configuration (document ``servers``) by the view evaluator, which opens one client
session per remote server that some view needs (``map ?a// from NAME to ...``),
shared by every view naming it, and closes it when no view needs it any more.

* ``urls``: the remote server's gateways, tried in turn;
* ``principal``/``password``: whom to connect as (anonymous without); the principal
  needs SELECT_TOPIC and READ_TOPIC on what the views map;
* ``retry_delay`` (s, default 1): between connection attempts;
* ``reconnect_timeout`` (s, default 60): how long a dropped session tries to resume
  before its topics count as lost;
* ``missing_topic_filter`` (a selector, optional): a subscription or fetch on this
  server that matches no topic and intersects it (by path prefix) is passed on to
  the remote server over the session its views keep (see :mod:`actors.missing_topics`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fanout.config import NAME, _seconds, credentials, urls
from topics.errors import TopicModelError
from topics.selectors import parse_selector

_KEYS = {"name", "urls", "principal", "password", "retry_delay", "reconnect_timeout", "missing_topic_filter"}
#: remote servers one instance may define
MAX_SERVERS = 1000


class RemoteServerError(ValueError):
    """A remote server definition that cannot be used (or a name in use, or none such)."""

    code = "INVALID_REMOTE_SERVER"


@dataclass(frozen=True)
class RemoteServer:
    name: str
    urls: tuple[str, ...]
    principal: str | None = None
    password: str | None = None
    retry_delay: float = 1.0
    reconnect_timeout: float = 60.0
    missing_topic_filter: str | None = None

    @classmethod
    def from_dict(cls, table: Any) -> RemoteServer:
        if not isinstance(table, dict):
            raise RemoteServerError("a remote server definition is a map")
        name = table.get("name")
        where = f"remote server {name!r}"
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise RemoteServerError(f"{where}: a name is 1-64 letters, digits, '_', '.' or '-', starting "
                                    "with a letter or digit")
        unknown = sorted(set(table) - _KEYS)
        if unknown:
            raise RemoteServerError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}")
        try:
            found = urls(table.get("urls"), f"{where}: urls")
            principal, password = credentials(table, where)
            retry = _seconds(table.get("retry_delay", 1.0), f"{where}: retry_delay", 0.01, 3600)
            reconnect = _seconds(table.get("reconnect_timeout", 60.0), f"{where}: reconnect_timeout", 0, 86_400)
        except ValueError as e:
            raise RemoteServerError(str(e)) from None
        selector = table.get("missing_topic_filter")
        if selector is not None:
            if not isinstance(selector, str):
                raise RemoteServerError(f"{where}: missing_topic_filter must be a selector")
            try:
                parse_selector(selector)
            except TopicModelError as e:
                raise RemoteServerError(f"{where}: missing_topic_filter {selector!r} is not a selector: {e}") from None
        return cls(name, tuple(found), principal, password, retry, reconnect, selector)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["urls"] = list(self.urls)
        return data

    def shown(self) -> dict[str, Any]:
        """What VIEW_SERVER may see: no password."""
        data = self.to_dict()
        data.pop("password")
        return data
