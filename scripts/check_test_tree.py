"""A rule of the test tree (`make lint` runs it): tests/ mirrors the packages. A folder under
tests/rmq_wire, tests/broker_sim or tests/rmq_spark names a package of the same path (its
tests sit beside the code they test); the tests that are not one package's live in
tests/end_to_end, tests/peers and tests/fuzz, and what tests share in tests/support. Nothing
else sits at the top of tests/ but conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PACKAGES = ("rmq_wire", "broker_sim", "rmq_spark")
APART = {"end_to_end", "peers", "fuzz", "support"}  # not one package's
TOP_FILES = {"conftest.py"}
SKIPPED = {"__pycache__", "node_modules", ".pytest_cache"}


def problems() -> list[str]:
    found = []
    for entry in sorted(TESTS.iterdir()):
        if entry.name in SKIPPED or entry.name.startswith("."):
            continue
        if entry.is_file() and entry.suffix == ".py" and entry.name not in TOP_FILES:
            found.append(f"tests/{entry.name}: a test file at the top of tests/; move it beside the package it "
                         f"tests (tests/<package>/...), or to tests/end_to_end, tests/support")
        elif entry.is_dir() and entry.name not in PACKAGES and entry.name not in APART:
            found.append(f"tests/{entry.name}/: names no package; use tests/<package path>/ ({', '.join(PACKAGES)}) "
                         f"or one of {', '.join(sorted(APART))}")
    for package in PACKAGES:
        for folder in sorted(p for p in (TESTS / package).rglob("*") if p.is_dir()):
            relative = folder.relative_to(TESTS)
            if SKIPPED & set(relative.parts) or not any(folder.glob("test_*.py")):
                continue  # a folder of data (node projects) or helpers beside the tests
            if not (ROOT / relative / "__init__.py").exists():
                found.append(f"tests/{relative}/: there is no package {relative.as_posix().replace('/', '.')}; "
                             "tests sit beside the package they test")
    return found


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
