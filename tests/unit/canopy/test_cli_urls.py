"""``--url`` takes one URL or a comma-separated list (a cluster's gateways)."""

from __future__ import annotations

import pytest

from canopy.cli import urls
from canopy.errors import CanopyError


def test_one_or_several_urls() -> None:
    assert urls("ws://a:1") == ["ws://a:1"]
    assert urls("ws://a:1, ws://b:2,") == ["ws://a:1", "ws://b:2"]
    with pytest.raises(CanopyError, match="no URL"):
        urls(" , ")
