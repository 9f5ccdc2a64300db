"""Helpers of the pop tests (a module of its own: conftest modules are not importable)."""

from broker_sim.store import format as fmt


def bodies(node, result) -> list[bytes]:
    """The bodies of a pop's single-message deliveries, in order."""
    out, at = [], 0
    for delivery in result.deliveries:
        record = fmt.decode_record(result.records[at:at + delivery.record_size])
        out.append(bytes(record.body))
        at += delivery.record_size
    return out


def handles(result) -> list[str]:
    return [d.receipt_handle for d in result.deliveries]
