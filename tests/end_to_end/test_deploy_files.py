"""docker-compose.yml and the Dockerfile name commands that exist, with flags they accept; the
monitoring profile's Prometheus scrapes the broker's metrics port and Grafana's dashboard names
only metrics the broker serves. (No Docker engine runs here: the files are checked, not run.)"""

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

from broker_sim import cli as broker_cli
from broker_sim.core.metrics import METRIC_NAMES
from rmq_spark import cli as admin_cli
from support.paths import REPO_ROOT

ROOT = REPO_ROOT


def load_example(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Apache RocketMQ's scripts (bin/ of its distribution, the working directory of its official
# image), with the flags the compose file gives them: the same scripts and flags the real peer runs
# (peers/rocketmq.py starts their Java mains).
ROCKETMQ_SCRIPTS = {"mqnamesrv": set(), "mqbroker": {"-c", "-n"}, "mqadmin": {"-n"}}


def check_command(argv: list[str]) -> None:
    """The command exists and its parser accepts the arguments (argparse exits otherwise)."""
    program, args = argv[0], argv[1:]
    if program == "sh":
        script, flags = args[0], {a for a in args[1:] if a.startswith("-")}
        assert script in ROCKETMQ_SCRIPTS, f"{script} is not one of RocketMQ's scripts"
        assert flags <= ROCKETMQ_SCRIPTS[script], f"{script} takes {ROCKETMQ_SCRIPTS[script]}, not {flags}"
        if script == "mqadmin":
            assert args[1] == "clusterList"
        return
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
        if "monitoring" not in service.get("profiles", ()):  # Prometheus and Grafana: their images' own
            check_command(service["command"])
    for name in services["spark-job"]["depends_on"]:  # the topics, made once the broker is healthy
        assert services["spark-job"]["depends_on"][name]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["broker"]["condition"] == "service_healthy"


def test_compose_runs_the_broker_with_acls_and_every_client_signs_as_an_account_of_its_file():
    """The mounted ACL file parses; each service's --access-key and RMQ_SECRET_KEY are an account
    of it; the job's account may do what the example does, and no more."""
    from broker_sim.acl import Demand, Guard, Perm, load

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    broker = services["broker"]
    acl_path = broker["command"][broker["command"].index("--acl-file") + 1]
    mounted = {volume.split(":")[1]: volume.split(":")[0] for volume in broker["volumes"]}
    accounts = load(ROOT / mounted[acl_path]).accounts
    for name, service in services.items():
        if "monitoring" in service.get("profiles", ()):  # they read the metrics port, which has no ACLs
            continue
        command = service["command"] + broker["healthcheck"]["test"] * (name == "broker")
        if "--access-key" not in command:
            assert "rocketmq" in service.get("profiles", ()), f"{name} does not sign its calls"
            continue
        access_key = command[command.index("--access-key") + 1]
        secret = dict(e.split("=", 1) for e in service["environment"])["RMQ_SECRET_KEY"].split()[0]
        assert accounts[access_key].secret_key == secret, f"{name}'s secret is not {access_key}'s"
    guard = Guard(ROOT / mounted[acl_path])
    etl = accounts["etl"]
    guard.authorize(etl, [Demand.topic("clicks", Perm.PUB), Demand.topic("clicks", Perm.SUB),
                          Demand.topic("page-minute-counts", Perm.PUB), Demand.group("dashboard")])
    with pytest.raises(Exception, match="admin"):
        guard.authorize(etl, [Demand.admin("create topics")])


def test_the_rocketmq_profile_runs_apache_rocketmq_and_the_example_through_its_name_server():
    """docker compose --profile rocketmq: the official image's name server and broker (its
    config file mounted from deploy/), and the Spark example reading and writing through
    nameServer once the broker is healthy."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    profile = {name for name, service in services.items() if "rocketmq" in service.get("profiles", ())}
    assert profile == {"rocketmq-namesrv", "rocketmq-broker", "spark-job-rocketmq"}
    for name in ("rocketmq-namesrv", "rocketmq-broker"):
        assert services[name]["image"].startswith("apache/rocketmq:5.")
    broker = services["rocketmq-broker"]
    config_path = broker["command"][broker["command"].index("-c") + 1]
    mounted = {volume.split(":")[1]: volume.split(":")[0] for volume in broker["volumes"]}
    config = (ROOT / mounted[config_path]).read_text()
    settings = dict(line.split("=", 1) for line in config.splitlines() if line and not line.startswith("#"))
    assert settings["brokerIP1"] == "rocketmq-broker" and settings["namesrvAddr"] == "rocketmq-namesrv:9876"
    assert settings["timerWheelEnable"] == "true"  # the example's pop consumer needs it
    job = services["spark-job-rocketmq"]
    assert job["depends_on"]["rocketmq-broker"]["condition"] == "service_healthy"
    command = job["command"]
    assert command[command.index("--name-server") + 1] == "rocketmq-namesrv:9876"
    for service in (services[name] for name in profile):
        check_command(service["command"])
    check_command(broker["healthcheck"]["test"][1:])


def mounts(service: dict) -> dict[str, Path]:
    """A service's bind mounts: the path in its container -> the file or directory of this repository."""
    pairs = (volume.split(":")[:2] for volume in service.get("volumes", ()))
    return {inside: ROOT / source for source, inside in pairs if source.startswith("./")}


def dashboard_panels(panels: list[dict]):
    """The dashboard's panels, those inside rows too; not the rows."""
    for panel in panels:
        if panel["type"] == "row":
            yield from dashboard_panels(panel.get("panels", []))
        else:
            yield panel


# A name of the broker's metrics in a PromQL expression: a histogram's series end in _bucket, _count
# and _sum, its family has neither.
METRIC_NAME = re.compile(r"(rocketmq|broker_sim)_[a-z_]+")
HISTOGRAM_SERIES = re.compile(r"_(bucket|count|sum)$")


def metrics_named(expr: str) -> set[str]:
    return {HISTOGRAM_SERIES.sub("", match.group(0)) for match in METRIC_NAME.finditer(expr)}


def monitoring() -> tuple[dict, dict]:
    """The compose file's services, and Grafana's dashboard (in the directory Grafana mounts)."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    provider_dir = mounts(services["grafana"])["/etc/grafana/provisioning/dashboards"]
    (provider,) = yaml.safe_load((provider_dir / "rocketmq-batch.yml").read_text())["providers"]
    dashboard_dir = mounts(services["grafana"])[provider["options"]["path"]]
    return services, json.loads((dashboard_dir / "rocketmq-batch.json").read_text())


def test_the_monitoring_services_are_only_in_the_monitoring_profile():
    """docker compose --profile monitoring: Prometheus and Grafana, pinned; plain `docker compose up`
    starts neither and needs neither."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    profile = {name for name, service in services.items() if "monitoring" in service.get("profiles", ())}
    assert profile == {"prometheus", "grafana"}
    assert all(services[name]["profiles"] == ["monitoring"] for name in profile)
    assert re.fullmatch(r"prom/prometheus:v3\.\d+\.\d+", services["prometheus"]["image"])
    assert re.fullmatch(r"grafana/grafana:1[12]\.\d+\.\d+", services["grafana"]["image"])
    for name, service in services.items():
        if name not in profile:
            assert not profile & set(service.get("depends_on", ())), f"{name} depends on the monitoring profile"


def test_prometheus_scrapes_the_metrics_port_the_compose_file_gives_the_broker():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    broker = services["broker"]["command"]
    port = broker[broker.index("--metrics-port") + 1]
    assert f"{port}:{port}" in services["broker"]["ports"]
    # The image's own --config.file (it is given no command of its own).
    assert "command" not in services["prometheus"]
    config = yaml.safe_load(mounts(services["prometheus"])["/etc/prometheus/prometheus.yml"].read_text())
    jobs = [job for job in config["scrape_configs"]
            if any(f"broker:{port}" in static["targets"] for static in job["static_configs"])]
    assert len(jobs) == 1, f"Prometheus should scrape broker:{port} (the broker's --metrics-port) in one job"
    (job,) = jobs
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job.get("scrape_interval", config["global"]["scrape_interval"]) == "15s"


def test_grafana_provisions_prometheus_and_the_dashboard_directory_it_mounts():
    services, dashboard = monitoring()
    grafana = mounts(services["grafana"])
    sources = [source for path in sorted(grafana["/etc/grafana/provisioning/datasources"].glob("*.yml"))
               for source in yaml.safe_load(path.read_text())["datasources"]]
    (prometheus,) = [source for source in sources if source["type"] == "prometheus"]
    published = services["prometheus"]["ports"][0].split(":")[-1]
    assert prometheus["url"] == f"http://prometheus:{published}"
    uids = {target["datasource"]["uid"] for panel in dashboard_panels(dashboard["panels"])
            for target in panel["targets"]}
    uids |= {variable["datasource"]["uid"] for variable in dashboard["templating"]["list"]}
    assert uids == {prometheus["uid"]}, "every query of the dashboard asks the provisioned Prometheus"
    environment = dict(e.split("=", 1) for e in services["grafana"]["environment"])
    home = environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    folder, file = home.rsplit("/", 1)
    assert (grafana[folder] / file).is_file()


def test_the_dashboard_parses_and_every_panel_has_a_query():
    _, dashboard = monitoring()
    assert dashboard["schemaVersion"] >= 39 and dashboard["uid"]
    panels = list(dashboard_panels(dashboard["panels"]))
    assert len(panels) >= 12
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        assert panel["targets"], f"{panel['title']} has no query"
        assert all(target["expr"].strip() and target["refId"] for target in panel["targets"]), panel["title"]


def test_every_metric_the_dashboard_names_is_one_the_broker_serves():
    """A panel naming a metric the broker does not serve (a typo, a family renamed) stays empty
    in Grafana and says nothing: fail here instead."""
    _, dashboard = monitoring()
    queries = [(panel["title"], target["expr"]) for panel in dashboard_panels(dashboard["panels"])
               for target in panel["targets"]]
    queries += [(f"${variable['name']}", variable["definition"]) for variable in dashboard["templating"]["list"]]
    for title, expr in queries:
        named = metrics_named(expr)
        assert named, f"{title}: no metric of the broker in {expr!r}"
        assert named <= METRIC_NAMES, f"{title}: the broker serves no {sorted(named - METRIC_NAMES)}"


def test_the_dockerfile_installs_the_package_and_starts_the_broker():
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    copied = {source for line in lines if line.startswith("COPY") for source in line.split()[1:-1]}
    sdist = re.search(r"\[tool\.hatch\.build\.targets\.sdist\]\s*only-include = (\[.*?\])",
                      (ROOT / "pyproject.toml").read_text(), re.S).group(1)
    for needed in ("pyproject.toml", "examples", *json.loads(sdist)):  # what `pip install .` builds from
        assert needed in copied, f"the image needs {needed}"
        assert (ROOT / needed).exists()
    assert any("openjdk-17" in line for line in lines), "PySpark 4.x needs Java 17+"
    install = next(line for line in lines if line.startswith("RUN pip install"))
    assert "[spark,broker]" in install, "the image runs the broker and Spark jobs: both extras"
    cmd = next(line for line in lines if line.startswith("CMD"))
    check_command(yaml.safe_load(cmd[len("CMD"):]))  # the exec form is a JSON list
