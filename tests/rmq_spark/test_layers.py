"""How the SDK's modules depend on each other: each imports alone, the parts import one another
without a cycle, and only the gRPC transport knows grpc and our protobuf messages (so that
another transport is one more module beside it)."""

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import rmq_spark

PACKAGE = Path(rmq_spark.__file__).parent
# The transports: our gRPC contract's, and RocketMQ's remoting protocol's (a package of parts).
WIRE_MODULES = ("rmq_spark.client.grpc_transport", "rmq_spark.client.remoting")  # a module, a package


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
# The wire's protocols (rmq_wire's generated gRPC code and RocketMQ's remoting protocol).
PROTOCOLS = ("rmq_wire.contract", "rmq_wire.rocketmq_v2", "rmq_wire.remoting")


def imported(module: str) -> set[str]:
    """Every module ``module`` imports, at its top or inside a function, as absolute names."""
    path = SOURCES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            names.add(name)
            names.update(f"{name}.{alias.name}" for alias in node.names)  # "from . import x": a module
    return names


def part(module: str) -> str:
    """The part of the SDK a module belongs to: a subpackage, or a top-level module."""
    return ".".join(module.split(".")[:2])


@pytest.fixture(scope="module")
def lone_imports(request):
    """Each selected module imported alone, each in a fresh interpreter of its own, as many at
    once as there are cores (one after another they were an eighth of the quick tier)."""
    selected = [item.callspec.params["module"] for item in request.session.items
                if item.originalname == "test_every_module_imports_alone_in_a_fresh_interpreter"]

    def import_alone(module: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(os.cpu_count() or 2, thread_name_prefix="lone-import") as pool:
        yield {module: pool.submit(import_alone, module) for module in selected}
        # leaving the block waits for the imports a failed test did not ask for


@pytest.mark.parametrize("module", sorted(m for m in SOURCES if not m.endswith(".__main__")))  # (those run)
def test_every_module_imports_alone_in_a_fresh_interpreter(module, lone_imports):
    done = lone_imports[module].result()
    assert done.returncode == 0, f"import {module} alone fails:\n{done.stderr[-2000:]}"


def test_the_parts_of_the_sdk_import_one_another_without_a_cycle():
    graph: dict[str, set[str]] = {}
    for module in SOURCES:
        uses = {part(name) for name in imported(module) if name.startswith("rmq_spark.")}
        graph.setdefault(part(module), set()).update(uses - {part(module)})

    def cycle_from(start, node, seen):
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return [node, nxt]
            if nxt not in seen:
                seen.add(nxt)
                rest = cycle_from(start, nxt, seen)
                if rest:
                    return [node] + rest
        return None

    for start in sorted(graph):
        cycle = cycle_from(start, start, set())
        assert cycle is None, f"import cycle between the SDK's parts: {' -> '.join(cycle)}"


def test_the_transport_seam_imports_none_of_its_implementations():
    """transport.py is what the transports build on; client/connect.py picks one (no circle)."""
    implementations = {"rmq_spark.client.grpc_transport", "rmq_spark.client.remoting"}
    assert imported("rmq_spark.client.transport") & implementations == set()


def test_only_the_transports_import_a_wire_format():
    wire = {module: sorted(name for name in imported(module)
                           if name.split(".")[0] == "grpc" or name.startswith(PROTOCOLS))
            for module in SOURCES}
    assert {module: names for module, names in wire.items() if names and not module.startswith(WIRE_MODULES)} == {}
