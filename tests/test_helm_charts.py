"""deploy/helm: both charts rendered by Helm's own engine (helm-python-sdk: Helm v4's Go library, offline) with
several value sets, every object validated against Kubernetes' own schemas (kubernetes-validate bundles them),
`helm lint --strict` clean, and what a deployment relies on checked: non-root with a read-only root filesystem,
probes on /healthz, secrets only by reference, replica counts, the daemons' grace period, and that every command,
flag and variable the charts name is one Slipway really has. No cluster runs here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from protocol.tags import normalise_tags, queue_name
from tests.support.slipway_commands import command, known_variables

CHARTS = Path(__file__).resolve().parent.parent / "deploy" / "helm"
SERVER = CHARTS / "slipway"
PROVISIONER = CHARTS / "slipway-provisioner"
README = CHARTS.parent.parent / "README.md"
# The oldest Kubernetes the charts support (Chart.yaml kubeVersion; preStop `sleep` is GA-enabled there) and the
# newest the validator knows.
KUBE_VERSIONS = ["1.30.0", kubernetes_validate.utils.latest_version() + ".0"]
EXISTING = {"existingSecret": "slipway-secrets"}
INLINE = {
    "existingSecret": "",
    "secrets": {
        "databaseUrl": "postgresql+psycopg://slipway:pw-in-values@db/slipway",
        "redisUrl": "redis://:pw-in-values@redis:6379/0",
        "secretKey": "key-in-values",
    },
}
INGRESS = {
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "host": "slipway.example.com",
        "wildcardHost": "*.apps.example.com",
        "tls": {"enabled": True},
    }
}


def render(chart: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart's objects as Helm would install them (release `slipway` in namespace `slipway`)."""
    manifests = helm.Chart.load(chart).render(values, name="slipway", namespace="slipway", is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects += [document for document in yaml.safe_load_all(text) if document]
    return objects


def validate(objects: list[dict[str, Any]]) -> None:
    """Every object against Kubernetes' schemas (strict: unknown fields fail). The CRDs' objects have no bundled
    schema: a ScaledJob's pods are checked as the batch/v1 Job they become."""
    for document in objects:
        if document["kind"] == "ScaledJob":
            job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job"}}
            document = {**job, "spec": document["spec"]["jobTargetRef"]}
        elif document["kind"] == "ServiceMonitor":
            continue  # checked field by field in its own test
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(part) for part in exc.path)
                pytest.fail(f"{document['kind']} {document['metadata']['name']} @ {version}: {path}: {exc.message}")


def assert_lint_clean(report: dict[str, Any]) -> None:
    """`helm lint --strict` passes: no error and no warning (strict fails on those); only information, such as
    Helm recommending an icon, which the charts have none to give."""
    assert report["total_charts_linted"] == 1 and not report["errors"], report
    assert all(message["severity"] < 2 for message in report["messages"]), report["messages"]


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = {document["kind"]: document for document in objects}
    assert len(kinds) == len(objects), [document["kind"] for document in objects]
    return kinds


def pod_spec(document: dict[str, Any]) -> dict[str, Any]:
    if document["kind"] == "ScaledJob":
        spec: dict[str, Any] = document["spec"]["jobTargetRef"]["template"]["spec"]
    else:
        spec = document["spec"]["template"]["spec"]
    return spec


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container["env"]}


def assert_locked_down(spec: dict[str, Any]) -> None:
    """Non-root, read-only root filesystem, nothing to escalate to; every path the image writes is a volume."""
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 1000
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert {"/tmp", "/var/cache/slipway"} <= mounts
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


def assert_real_command(container: dict[str, Any]) -> None:
    """The entrypoint is `slipway`: the args must be a command it has, and every SLIPWAY_* variable one it reads."""
    cmd = command(["slipway", *container["args"]])
    variables = {name for name in env_of(container) if name.startswith("SLIPWAY_")}
    assert variables <= known_variables(cmd) | {"SLIPWAY_URL"}, variables - known_variables(cmd)


SERVER_CASES = {
    "defaults": {},
    "existing-secret": {**EXISTING, "replicaCount": 3, "provisionerDaemons": 2, "provisionerTrustRedis": ["psk"]},
    "inline-secrets": {**INLINE, "replicaCount": 1, "persistence": {"enabled": True}},
    "ingress-wildcard": {**EXISTING, **INGRESS},
    "service-monitor": {**EXISTING, "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
}


@pytest.fixture(scope="module", params=list(SERVER_CASES))
def server_case(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    values = SERVER_CASES[request.param]
    return request.param, values, render(SERVER, values)


def test_the_server_chart_renders_valid_kubernetes_objects_and_lints_strict(
    server_case: tuple[str, dict[str, Any], list[dict[str, Any]]],
) -> None:
    name, values, objects = server_case
    validate(objects)
    report = helm.lint(SERVER, values, strict=True, kube_version="v1.30.0")
    assert_lint_clean(report)
    kinds = by_kind(objects)
    expected = {"Deployment", "Service", "PodDisruptionBudget"}
    expected |= {"Secret"} if name == "inline-secrets" else set()
    expected |= {"PersistentVolumeClaim"} if name == "inline-secrets" else set()
    expected |= {"Ingress"} if name == "ingress-wildcard" else set()
    expected |= {"ServiceMonitor"} if name == "service-monitor" else set()
    assert set(kinds) == expected


def test_the_server_runs_locked_down_with_probes_on_healthz(
    server_case: tuple[str, dict[str, Any], list[dict[str, Any]]],
) -> None:
    _, values, objects = server_case
    kinds = by_kind(objects)
    deployment = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == values.get("replicaCount", 2)
    spec = pod_spec(deployment)
    assert_locked_down(spec)
    (container,) = spec["containers"]
    assert_real_command(container)
    assert container["args"] == ["server"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    # A database restart fails /healthz for a while: readiness reacts in seconds, liveness only after minutes.
    liveness, readiness = container["livenessProbe"], container["readinessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60
    assert readiness["periodSeconds"] * readiness["failureThreshold"] <= 15
    env = env_of(container)
    # Below the volume's root: the server chmods its data dir 0700, and a volume's root is root's.
    assert env["SLIPWAY_DATA_DIR"]["value"] == "/var/lib/slipway/server"
    assert {"mountPath": "/var/lib/slipway", "name": "data"} in container["volumeMounts"]
    assert env["SLIPWAY_PROVISIONER_DAEMONS"]["value"] == str(values.get("provisionerDaemons", 0))
    # The Service and the PodDisruptionBudget select exactly the Deployment's pods.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert kinds["Service"]["spec"]["selector"].items() <= labels.items()
    assert (
        kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )
    assert kinds["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


@pytest.mark.parametrize("values", [SERVER_CASES["defaults"], SERVER_CASES["existing-secret"]])
def test_with_an_existing_secret_no_secret_value_is_inline(values: dict[str, Any]) -> None:
    objects = render(SERVER, values)
    assert "Secret" not in {document["kind"] for document in objects}
    (container,) = pod_spec(by_kind(objects)["Deployment"])["containers"]
    secret = values.get("existingSecret", "slipway")
    references = {}
    for name, item in env_of(container).items():
        if re.search(r"URL$|KEY|KEYS$|PSK$|SECRET$|PASSWORD$", name) and name not in {
            "SLIPWAY_ACCESS_URL",
            "SLIPWAY_WILDCARD_ACCESS_URL",
        }:
            assert "value" not in item, f"{name} is inline"
            reference = item["valueFrom"]["secretKeyRef"]
            assert reference["name"] == secret
            references[name] = (reference["key"], reference.get("optional", False))
    assert references["SLIPWAY_DATABASE_URL"] == ("database-url", False)
    assert references["SLIPWAY_REDIS_URL"] == ("redis-url", False)
    assert references["SLIPWAY_SECRET_KEY"] == ("secret-key", False)
    assert references["SLIPWAY_ENCRYPTION_KEYS"] == ("encryption-keys", True)
    assert references["SLIPWAY_PROVISIONER_DAEMON_PSK"] == ("provisioner-psk", True)


def test_inline_secrets_go_to_a_secret_the_pods_reference() -> None:
    kinds = by_kind(render(SERVER, SERVER_CASES["inline-secrets"]))
    secret = kinds["Secret"]
    assert secret["stringData"] == {
        "database-url": INLINE["secrets"]["databaseUrl"],
        "redis-url": INLINE["secrets"]["redisUrl"],
        "secret-key": INLINE["secrets"]["secretKey"],
    }
    (container,) = pod_spec(kinds["Deployment"])["containers"]
    env = env_of(container)
    assert "pw-in-values" not in yaml.safe_dump(kinds["Deployment"])
    assert env["SLIPWAY_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "slipway", "key": "database-url"}
    assert "SLIPWAY_OIDC_CLIENT_SECRET" not in env  # not given: not referenced
    claim = pod_spec(kinds["Deployment"])["volumes"][0]
    assert claim == {
        "name": "data",
        "persistentVolumeClaim": {"claimName": kinds["PersistentVolumeClaim"]["metadata"]["name"]},
    }


def test_the_ingress_serves_the_access_host_and_the_wildcard_host_and_the_server_knows_both() -> None:
    kinds = by_kind(render(SERVER, SERVER_CASES["ingress-wildcard"]))
    ingress = kinds["Ingress"]
    hosts = [rule["host"] for rule in ingress["spec"]["rules"]]
    assert hosts == ["slipway.example.com", "*.apps.example.com"]
    assert ingress["spec"]["tls"] == [{"secretName": "slipway-tls", "hosts": hosts}]
    for rule in ingress["spec"]["rules"]:
        (path,) = rule["http"]["paths"]
        assert path["backend"]["service"] == {"name": kinds["Service"]["metadata"]["name"], "port": {"name": "http"}}
    (container,) = pod_spec(kinds["Deployment"])["containers"]
    env = env_of(container)
    assert env["SLIPWAY_ACCESS_URL"]["value"] == "https://slipway.example.com"
    assert env["SLIPWAY_WILDCARD_ACCESS_URL"]["value"] == "*.apps.example.com"
    # Without an ingress the access URL is the in-cluster Service, so agents in the cluster reach it.
    (plain,) = pod_spec(by_kind(render(SERVER, {}))["Deployment"])["containers"]
    assert env_of(plain)["SLIPWAY_ACCESS_URL"]["value"] == "http://slipway.slipway.svc:80"
    assert "SLIPWAY_WILDCARD_ACCESS_URL" not in env_of(plain)


def test_the_service_monitor_scrapes_metrics_with_a_token_from_a_secret() -> None:
    kinds = by_kind(render(SERVER, SERVER_CASES["service-monitor"]))
    monitor = kinds["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= kinds["Service"]["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == kinds["Service"]["spec"]["ports"][0]["name"]
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "slipway-secrets", "key": "metrics-token"},
    }


PROVISIONER_CASES = {
    "defaults": {},
    "psk": {"auth": "psk", "existingSecret": "slipway", "replicaCount": 4, "tags": {"gpu": "true"}},
    "keda": {"mode": "keda", "tags": {"zone": "eu west", "gpu": "a100"}},
}


@pytest.mark.parametrize("case", list(PROVISIONER_CASES))
def test_the_provisioner_chart_renders_valid_daemons_that_finish_their_build_on_sigterm(case: str) -> None:
    values = PROVISIONER_CASES[case]
    objects = render(PROVISIONER, values)
    validate(objects)
    report = helm.lint(PROVISIONER, values, strict=True, kube_version="v1.30.0")
    assert_lint_clean(report)
    kinds = by_kind(objects)
    workload = kinds["ScaledJob" if case == "keda" else "Deployment"]
    assert set(kinds) == {workload["kind"], "ServiceAccount"}
    spec = pod_spec(workload)
    assert_locked_down(spec)
    assert spec["serviceAccountName"] == kinds["ServiceAccount"]["metadata"]["name"]
    # SIGTERM lets the running build finish (cli/provisionerd.py): the pod must be given that long.
    assert spec["terminationGracePeriodSeconds"] >= 3600
    (container,) = spec["containers"]
    assert_real_command(container)
    env = env_of(container)
    assert env["SLIPWAY_URL"]["value"] == "http://slipway"
    assert env["SLIPWAY_PROVISIONER_DAEMON_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    credential = "SLIPWAY_PROVISIONER_DAEMON_PSK" if case == "psk" else "SLIPWAY_PROVISIONER_DAEMON_KEY"
    other = {"SLIPWAY_PROVISIONER_DAEMON_PSK", "SLIPWAY_PROVISIONER_DAEMON_KEY"} - {credential}
    assert not other & set(env)
    secret = values.get("existingSecret", "slipway-provisioner")
    key = "provisioner-psk" if case == "psk" else "provisioner-key"
    assert env[credential] == {"name": credential, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
    tags = values.get("tags", {})
    given = [container["args"][i + 1] for i, word in enumerate(container["args"]) if word == "--tag"]
    # `--tag` goes with a PSK only: a provisioner key fixes the tags, and the daemon refuses both together.
    assert sorted(given) == sorted(f"{key}={value}" for key, value in tags.items() if case == "psk")
    if case == "keda":
        assert "--once" in container["args"] and spec["restartPolicy"] == "Never"
        scaled = workload["spec"]
        assert scaled["jobTargetRef"]["backoffLimit"] == 0
        (trigger,) = scaled["triggers"]
        # The series the server exports for this tag set (app/metrics.py labels it with protocol/tags.py's name).
        expected = queue_name(normalise_tags(tags))
        assert trigger["metadata"]["query"] == f'sum(slipway_provisioner_queue_depth{{queue="{expected}"}})'
    else:
        assert "--once" not in container["args"]
        assert workload["spec"]["replicas"] == values.get("replicaCount", 2)


@pytest.mark.parametrize(
    ("chart", "values", "message"),
    [
        (SERVER, {"replicaCount": -1}, "replicaCount"),
        (SERVER, {"existingSecret": "", "secrets": {"databaseUrl": "postgresql://db/slipway"}}, "redisUrl"),
        (SERVER, {"secrets": {"secretKey": "inline while existingSecret is set"}}, "secretKey"),
        (SERVER, {"ingress": {"enabled": True}}, "host"),
        (SERVER, {"ingress": {"wildcardHost": "apps.example.com"}}, "wildcardHost"),
        (SERVER, {"settings": {"WEB_WORKERS": "4"}}, "WEB_WORKERS"),
        (SERVER, {"replicas": 3}, "replicas"),
        (PROVISIONER, {"auth": "password"}, "auth"),
        (PROVISIONER, {"tags": {"scope": "user"}}, "scope"),
    ],
)
def test_values_the_schema_rejects_fail_with_a_message_naming_the_value(
    chart: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmError) as caught:
        render(chart, values)
    assert "values don't meet the specifications of the schema" in str(caught.value)
    assert message in str(caught.value), str(caught.value)


@pytest.mark.parametrize("chart", [SERVER, PROVISIONER])
def test_every_value_is_in_the_schema_and_documented_in_the_readme(chart: Path) -> None:
    schema = helm.Chart.load(chart).schema
    assert schema is not None
    readme = (chart / "README.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", readme, re.MULTILINE))

    def leaves(values: dict[str, Any], node: dict[str, Any], prefix: str) -> set[str]:
        found = set()
        for key, value in values.items():
            path = f"{prefix}{key}"
            assert key in node.get("properties", {}), f"{path} is not in values.schema.json"
            child = node["properties"][key]
            # A closed object is a group of values; an open one (resources, securityContext) is one value.
            if isinstance(value, dict) and value and child.get("additionalProperties") is False:
                found |= leaves(value, child, f"{path}.")
            else:
                found.add(path)
        return found

    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert leaves(values, schema, "") == documented


def install_commands(readme: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Each `helm install NAME deploy/helm/CHART --set …` of a README, with the values its --set flags give."""
    text = readme.read_text().replace("\\\n", " ")
    found = []
    for line in re.findall(r"^\s*helm install .*$", text, re.MULTILINE):
        words = shlex.split(line)
        values: dict[str, Any] = {}
        for flag, expression in zip(words, words[1:], strict=False):
            if flag == "--set":
                merge(values, helm.parse_set_string(expression))
        found.append((CHARTS.parent.parent / words[3], values))
    return found


def merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    """As repeated --set flags combine."""
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


@pytest.mark.parametrize(
    "readme", [README, SERVER / "README.md", PROVISIONER / "README.md"], ids=lambda p: p.parent.name
)
def test_the_readmes_install_commands_give_values_the_charts_accept(readme: Path) -> None:
    commands = install_commands(readme)
    assert commands
    for chart, values in commands:
        assert chart in (SERVER, PROVISIONER), chart
        validate(render(chart, values))
    # The Secret the README creates holds every key the server needs (the chart's secretKeys).
    created = set(re.findall(r"--from-literal=([a-z-]+)=", readme.read_text()))
    if readme != PROVISIONER / "README.md":
        assert {"database-url", "redis-url", "secret-key", "encryption-keys", "provisioner-psk"} <= created
