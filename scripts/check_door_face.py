"""A rule the import contract cannot see (`make lint` runs it): the doors call the broker core's
face only, never reach through it to its parts at run time (``core.store``, ``core.pop_service``,
...). What a door needs of them, the core says (broker_sim/core/core.py)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

DOORS = Path(__file__).resolve().parent.parent / "broker_sim" / "doors"
PARTS = {"store", "offsets", "transactions", "pop_service", "schedule"}  # the core's own parts


def reaches(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in PARTS:
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("core", "_core"):
                where = f"{path.relative_to(DOORS.parent.parent)}:{node.lineno}"
                found.append((node.lineno, f"{where}: {name}.{node.attr}"))
    return [line for _lineno, line in sorted(found)]


def main() -> int:
    found = [line for path in sorted(DOORS.rglob("*.py")) for line in reaches(path)]
    for line in found:
        print(f"{line}: a door reaches into the core's parts; call (or add) a method of BrokerCore instead")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
