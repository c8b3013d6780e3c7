"""OpenAjax-style publish/subscribe (``session.hub``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from canopy.client.events import TopicEvent, _local
from canopy.client.subscriptions import SubscribeRequest
from topics import openajax
from topics.errors import TopicModelError
from topics.types import TopicType

if TYPE_CHECKING:
    from canopy.client.session import Session


class Hub:
    """OpenAjax-style publish/subscribe with dotted names (``session.hub``).

    Names map onto JSON topics under the server's hub root branch
    (``org.example.a`` → ``hub/org/example/a``); publishing creates the topic
    when it is missing.
    """

    def __init__(self, session: Session) -> None:
        self._s = session

    @property
    def root(self) -> str:
        return self._s.hub_root

    async def publish(self, name: str, value: Any) -> None:
        try:
            path = openajax.name_to_path(name, self.root)
        except TopicModelError as e:
            raise _local(e) from None
        await self._s.topics.set(path, value, TopicType.JSON, add_if_missing=True)

    def subscribe(self, pattern: str, callback: Callable[[TopicEvent], Any] | None = None) -> SubscribeRequest:
        """Subscribe to a dotted pattern; ``await``, ``async with`` or ``async for`` the
        result, or pass a ``callback`` (see :meth:`Topics.subscribe`)."""
        try:
            selector = openajax.parse_pattern(pattern).to_selector(self.root)
        except TopicModelError as e:
            raise _local(e) from None
        return SubscribeRequest(self._s._subscribe(selector, hub_root=self.root, callback=callback))
