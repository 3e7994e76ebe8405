"""Issue 6: the Procfile and deploy/ files parse, and every command they run exists."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
YAML_FILES = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml"))
QUEUES = {"reactq.runs", "reactq.tools", "reactq.webhooks"}


def procfile() -> dict[str, str]:
    entries = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, command = line.partition(":")
            entries[name.strip()] = command.strip()
    return entries


def argv_of(command: str) -> list[str]:
    """A Procfile command as argv, with ``${VAR:-default}`` expanded to its default."""
    return shlex.split(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", command))


def _option_names(command: Any) -> set[str]:
    return {opt for p in command.params for opt in getattr(p, "opts", [])}


def check_reactq(argv: list[str]) -> None:
    """``reactq SUBCOMMAND --options``: console script declared, subcommand and options exist."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "reactq" in scripts, "pyproject declares no `reactq` console script"
    module, _, attr = scripts["reactq"].partition(":")
    assert callable(getattr(importlib.import_module(module), attr))
    try:
        cli = importlib.import_module("reactq.dispatcher.cli")
    except ImportError:
        pytest.skip("dispatcher/cli/ is not there yet")
    import typer.main

    # typer's group (its own vendored click in newer releases): read its commands by name.
    commands: dict[str, Any] = typer.main.get_command(cli.app).commands
    sub = argv[1]
    assert sub in commands, f"`reactq {sub}` is not a command of dispatcher/cli/"
    options = _option_names(commands[sub])
    for word in argv[2:]:
        if word.startswith("-"):
            name = word.split("=", 1)[0]
            assert name in options, f"`reactq {sub}` has no option {name} (has {sorted(options)})"


def check_celery(argv: list[str]) -> None:
    """``celery -A MODULE SUBCOMMAND``: the app module imports and has the subcommand."""
    assert importlib.util.find_spec("celery") is not None
    app_module = argv[argv.index("-A") + 1]
    module = importlib.import_module(app_module)
    assert hasattr(module, "app"), f"{app_module} has no Celery `app`"
    sub = next(a for a in argv[argv.index("-A") + 2:] if not a.startswith("-"))
    assert sub in ("worker", "flower", "beat", "inspect", "events")
    if sub == "flower":
        assert importlib.util.find_spec("flower") is not None, "flower is not installed"
        if "--queues" in argv or "-Q" in argv:
            pytest.fail("flower takes no queues")
    for flag in ("-Q", "--queues"):
        if flag in argv:
            assert set(argv[argv.index(flag) + 1].split(",")) <= QUEUES


def check_command(argv: list[str]) -> None:
    exe = argv[0]
    if exe == "reactq":
        check_reactq(argv)
        for flag in ("--queues", "-Q"):
            if flag in argv:
                assert set(argv[argv.index(flag) + 1].split(",")) <= QUEUES
    elif exe == "celery":
        check_celery(argv)
    else:
        pytest.fail(f"unexpected executable {exe!r}")


# -- Procfile ----------------------------------------------------------------------------

def test_the_procfile_has_the_five_process_types():
    assert set(procfile()) == {"web", "worker", "toolworker", "scheduler", "flower"}
    entries = {k: argv_of(v) for k, v in procfile().items()}
    assert entries["web"][:2] == ["reactq", "serve"]
    assert entries["worker"][:2] == ["reactq", "worker"]
    assert entries["toolworker"][entries["toolworker"].index("--queues") + 1] == "reactq.tools"
    assert entries["flower"][:4] == ["celery", "-A", "reactq.workers.app", "flower"]
    assert entries["scheduler"] == ["reactq", "scheduler"]


@pytest.mark.parametrize("name", ["web", "worker", "toolworker", "scheduler", "flower"])
def test_each_procfile_command_exists(name):
    check_command(argv_of(procfile()[name]))


# -- YAML ----------------------------------------------------------------------------------

def test_there_are_yaml_files_to_check():
    names = {p.name for p in YAML_FILES}
    assert "docker-compose.yml" in names
    assert any(p.parent.name == "k8s" for p in YAML_FILES)


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs and all(isinstance(d, dict) for d in docs)


def k8s_docs() -> list[dict[str, Any]]:
    docs = []
    for path in YAML_FILES:
        if path.parent.name == "k8s":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    return deployment["spec"]["template"]["spec"]["containers"]


def test_k8s_objects_are_well_formed():
    for doc in k8s_docs():
        assert {"apiVersion", "kind", "metadata"} <= set(doc), doc
        assert doc["metadata"].get("name")


def test_k8s_deployments_select_their_pods_request_resources_and_run_existing_commands():
    deployments = {d["metadata"]["name"]: d for d in k8s_docs() if d["kind"] == "Deployment"}
    assert {"reactq-web", "reactq-worker", "reactq-toolworker", "reactq-scheduler", "reactq-flower"} <= set(deployments)
    for name, dep in deployments.items():
        selector = dep["spec"]["selector"]["matchLabels"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), name
        for c in _containers(dep):
            requests = c.get("resources", {}).get("requests", {})
            assert {"cpu", "memory"} <= set(requests), f"{name}/{c['name']} has no resource requests"
            if name.startswith("reactq-"):
                check_command(c["command"])


def test_the_web_deployment_is_ready_on_readyz_alive_on_healthz_behind_a_service():
    docs = k8s_docs()
    web = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "reactq-web")
    container = _containers(web)[0]
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    assert probe["port"] in ports or probe["port"] in ports.values()
    labels = web["spec"]["template"]["metadata"]["labels"]
    services = [d for d in docs if d["kind"] == "Service"
                and d["spec"]["selector"].items() <= labels.items()]
    assert services, "no Service selects the web pods"


def test_the_autoscaling_example_scales_workers_on_queue_length():
    docs = k8s_docs()
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    scaled = [d for d in docs if d["kind"] == "ScaledObject"]
    assert scaled
    for obj in scaled:
        assert obj["spec"]["scaleTargetRef"]["name"] in deployments
        for trigger in obj["spec"]["triggers"]:
            assert trigger["type"] == "redis"
    # Webhook deliveries ride on the worker pods and are no scaling signal of their own.
    assert {t["metadata"]["listName"] for o in scaled for t in o["spec"]["triggers"]} >= QUEUES - {"reactq.webhooks"}


def _priority_lists(queue: str) -> set[str]:
    """kombu's Redis lists of one queue: the plain one (priority 0) and one per other step."""
    from kombu.transport.redis import Channel

    return {queue if step == 0 else f"{queue}{Channel.sep}{step}" for step in Channel.priority_steps}


def test_the_autoscaler_counts_every_priority_list_of_each_queue_and_sums_them():
    from reactq.shared.wire import MESSAGE_PRIORITY

    assert max(MESSAGE_PRIORITY.values()) > 0  # batch work is sent to a priority list, not the plain one
    for obj in (d for d in k8s_docs() if d["kind"] == "ScaledObject"):
        triggers = obj["spec"]["triggers"]
        lists = {t["metadata"]["listName"] for t in triggers}
        queue = min(lists, key=len)
        assert lists == _priority_lists(queue), obj["metadata"]["name"]
        formula = obj["spec"]["advanced"]["scalingModifiers"]["formula"]
        assert {t["name"] for t in triggers} == {n.strip() for n in formula.split("+")}


# The scheduler has no probe by design: a standby blocks on celery-redbeat's lock, and a hung
# active one loses the lock to a standby within seconds (its file says so).
NO_PROBE = {"reactq-scheduler", "scheduler"}


def test_every_container_has_probes_and_workers_a_liveness_probe_on_their_alive_file():
    for dep in (d for d in k8s_docs() if d["kind"] == "Deployment"):
        if dep["metadata"]["name"] in NO_PROBE:
            assert "No liveness probe, by design" in (DEPLOY / "k8s" / "scheduler.yaml").read_text()
            continue
        for c in _containers(dep):
            assert "livenessProbe" in c and ("readinessProbe" in c or "startupProbe" in c), c["name"]
            if dep["metadata"]["name"] in ("reactq-worker", "reactq-toolworker"):
                env = {e["name"]: e.get("value") for e in c.get("env", [])}
                alive = env["REACTQ_WORKER_ALIVE_FILE"]
                assert alive in " ".join(c["livenessProbe"]["exec"]["command"])


def test_workers_and_the_gateway_have_a_disruption_budget():
    budgets = [d for d in k8s_docs() if d["kind"] == "PodDisruptionBudget"]
    covered = {b["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for b in budgets}
    assert {"reactq-worker", "reactq-toolworker", "reactq-web", "reactq-scheduler"} <= covered


def test_flower_has_no_default_password():
    flower = next(d for d in k8s_docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == "reactq-flower")
    env = {e["name"]: e for e in _containers(flower)[0].get("env", [])}
    ref = env["FLOWER_BASIC_AUTH"]["valueFrom"]["secretKeyRef"]
    assert not ref.get("optional", False)
    compose = (DEPLOY / "docker-compose.yml").read_text()
    auth = yaml.safe_load(compose)["services"]["flower"]["environment"]["FLOWER_BASIC_AUTH"]
    assert re.fullmatch(r"\$\{FLOWER_BASIC_AUTH:\?[^}]+\}", auth), auth


def test_every_compose_service_has_a_healthcheck_and_workers_check_their_alive_file():
    services = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    for name, svc in services.items():
        assert "healthcheck" in svc or name in NO_PROBE, name
    alive = services["worker"]["environment"]["REACTQ_WORKER_ALIVE_FILE"]
    for name in ("worker", "toolworker"):
        assert alive in " ".join(services[name]["healthcheck"]["test"])


def test_compose_runs_redis_web_two_workers_a_toolworker_schedulers_and_flower():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"redis", "web", "worker", "toolworker", "scheduler", "flower"} <= set(services)
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["scheduler"]["command"] == ["reactq", "scheduler"]
    for name in ("web", "worker", "toolworker", "scheduler", "flower"):
        svc = services[name]
        check_command(svc["command"])
        assert svc["environment"]["REACTQ_REDIS_URL"].startswith("redis://redis:")
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
    tools = services["toolworker"]["command"]
    assert tools[tools.index("--queues") + 1] == "reactq.tools"


# -- Dockerfile ----------------------------------------------------------------------------

def test_the_dockerfile_is_slim_and_runs_as_a_non_root_user():
    lines = [ln.strip() for ln in (DEPLOY / "Dockerfile").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    froms = [ln.split()[1] for ln in lines if ln.upper().startswith("FROM ")]
    assert froms and re.match(r"python:3\.1[1-9]-slim", froms[-1])
    users = [ln.split()[1] for ln in lines if ln.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert any(ln.startswith("RUN pip install") for ln in lines)
    # Sources from the build context (a multi-stage build also copies from its build stage).
    copied = {w for ln in lines if ln.upper().startswith("COPY ") and "--from" not in ln
              for w in ln.split()[1:-1]}
    assert copied
    for src in copied:
        assert (ROOT / src).exists(), f"the Dockerfile copies {src}, which is not in the repository"
    assert any(ln.upper().startswith(("CMD ", "ENTRYPOINT ")) for ln in lines)
