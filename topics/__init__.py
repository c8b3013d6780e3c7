"""The pure topic model: paths, selectors, OpenAjax names, typed values, specifications,
the topic tree, the subscription index and time series event logs. No I/O, no Ray."""

from topics.errors import (
    ConversionError,
    InvalidValueError,
    OpenAjaxNameError,
    PathError,
    SelectorError,
    SpecificationError,
    TimeSeriesError,
    TopicConflictError,
    TopicModelError,
    TopicTypeError,
)
from topics.selectors import Selector, parse_selector
from topics.specification import TopicSpecification
from topics.sublist import SubscriptionIndex
from topics.tree import Topic, TopicTree
from topics.types import TopicType

__all__ = [
    "ConversionError",
    "InvalidValueError",
    "OpenAjaxNameError",
    "PathError",
    "Selector",
    "SelectorError",
    "SpecificationError",
    "SubscriptionIndex",
    "TimeSeriesError",
    "Topic",
    "TopicConflictError",
    "TopicModelError",
    "TopicSpecification",
    "TopicTree",
    "TopicType",
    "TopicTypeError",
    "parse_selector",
]
