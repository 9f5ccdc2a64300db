"""docker-compose.yml and the Dockerfile name commands that exist, with flags they accept.
(No Docker engine runs here: the files are checked, not run.)"""

import importlib.util
from pathlib import Path

import pytest
import yaml

from broker_sim.server import cli as broker_cli
from rmq_spark.client import cli as admin_cli

ROOT = Path(__file__).resolve().parents[2]


def load_example(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_command(argv: list[str]) -> None:
    """The command exists and its parser accepts the arguments (argparse exits otherwise)."""
    program, args = argv[0], argv[1:]
    if program == "rmq-broker-sim":
        broker_cli.parser().parse_args(args)
    elif program == "rmq-admin":
        admin_cli.parser().parse_args(args)
    elif program == "python":
        script = ROOT / args[0]
        assert script.is_file(), f"{args[0]} does not exist"
        load_example(script).parse_args(args[1:])
    else:
        pytest.fail(f"unknown program {program!r} in {argv}")


def test_every_compose_command_exists_with_its_flags():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"broker", "spark-job"} <= set(services)
    broker = services["broker"]
    assert any(volume.endswith(":/data") for volume in broker["volumes"]), "the broker's data needs a volume"
    assert "--data-dir" in broker["command"] and broker["command"][broker["command"].index("--data-dir") + 1] == "/data"
    health = broker["healthcheck"]["test"]
    assert health[0] == "CMD"
    check_command(health[1:])
    for _name, service in services.items():
        check_command(service["command"])
    assert services["spark-job"]["depends_on"]["broker"]["condition"] == "service_healthy"


def test_the_dockerfile_installs_the_package_and_starts_the_broker():
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    copied = {line.split()[1] for line in lines if line.startswith("COPY")}
    for needed in ("setup.py", "broker_sim", "rmq_spark", "pyspark_rocketmq_batch.py", "examples"):
        assert needed in copied, f"the image needs {needed}"
        assert (ROOT / needed).exists()
    assert any("openjdk-17" in line for line in lines), "PySpark 4.x needs Java 17+"
    assert any(line.startswith("RUN pip install") for line in lines)
    cmd = next(line for line in lines if line.startswith("CMD"))
    check_command(yaml.safe_load(cmd[len("CMD"):]))  # the exec form is a JSON list
