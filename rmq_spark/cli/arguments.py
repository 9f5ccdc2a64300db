"""What the commands' arguments mean: times, durations, and the clients the flags point to."""

from __future__ import annotations

import argparse
import datetime
import re


def timestamp_ms(text: str) -> int:
    """An ISO time (UTC unless it names its offset) in milliseconds since the epoch."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO time (for example 2026-11-27T10:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


_ISO_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")
_SHORT_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int:
    """A duration as Kafka's --by-duration takes it (ISO 8601: PT1H30M, P1DT2H) or short (90s,
    15m, 1h, 2d), in milliseconds."""
    value = text.strip()
    iso = _ISO_DURATION.fullmatch(value.upper())
    if iso and value.upper() not in ("P", "PT"):
        days, hours, minutes, seconds = (float(part or 0) for part in iso.groups())
        return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
    short = _SHORT_DURATION.fullmatch(value.lower())
    if short:
        return int(float(short.group(1)) * _UNIT_MS[short.group(2)])
    raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give PT1H30M (ISO 8601, as Kafka's --by-duration) "
                                     "or 90s, 15m, 1h, 2d")


def client(kind, args, **options):
    """A Producer or RangeReader to where the flags point."""
    if args.name_server is not None:
        return kind(name_server=args.name_server, transport=args.transport, **options)
    return kind(args.endpoint, transport=args.transport, **options)
