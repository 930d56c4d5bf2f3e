"""MM2's filters: which topics and which topic configs a flow copies, and the pattern lists behind them
(the consumer groups a flow checkpoints are `client_epochs.mirror.offsets.GroupFilter`'s, on the same lists).

Each is a list of Java regular expressions separated by commas (`topics`, `topics.exclude`,
`groups`, `groups.exclude`, `config.properties.exclude`), matched against the whole name as Java's
`Matcher.matches` does, with MM2's defaults. The expressions MM2 users write (character classes,
`.*`, alternations, escaped dots) mean the same in Python's `re`; a pattern either engine refuses
is refused here by its key and text, before anything starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TOPICS_DEFAULT = ".*"
TOPICS_EXCLUDE_DEFAULT = r".*[\-\.]internal, .*\.replica, __.*"
GROUPS_DEFAULT = ".*"
GROUPS_EXCLUDE_DEFAULT = "console-consumer-.*, connect-.*, __.*"
CONFIG_PROPERTIES_EXCLUDE_DEFAULT = (r"follower\.replication\.throttled\.replicas, "
                                     r"leader\.replication\.throttled\.replicas, "
                                     r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
                                     r"unclean\.leader\.election\.enable, min\.insync\.replicas")
"""MM2's DefaultConfigPropertyFilter: configs that describe the source cluster, not the data."""


class PatternError(ValueError):
    """A pattern list that does not compile; the message names the key and the pattern."""


@dataclass(frozen=True)
class PatternList:
    """One comma-separated list of whole-name patterns, as MM2's `MirrorUtils.compilePatternList`."""

    key: str
    text: str
    pattern: re.Pattern[str] | None

    @classmethod
    def of(cls, key: str, text: str) -> PatternList:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        for part in parts:
            try:
                re.compile(part)
            except re.error as exc:
                raise PatternError(f"{key}: {part!r} is not a valid regular expression ({exc})") from None
        return cls(key, text, re.compile("|".join(f"(?:{part})" for part in parts)) if parts else None)

    def matches(self, name: str) -> bool:
        return self.pattern is not None and self.pattern.fullmatch(name) is not None


@dataclass(frozen=True)
class NameFilter:
    """Included by `include` and not excluded by `exclude` (MM2's DefaultTopicFilter and DefaultGroupFilter)."""

    include: PatternList
    exclude: PatternList

    def __call__(self, name: str) -> bool:
        return self.include.matches(name) and not self.exclude.matches(name)


def topic_filter(include: str = TOPICS_DEFAULT, exclude: str = TOPICS_EXCLUDE_DEFAULT) -> NameFilter:
    return NameFilter(PatternList.of("topics", include), PatternList.of("topics.exclude", exclude))


def config_property_filter(exclude: str = CONFIG_PROPERTIES_EXCLUDE_DEFAULT) -> PatternList:
    """The topic configs not copied: those `config.properties.exclude` matches."""
    return PatternList.of("config.properties.exclude", exclude)
