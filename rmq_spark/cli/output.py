"""What rmq-admin prints: a table for people, JSON for machines, and output that ends quietly
when its reader does (``rmq-admin topic list --json | head``)."""

from __future__ import annotations

import json
import os
import sys


def table(rows: list[dict], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [["-" if row.get(c) is None else str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])


def show(rows: list[dict], columns: list[str], as_json: bool) -> None:
    print(json.dumps(rows, indent=1) if as_json else table(rows, columns), flush=True)


def reader_gone() -> None:
    """stdout's reader closed it (``| head``): what is left unwritten goes nowhere, quietly, and
    Python's flush at exit finds nothing to complain of."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (a test's capture)
        pass


def with_broker(rows: list[dict], columns: list[str], at: int = 0) -> list[str]:
    """The table's columns, with the broker's where a row names one (through name servers)."""
    if not any(row.get("broker") for row in rows):
        for row in rows:
            row.pop("broker", None)
        return columns
    return columns[:at] + ["broker"] + columns[at:]


PREVIEW_CHARS = 60  # of a body, in a table


def preview(text: str) -> str:
    text = text.replace("\n", "\\n").replace("\t", "\\t")
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 3] + "..."
