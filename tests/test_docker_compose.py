"""docker-compose.yml and the Dockerfile, checked statically (no Docker engine runs here).

The compose file is parsed with PyYAML and held against the code it deploys: the queues of
``CeleryQueue``, the fields of ``Settings``, the ``memharness`` command line and the packages
``pyproject.toml`` installs. A renamed queue, setting or flag fails here, not in a user's
``docker compose up``.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.settings import Settings
from memharness.cli import build_parser
from workers.queues import VECTOR_QUEUES, CeleryQueue

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_PATH = ROOT / "docker-compose.yml"
DOCKERFILE_PATH = ROOT / "Dockerfile"

WORKER_QUEUES = {
    "worker-write": {"write", "embed", "recall"},
    "worker-background": {"consolidate", "compress", "quality"},
    "worker-maintenance": {"maintenance"},
}
# Official images of other projects; the rest run the project's one image.
THIRD_PARTY = {"redis", "postgres", "qdrant", "prometheus", "grafana"}
SERVICES = {
    "migrate", "beat", "flower", "demo", "api", *WORKER_QUEUES, *THIRD_PARTY,
}  # fmt: skip

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}
_INTERPOLATION_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_PATH.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def argv(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = [item.split("=", 1) if "=" in item else [item, None] for item in env]
        return {name: value for name, value in pairs}
    return {str(name): (None if value is None else str(value)) for name, value in env.items()}


def interpolate(value: str, shell: dict[str, str]) -> str:
    """Compose's variable substitution, for the forms this file uses."""

    def substitute(match: re.Match[str]) -> str:
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        present = shell.get(name)
        if operator in (":-", "-"):
            usable = present if operator == "-" else (present or None)
            return usable if usable is not None else argument
        if operator in (":?", "?") and not (present if operator == ":?" else name in shell):
            raise LookupError(f"{name}: {argument}")
        return present or ""

    return _INTERPOLATION_RE.sub(substitute, value.replace("$$", "\0")).replace("\0", "$")


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def queues_of(service: dict[str, Any]) -> set[str]:
    args = build_parser().parse_args(argv(service)[1:])
    assert args.command == "worker"
    return {queue.strip() for queue in args.queues.split(",") if queue.strip()}


# -- services --------------------------------------------------------------------------------


def test_every_service_of_the_deployment_is_declared(services: dict[str, Any]) -> None:
    assert set(services) >= SERVICES


def test_each_worker_consumes_its_group_of_queues(services: dict[str, Any]) -> None:
    for name, expected in WORKER_QUEUES.items():
        assert argv(services[name])[:2] == ["memharness", "worker"], name
        assert queues_of(services[name]) == expected, name


def test_every_queue_is_consumed_by_exactly_one_worker_group(services: dict[str, Any]) -> None:
    consumed: list[str] = []
    for service in services.values():
        if argv(service)[:2] == ["memharness", "worker"]:
            consumed.extend(queues_of(service))
    assert sorted(consumed) == sorted(queue.value for queue in CeleryQueue)


def test_workers_that_touch_vectors_share_the_qdrant_server(services: dict[str, Any]) -> None:
    # given the embedded store allows one process, a scaled-out worker must use the server
    vector_queues = {queue.value for queue in VECTOR_QUEUES}
    for name, service in services.items():
        if argv(service)[:2] != ["memharness", "worker"] or not queues_of(service) & vector_queues:
            continue
        assert environment(service).get("MEMHARNESS_QDRANT_URL") == "http://qdrant:6333", name
        assert "qdrant" in depends_on(service), name
    assert "MEMHARNESS_QDRANT_URL" in environment(services["worker-write"])


def test_worker_health_checks_ping_the_worker_by_its_own_name(services: dict[str, Any]) -> None:
    for name in WORKER_QUEUES:
        service = services[name]
        worker_name = build_parser().parse_args(argv(service)[1:]).name
        test = service["healthcheck"]["test"]
        command = test[1] if isinstance(test, list) else test
        assert f"inspect ping -d {worker_name}@$$HOSTNAME" in command, name


def test_every_memharness_command_is_one_the_cli_accepts(services: dict[str, Any]) -> None:
    commands = {name: argv(s) for name, s in services.items() if argv(s)[:1] == ["memharness"]}
    assert set(commands) == {"migrate", "beat", "demo", "api", *WORKER_QUEUES}
    for name, args in commands.items():
        # argparse exits (SystemExit fails the test) on an unknown subcommand or flag
        parsed = build_parser().parse_args(args[1:])
        assert parsed.command == args[1], name
    assert [commands[name][1] for name in ("migrate", "beat", "demo")] == [
        "migrate",
        "beat",
        "demo",
    ]


def test_migrate_runs_once_after_postgres_is_healthy(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    assert migrate["restart"] == "no"
    assert depends_on(migrate) == {"postgres": "service_healthy"}
    for name in (*WORKER_QUEUES, "beat", "api"):
        assert depends_on(services[name])["migrate"] == "service_completed_successfully", name


def test_postgres_has_a_healthcheck_and_a_volume(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    postgres = services["postgres"]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    volume = postgres["volumes"][0].split(":", 1)[0]
    assert volume in compose["volumes"]


def test_qdrant_is_the_official_image_with_a_named_volume(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    qdrant = services["qdrant"]
    assert qdrant["image"].startswith("qdrant/qdrant:")
    source, target = qdrant["volumes"][0].split(":", 1)
    assert target == "/qdrant/storage"
    assert source in compose["volumes"]


def test_depends_on_names_existing_services_with_meaningful_conditions(
    services: dict[str, Any],
) -> None:
    for name, service in services.items():
        for target, condition in depends_on(service).items():
            assert target in services, f"{name} depends on unknown service {target}"
            assert target != name
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{name}: {target} has no healthcheck"
            elif condition == "service_completed_successfully":
                assert services[target].get("restart") == "no", f"{name}: {target} restarts"
            else:
                assert condition == "service_started", (name, target, condition)


def test_the_demo_agent_waits_for_healthy_workers(services: dict[str, Any]) -> None:
    deps = depends_on(services["demo"])
    for name in WORKER_QUEUES:
        assert deps[name] == "service_healthy"


# -- Flower ----------------------------------------------------------------------------------


def test_flower_requires_basic_auth_from_the_environment(services: dict[str, Any]) -> None:
    flower = services["flower"]
    env = environment(flower)
    auth = env["FLOWER_BASIC_AUTH"]
    assert auth is not None
    assert re.fullmatch(r"\$\{MEMHARNESS_FLOWER_BASIC_AUTH:\?[^}]+\}", auth), auth
    assert env["MEMHARNESS_FLOWER_BASIC_AUTH"] == auth
    # no credentials in the command line (visible to `ps` and `docker inspect`)
    assert not any("basic-auth" in part or "basic_auth" in part for part in argv(flower))
    assert argv(flower)[:4] == ["celery", "-A", "workers.app:app", "flower"]


def test_flower_refuses_to_start_without_credentials(services: dict[str, Any]) -> None:
    auth = environment(services["flower"])["FLOWER_BASIC_AUTH"] or ""
    with pytest.raises(LookupError, match="set MEMHARNESS_FLOWER_BASIC_AUTH"):
        interpolate(auth, {})
    assert interpolate(auth, {"MEMHARNESS_FLOWER_BASIC_AUTH": "ops:s3cret"}) == "ops:s3cret"


# -- the HTTP API ----------------------------------------------------------------------------


def test_the_api_serves_on_all_interfaces_of_its_container_at_its_port(
    services: dict[str, Any],
) -> None:
    api = services["api"]
    args = build_parser().parse_args(argv(api)[1:])
    assert (args.command, args.host) == ("serve", "0.0.0.0")
    port = int(environment(api)["MEMHARNESS_API_PORT"] or 0)
    # published on the host's loopback only: TLS and exposure belong to a proxy
    published = interpolate(api["ports"][0], {})
    assert published == f"127.0.0.1:8080:{port}"
    assert interpolate(api["ports"][0], {"MEMHARNESS_API_PORT": "9000"}) == f"127.0.0.1:9000:{port}"


def test_the_api_health_check_asks_healthz_on_its_own_port(services: dict[str, Any]) -> None:
    api = services["api"]
    port = environment(api)["MEMHARNESS_API_PORT"]
    test = api["healthcheck"]["test"]
    assert test[0] == "CMD"
    assert f"http://127.0.0.1:{port}/healthz" in " ".join(test)
    # the image is python:3.11-slim: no curl or wget, so the check uses Python itself
    assert test[1] == "python" and "urllib.request" in test[-1]
    assert depends_on(api)["postgres"] == "service_healthy"
    assert depends_on(api)["redis"] == "service_healthy"


def test_the_api_answers_context_with_the_shared_qdrant(services: dict[str, Any]) -> None:
    # with a Qdrant server, context() runs in the API process itself (no embedded owner)
    assert environment(services["api"])["MEMHARNESS_QDRANT_URL"] == "http://qdrant:6333"
    assert "qdrant" in depends_on(services["api"])


# -- settings --------------------------------------------------------------------------------


def test_every_memharness_variable_in_the_file_is_a_setting() -> None:
    text = COMPOSE_PATH.read_text(encoding="utf-8")
    used = set(re.findall(r"\bMEMHARNESS_([A-Z0-9_]+)", text))
    assert used, "the compose file configures nothing through MEMHARNESS_*"
    unknown = {f"MEMHARNESS_{name}" for name in used if name.lower() not in Settings.model_fields}
    assert not unknown


def test_the_services_environment_makes_valid_settings(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a user who exported nothing but the Flower password
    shell = {"MEMHARNESS_FLOWER_BASIC_AUTH": "ops:s3cret"}
    for name in list(Settings.model_fields):
        monkeypatch.delenv(f"MEMHARNESS_{name.upper()}", raising=False)

    for name, service in services.items():
        env = environment(service)
        if not any(key.startswith("MEMHARNESS_") for key in env):
            continue
        with monkeypatch.context() as scoped:
            for key, value in env.items():
                if value is None:  # copied from the shell only when set there
                    if key in shell:
                        scoped.setenv(key, shell[key])
                    continue
                scoped.setenv(key, interpolate(value, shell))
            # when a process of the service reads its settings
            settings = Settings()
        # then they validate, point at the compose services, and without a key stay offline
        assert settings.qdrant_url == "http://qdrant:6333", name
        assert "@postgres:5432/" in settings.database_url, name
        assert settings.redis_url.startswith("redis://redis:6379"), name
        assert settings.llm_is_remote is False, name


def test_the_llm_key_is_passed_through_only_when_set() -> None:
    # An empty MEMHARNESS_LLM_API_KEY counts as a key and selects the remote adapter, so the
    # file must never default it to "".
    text = COMPOSE_PATH.read_text(encoding="utf-8")
    assert re.search(r"^\s+MEMHARNESS_LLM_API_KEY:\s*$", text, re.M)
    assert "MEMHARNESS_LLM_API_KEY:-" not in text


# -- the image -------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE_PATH.read_text(encoding="utf-8").replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    instructions = []
    for line in lines:
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_every_service_of_the_project_runs_the_one_image(services: dict[str, Any]) -> None:
    ours = {name for name, s in services.items() if "build" in s}
    assert ours == SERVICES - THIRD_PARTY
    for name in ours:
        build = services[name]["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        assert (ROOT / context / "Dockerfile").resolve() == DOCKERFILE_PATH, name
        assert services[name]["image"] == services["migrate"]["image"], name


def test_the_dockerfile_installs_the_project_on_python_311_slim() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    installs = [
        rest for keyword, rest in instructions if keyword == "RUN" and "pip install" in rest
    ]
    assert installs, "the image never installs the project"
    assert any(re.search(r"pip install (?:-c requirements\.lock )?\.(?:\s|$)", i) for i in installs)
    assert any(keyword == "USER" and rest != "root" for keyword, rest in instructions)


def test_the_dockerfile_copies_every_package_and_only_files_that_exist() -> None:
    copied: set[str] = set()
    for keyword, rest in dockerfile_instructions():
        if keyword == "COPY":
            *sources, _destination = rest.split()
            copied.update(source.rstrip("/") for source in sources)
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the project"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {pattern.rstrip("*") for pattern in packages} <= copied
    assert {"pyproject.toml", "requirements.lock"} <= copied


# -- Prometheus and Grafana ------------------------------------------------------------------


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """{target: source} of a service's volumes, read-only flags dropped."""
    found = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        found[target] = source
    return found


def test_prometheus_runs_the_official_image_on_the_shipped_config(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    prometheus = services["prometheus"]
    image, _, tag = prometheus["image"].partition(":")
    assert image == "prom/prometheus" and tag not in ("", "latest")
    volumes = mounts(prometheus)
    assert volumes["/etc/prometheus"] == "./deploy/prometheus"
    assert volumes["/prometheus"] in compose["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in argv(prometheus)
    shipped = ROOT / "deploy" / "prometheus"
    assert {"prometheus.yml", "alerts.yml"} <= {p.name for p in shipped.iterdir()}
    assert interpolate(prometheus["ports"][0], {}) == "127.0.0.1:9090:9090"


def test_prometheus_scrapes_every_worker_group_and_the_api_on_their_metrics_ports(
    services: dict[str, Any],
) -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    workers = {name for name, s in services.items() if argv(s)[:2] == ["memharness", "worker"]}
    (sd,) = jobs["memharness-workers"]["dns_sd_configs"]
    assert set(sd["names"]) == workers
    for name in workers:
        env = environment(services[name])
        assert env["MEMHARNESS_METRICS_PORT"] == str(sd["port"]), name
        # bound to the container's interfaces, or Prometheus cannot reach it
        assert env["MEMHARNESS_METRICS_HOST"] == "0.0.0.0", name
    (api,) = jobs["memharness-api"]["dns_sd_configs"]
    assert api["names"] == ["api"]
    # the API's /metrics on its own port, bound to the container's interfaces
    api_env = environment(services["api"])
    assert str(api["port"]) == api_env["MEMHARNESS_API_METRICS_PORT"]
    assert api_env["MEMHARNESS_API_METRICS_PORT"] != api_env["MEMHARNESS_API_PORT"]
    assert api_env["MEMHARNESS_API_HOST"] == "0.0.0.0"
    assert jobs["memharness-api"]["metrics_path"] == "/metrics"


def test_grafana_is_provisioned_with_the_dashboard_and_prometheus(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    grafana = services["grafana"]
    image, _, tag = grafana["image"].partition(":")
    assert image == "grafana/grafana" and tag not in ("", "latest")
    volumes = mounts(grafana)
    for target, source in volumes.items():
        if source.startswith("./"):
            assert (ROOT / source).is_dir(), f"{target}: {source} is not in the project"
    assert volumes["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    assert volumes["/var/lib/grafana"] in compose["volumes"]
    provider = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/memharness.yml").read_text()
    )
    dashboards = provider["providers"][0]["options"]["path"]
    assert (ROOT / volumes[dashboards] / "memharness.json").is_file()
    home = environment(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] or ""
    assert home == f"{dashboards}/memharness.json"
    datasources = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    assert datasources["datasources"][0]["url"] == "http://prometheus:9090"
    assert depends_on(grafana) == {"prometheus": "service_started"}
    assert interpolate(grafana["ports"][0], {}) == "127.0.0.1:3000:3000"


def test_grafana_refuses_to_start_without_an_admin_password(services: dict[str, Any]) -> None:
    password = environment(services["grafana"])["GF_SECURITY_ADMIN_PASSWORD"] or ""
    with pytest.raises(LookupError, match="set GRAFANA_ADMIN_PASSWORD"):
        interpolate(password, {})
    assert interpolate(password, {"GRAFANA_ADMIN_PASSWORD": "s3cret"}) == "s3cret"
