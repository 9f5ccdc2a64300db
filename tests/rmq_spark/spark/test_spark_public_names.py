"""rmq_spark.spark is built on the SDK's public names only: read from its source, every
import of rmq_spark there names something ``rmq_spark`` exports, or a sibling module; and nothing
of grpc, the protocol, the wire's codecs or broker_sim (of rmq_wire, only the unit parser both
products share)."""

import ast
from pathlib import Path

import rmq_spark

SPARK_DIR = Path(rmq_spark.__file__).parent / "spark"
SPARK_MODULES = sorted(SPARK_DIR.glob("*.py"))
NOT_FOR_THE_CONNECTOR = ("grpc", "google.protobuf", "broker_sim", "rmq_wire")
SHARED_HELPERS = ("rmq_wire.units",)
# Exactly once through name servers sends RocketMQ's half messages, a row at a time, routed as the
# producer routes rows: not an SDK feature of its own (yet), so its module reaches these.
HALF_MESSAGE_WRITER = {"sink_rocketmq.py": {"rmq_spark.client.connect", "rmq_spark.producer.columns",
                                            "rmq_spark.producer.routing", "rmq_spark.structs"}}


def imports(path: Path):
    """(level, module, names) of each import of ``path``: level 0 for absolute imports."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield 0, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            yield node.level, node.module or "", [alias.name for alias in node.names]


def test_spark_modules_import_only_the_sdks_public_names_and_their_siblings():
    assert len(SPARK_MODULES) > 5
    wrong = []
    for path in SPARK_MODULES:
        for level, module, names in imports(path):
            where = f"{path.name}: {'.' * level}{module} {names}"
            if level == 1:  # a sibling: rmq_spark.spark.<module>, or the package itself
                if module and not (SPARK_DIR / f"{module.split('.')[0]}.py").exists():
                    wrong.append(where)
            elif (level == 2 and module) or level > 2:  # rmq_spark.<module>: not the public names
                wrong.append(where)
            elif level == 2 or module == "rmq_spark":
                wrong += [f"{where}: {name} is not exported" for name in names if name not in rmq_spark.__all__]
            elif module == "rmq_spark.spark" or module.startswith("rmq_spark.spark."):  # a sibling, named whole
                if module != "rmq_spark.spark" and not (SPARK_DIR / f"{module.split('.')[2]}.py").exists():
                    wrong.append(where)
            elif module in SHARED_HELPERS or module in HALF_MESSAGE_WRITER.get(path.name, ()):
                pass
            elif module.startswith(("rmq_spark.", *NOT_FOR_THE_CONNECTOR)):
                wrong.append(where)
    assert wrong == [], "rmq_spark.spark must import only `from .. import <name in rmq_spark.__all__>`"


def test_every_exported_name_resolves_and_is_documented():
    for name in rmq_spark.__all__:
        value = getattr(rmq_spark, name)
        assert (getattr(value, "__doc__", None) or "").strip(), f"rmq_spark.{name} has no docstring"


def test_the_data_source_has_a_module_of_its_own_that_pysparks_lookup_finds():
    import pkgutil

    import pyspark_rocketmq_batch
    from rmq_spark.spark import RocketMQBatchDataSource

    assert RocketMQBatchDataSource.__module__ == "rmq_spark.spark.datasource"
    assert pyspark_rocketmq_batch.DefaultSource is RocketMQBatchDataSource
    assert "pyspark_rocketmq_batch" in {module.name for module in pkgutil.iter_modules()}  # as PySpark lists them
