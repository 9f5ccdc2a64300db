"""The SDK's one reading of a tag subscription expression, as RocketMQ's
FilterAPI.buildSubscriptionData reads it (and broker_sim's TagFilter.parse)."""

from __future__ import annotations

from rmq_spark.errors import ConfigError


def normalize_tag_filter(expression: str | None) -> str:
    """A subscription expression ``"TagA || TagB"`` checked and written plainly: ``"TagA || TagB"``,
    or ``""`` for every message (``None``, ``""`` or ``"*"``).

    As RocketMQ: the pieces between ``||`` are trimmed and empty ones skipped (``"TagA || "`` is
    ``"TagA"``). An expression that names no tag (``"||"``) raises ``ConfigError``.
    """
    text = (expression or "").strip()
    if not text or text == "*":
        return ""
    tags = [tag for tag in (piece.strip() for piece in text.split("||")) if tag]
    if not tags:
        raise ConfigError(f"tag filter {expression!r} names no tag: write 'TagA || TagB', or '*' for every message")
    return " || ".join(tags)
