"""The Helm chart (deploy/helm/pytriton), offline: it renders, lints, fits the Kubernetes schemas, keeps its policies.

No cluster is contacted: Helm's Go SDK (bundled in helm-python-sdk) renders the templates and
checks the values against values.schema.json, kubernetes-validate holds the JSON schemas of each
Kubernetes release, and the custom resources are checked against their CRDs' own schemas,
vendored in data/crds (see data/README.md). The probe paths and
ports are checked against what pytriton's server really serves (TritonConfig read from the
rendered environment); the probes' behaviour against a live server is in test_probes_k8s.py.
"""

from __future__ import annotations

import base64
import json
import re
import shutil

import jsonschema
import pytest
import yaml
from helm_chart_support import (
    CHART,
    CRD_FILES,
    FETCH_WEIGHTS,
    GATEWAY,
    INFERENCE_PEER,
    NAMESPACE,
    PROMETHEUS_RELEASE_LABEL,
    RELEASE,
    SIDECAR,
    SMOKE_REQUEST,
    TRITON_HEALTH_PATHS,
    VALUE_SETS,
    WEIGHTS_MOUNT,
    WEIGHTS_VOLUME,
    adapter_rule,
    crd_schema,
    helm,
    install_on,
    kubernetes_validate,
    only,
    plain_env,
    quantity_bytes,
    render,
    render_manifests,
    server_container,
)

from pytriton.triton import TritonConfig

FULLNAME = f"{RELEASE}-pytriton"
OLDEST_KUBERNETES = "1.29"

# pytriton heals a model whose stub died in about 3 s (docs/reliability.md); its docs test
# allows 10 s. A liveness window shorter than this would restart containers that heal.
HEALING_BOUND_S = 10
# Memory the processes need besides /dev/shm: ~160 MiB (PSS) measured for the Python process,
# tritonserver and one stub with a small model, tripled for the user's own allocations.
PROCESS_BUDGET_BYTES = 512 * 2**20
# pytriton gives tritonserver this long past its exit timeout before killing it (Triton.stop).
PYTRITON_KILL_MARGIN_S = 15


def _minor(version):
    return tuple(map(int, version.split(".")[:2]))


def _kubernetes_versions():
    """The Kubernetes releases kubernetes-validate bundles that the chart supports (Chart.yaml's
    kubeVersion, >= 1.29): the oldest of them, the newest bundled, and each one between."""
    utils = kubernetes_validate()

    return sorted({v for v in utils.all_versions() if _minor(v) >= _minor(OLDEST_KUBERNETES)}, key=_minor)


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request):
    return request.param, render(VALUE_SETS[request.param])


# --- rendering and lint ------------------------------------------------------------------------


def test_every_value_set_renders_the_objects_it_asks_for():
    kinds = {name: sorted(o["kind"] for o in render(values)) for name, values in VALUE_SETS.items()}
    base = ["Deployment", "NetworkPolicy", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount"]  # Pod: helm test
    assert kinds["defaults"] == base
    assert kinds["hpa"] == sorted(base + ["HorizontalPodAutoscaler", "ServiceMonitor"])
    assert kinds["keda"] == sorted(base + ["ScaledObject", "ServiceMonitor"])
    assert kinds["keda-pod-monitor"] == sorted(base + ["PodMonitor", "ScaledObject"])
    assert kinds["hpa-prometheus-selects-every-monitor"] == sorted(base + ["HorizontalPodAutoscaler", "ServiceMonitor"])
    assert kinds["pod-monitor-without-labels"] == sorted(base + ["PodMonitor"])
    assert kinds["exposed"] == sorted(base + ["GRPCRoute", "HTTPRoute", "Ingress"])
    assert kinds["renamed"] == kinds["weights-on-a-volume"] == base
    assert kinds["keda-ratio-external-scrape"] == sorted(base + ["ScaledObject"])
    assert kinds["service-monitor"] == sorted(base + ["ServiceMonitor"])
    assert kinds["token"] == sorted(base + ["Secret", "Service"])  # and the headless Service
    assert kinds["token-existing-secret"] == base  # the user's Secret is not rendered
    assert kinds["no-network-policy"] == sorted(set(base) - {"NetworkPolicy"})
    assert kinds["no-helm-test"] == sorted(set(base) - {"Pod"})


def _leaves(tree, prefix=()):
    """(path, value) of every leaf of a values tree; a dict that is empty is a leaf."""
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from _leaves(value, prefix + (key,))
    else:
        yield prefix, tree


_MISSING = object()


def _dig(tree, path):
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return _MISSING
        tree = tree[key]
    return tree


def test_the_value_sets_cover_every_switch_and_optional_group_of_values_yaml():
    # Every boolean of values.yaml is flipped by some value set, and every value that is empty
    # by default (an optional object, list or string) is filled by one, so that each documented
    # combination is rendered and validated by the tests below.
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    untested = []
    for path, default in _leaves(defaults):
        # Filled by the user in every install, or Kubernetes objects passed through as they are.
        if path[0] in ("command", "args", "extraEnv", "imagePullSecrets", "podAnnotations",
                       "podSecurityContext", "securityContext") or path[-1] == "digest":
            continue
        # Its objects changed shape in Kubernetes 1.31, so no value set validated against every
        # version can hold one: test_resource_claims_reach_the_container_and_the_pod covers it.
        if path == ("resourceClaims",):
            continue
        if path == ("serviceAccount", "automountToken"):  # no API token in any set: the security test holds it
            continue
        if isinstance(default, bool):
            wanted = lambda value, default=default: value is (not default)  # noqa: E731
        elif default in ({}, [], ""):
            wanted = lambda value, default=default: value not in ({}, [], "")  # noqa: E731
        else:
            continue
        if not any(wanted(value) for value in (_dig(values, path) for values in VALUE_SETS.values())
                   if value is not _MISSING):
            untested.append(".".join(path))
    assert untested == [], f"no value set of helm_chart_support.VALUE_SETS changes {untested}"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_is_clean_in_strict_mode(name):
    report = helm().lint(CHART, VALUE_SETS[name], strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error
    assert report["errors"] == [] and problems == [], report


# --- Kubernetes schemas ------------------------------------------------------------------------


def test_the_versions_validated_span_the_charts_kube_version_to_the_newest_bundled():
    utils = kubernetes_validate()

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={OLDEST_KUBERNETES}.0-0"
    versions = _kubernetes_versions()
    assert _minor(versions[0]) == _minor(OLDEST_KUBERNETES), versions  # the oldest release the chart supports
    assert _minor(versions[-1]) == max(_minor(v) for v in utils.all_versions()), versions  # the newest bundled
    assert len(versions) >= 5, versions


def test_every_object_fits_every_kubernetes_version_strictly(rendered):
    utils = kubernetes_validate()

    name, objects = rendered
    checked = 0
    for obj in objects:
        if obj["kind"] in CRD_FILES:
            continue
        for version in _kubernetes_versions():
            try:
                validated = utils.validate(obj, version, strict=True)
            except utils.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                where = f"{name}: {obj['kind']} {obj['metadata']['name']}"
                pytest.fail(f"{where} invalid in Kubernetes {version}: {path}: {exc.message}")
            except utils.SchemaNotFoundError as exc:  # an apiVersion that release removed or never had
                pytest.fail(f"{name}: {exc.message}")
            assert validated == ".".join(version.split(".")[:2])
            checked += 1
    built_in = [o for o in objects if o["kind"] not in CRD_FILES]
    assert len(built_in) >= 4 and checked == len(built_in) * len(_kubernetes_versions())


def test_the_oldest_bundled_kubernetes_takes_every_value_set_but_the_kubelet_sleep_action():
    # Below the chart's kubeVersion too, down to the oldest release kubernetes-validate bundles,
    # every object validates strictly; only the preStop `sleep` action (new in Kubernetes 1.29)
    # does not exist there.
    utils = kubernetes_validate()

    oldest = min(utils.all_versions(), key=_minor)
    assert _minor(oldest) < _minor(OLDEST_KUBERNETES), oldest
    refused = set()
    for name, values in VALUE_SETS.items():
        for obj in render(values):
            if obj["kind"] in CRD_FILES:
                continue
            try:
                utils.validate(obj, oldest, strict=True)
            except utils.ValidationError as exc:
                refused.add((name, obj["kind"], exc.message))
    assert refused == {("sleep-action", "Deployment", "Additional properties are not allowed ('sleep' was unexpected)")}


def test_strict_validation_rejects_an_unknown_field():
    # The negative control of the test above: strict schemas refuse fields Kubernetes would drop.
    utils = kubernetes_validate()

    deployment = only(render(), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(utils.ValidationError):
        utils.validate(deployment, _kubernetes_versions()[0], strict=True)
    with pytest.raises(utils.SchemaNotFoundError):
        utils.validate({**only(render(), "PodDisruptionBudget"), "apiVersion": "policy/v1beta1"}, "1.29.0", strict=True)


def test_custom_resources_fit_their_crds_schemas(rendered):
    name, objects = rendered
    for obj in objects:
        if obj["kind"] in CRD_FILES:
            try:
                jsonschema.validate(obj, crd_schema(obj["kind"]))
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{name}: {obj['kind']} invalid at {'.'.join(map(str, exc.path))}: {exc.message}")
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", obj["metadata"]["name"])
    deployment = only(objects, "Deployment")
    fullname = deployment["metadata"]["name"]
    service = only(objects, "Service", fullname)
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        # It must select the chart's Service and scrape a port that Service has.
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    for monitor in [o for o in objects if o["kind"] == "PodMonitor"]:
        # It must select the server's pods (and no other: see the helm test pod's labels) and
        # scrape a port their server container names.
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert monitor["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        [endpoint] = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] in {p["name"] for p in server_container(objects)["ports"]}
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    for route in [o for o in objects if o["kind"] in ("HTTPRoute", "GRPCRoute")]:
        # Every rule sends to the chart's Service, on the port of the route's protocol.
        wanted = {"HTTPRoute": "http", "GRPCRoute": "grpc"}[route["kind"]]
        ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
        for rule in route["spec"]["rules"]:
            assert rule["backendRefs"] == [{"name": fullname, "port": ports[wanted]}]
        assert route["spec"]["parentRefs"], "a route with no parent attaches to nothing"
    for scaled in [o for o in objects if o["kind"] == "ScaledObject"]:
        assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
        assert "replicas" not in deployment["spec"], "KEDA owns the replica count"


def test_crd_schemas_refuse_a_misspelt_field_and_a_wrong_type():
    monitor = only(render(VALUE_SETS["hpa"]), "ServiceMonitor")
    jsonschema.validate(monitor, crd_schema("ServiceMonitor"))
    misspelt = json.loads(json.dumps(monitor))
    misspelt["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        jsonschema.validate(misspelt, crd_schema("ServiceMonitor"))
    bad_interval = json.loads(json.dumps(monitor))
    bad_interval["spec"]["endpoints"][0]["interval"] = "15 seconds"  # the CRD's duration pattern
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad_interval, crd_schema("ServiceMonitor"))
    scaled = only(render(VALUE_SETS["keda"]), "ScaledObject")
    scaled["spec"]["pollingInterval"] = "15"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, crd_schema("ScaledObject"))
    pod_monitor = only(render(VALUE_SETS["keda-pod-monitor"]), "PodMonitor")
    jsonschema.validate(pod_monitor, crd_schema("PodMonitor"))
    pod_monitor["spec"]["endpoints"] = pod_monitor["spec"].pop("podMetricsEndpoints")  # a ServiceMonitor's field
    with pytest.raises(jsonschema.ValidationError, match="endpoints"):
        jsonschema.validate(pod_monitor, crd_schema("PodMonitor"))
    exposed = render(VALUE_SETS["exposed"])
    http_route = only(exposed, "HTTPRoute")
    jsonschema.validate(http_route, crd_schema("HTTPRoute"))
    http_route["spec"]["rules"][0]["matches"][0]["path"]["type"] = "Prefix"  # Ingress's word, not the route's
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(http_route, crd_schema("HTTPRoute"))
    grpc_route = only(exposed, "GRPCRoute")
    jsonschema.validate(grpc_route, crd_schema("GRPCRoute"))
    grpc_route["spec"]["rules"][0]["backendRefs"][0]["servicePort"] = 8001
    with pytest.raises(jsonschema.ValidationError, match="servicePort"):
        jsonschema.validate(grpc_route, crd_schema("GRPCRoute"))
    grpc_route["apiVersion"] = "gateway.networking.k8s.io/v1alpha2"  # the version before GA
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(grpc_route, crd_schema("GRPCRoute"))


# --- policies: probes and ports ------------------------------------------------------------------


def test_probes_use_triton_health_paths_on_the_port_the_server_listens_on(rendered):
    name, objects = rendered
    container = server_container(objects)
    served = TritonConfig.from_env(plain_env(container))  # what pytriton will read in the pod
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {
        "http": served.effective_http_port,
        "grpc": served.effective_grpc_port,
        "metrics": served.effective_metrics_port,
    }
    defaults = TritonConfig()
    assert (ports["http"], ports["grpc"], ports["metrics"]) == (
        defaults.effective_http_port,
        defaults.effective_grpc_port,
        defaults.effective_metrics_port,
    )
    for kind in ("startup", "readiness", "liveness"):
        probe = container[f"{kind}Probe"]
        assert probe["httpGet"]["path"] in TRITON_HEALTH_PATHS, (name, kind, probe)
        assert ports[probe["httpGet"]["port"]] == served.effective_http_port, (name, kind, probe)
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


def test_changed_ports_move_the_server_the_probes_and_the_service_together():
    objects = render({"ports": {"http": 9000, "grpc": 9001, "metrics": 9002}})
    container = server_container(objects)
    served = TritonConfig.from_env(plain_env(container))
    assert (served.effective_http_port, served.effective_grpc_port, served.effective_metrics_port) == (9000, 9001, 9002)
    service_ports = {p["name"]: (p["port"], p["targetPort"]) for p in only(objects, "Service")["spec"]["ports"]}
    assert service_ports == {"http": (9000, "http"), "grpc": (9001, "grpc"), "metrics": (9002, "metrics")}


def test_probe_timing_fits_loading_a_busy_server_and_healing(rendered):
    _, objects = rendered
    container = server_container(objects)
    startup, readiness, liveness = (container[f"{k}Probe"] for k in ("startup", "readiness", "liveness"))
    # Ready within 2 s of the models, and up to 15 minutes to load them.
    assert startup["periodSeconds"] <= 2 and startup["periodSeconds"] * startup["failureThreshold"] >= 900
    # A busy server's late answer is no failure (Kubernetes' default timeout is 1 s), and one
    # failure alone takes no pod out of the Service: in a load spike all pods are busy at once.
    assert readiness["timeoutSeconds"] >= 5 and readiness["failureThreshold"] >= 3
    assert readiness["successThreshold"] == 1
    # ... but a pod that stopped answering leaves the Service well before liveness restarts it.
    window = readiness["periodSeconds"] * readiness["failureThreshold"]
    assert window < liveness["periodSeconds"] * liveness["failureThreshold"]
    # Never restarted by a healing: the liveness window is longer than one.
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > HEALING_BOUND_S
    assert liveness["timeoutSeconds"] >= 2


def test_probe_timing_is_settable_and_shown_in_the_notes():
    longer = {"probes": {"startup": {"failureThreshold": 1800}, "readiness": {"timeoutSeconds": 10}}}
    container = server_container(render(longer))
    assert container["startupProbe"]["failureThreshold"] == 1800
    assert container["readinessProbe"]["timeoutSeconds"] == 10
    assert "startup probe: up to\n3600 s" in render_manifests(longer)["pytriton/templates/NOTES.txt"]
    assert "startup probe: up to\n900 s" in render_manifests()["pytriton/templates/NOTES.txt"]


def test_http_switched_off_is_refused_since_the_probes_use_it():
    for value in ("false", "0", False, "OFF"):
        with pytest.raises(helm().HelmRenderError, match=r"triton.config.ALLOW_HTTP=.* switches HTTP off"):
            render({"triton": {"config": {"ALLOW_HTTP": value}}})
    assert plain_env(server_container(render({"triton": {"config": {"ALLOW_HTTP": "true"}}})))[
        "PYTRITON_TRITON_CONFIG_ALLOW_HTTP"] == "true"
    grpc_off = server_container(render({"triton": {"config": {"ALLOW_GRPC": "false"}}}))
    assert plain_env(grpc_off)["PYTRITON_TRITON_CONFIG_ALLOW_GRPC"] == "false"


def test_service_names_its_ports_and_marks_grpc(rendered):
    _, objects = rendered
    container_ports = {p["name"] for p in server_container(objects)["ports"]}
    for service in [o for o in objects if o["kind"] == "Service"]:
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in container_ports
            if port["name"] == "grpc":
                assert port["appProtocol"] == "grpc"


# --- policies: stopping --------------------------------------------------------------------------


def _pre_stop_seconds(container):
    pre_stop = container["lifecycle"]["preStop"]
    if "sleep" in pre_stop:
        return int(pre_stop["sleep"]["seconds"])
    command = pre_stop["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, command
    return int(command[1])


def test_grace_period_covers_pre_stop_drain_and_kill_margin(rendered):
    name, objects = rendered
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    container = server_container(objects)
    exit_timeout = TritonConfig.from_env(plain_env(container)).exit_timeout_secs
    assert exit_timeout is not None, "PYTRITON_TRITON_CONFIG_EXIT_TIMEOUT_SECS is not set"
    pre_stop = _pre_stop_seconds(container)
    assert pre_stop >= 5, name
    assert pod["terminationGracePeriodSeconds"] > pre_stop + exit_timeout + PYTRITON_KILL_MARGIN_S, name


def test_a_grace_period_shorter_than_the_drain_is_refused():
    with pytest.raises(helm().HelmRenderError, match="terminationGracePeriodSeconds=40 is too short"):
        render({"terminationGracePeriodSeconds": 40})
    longer = only(render({"terminationGracePeriodSeconds": 90}), "Deployment")
    assert longer["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 90
    shorter_drain = server_container(render({"triton": {"exitTimeoutSecs": 5}}))
    assert TritonConfig.from_env(plain_env(shorter_drain)).exit_timeout_secs == 5


# --- policies: /dev/shm, resources ------------------------------------------------------------


def test_dev_shm_is_memory_backed_sized_and_inside_the_memory_limit(rendered):
    name, objects = rendered
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    container = server_container(objects)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    shm = volumes[mounts["/dev/shm"]]["emptyDir"]
    assert shm["medium"] == "Memory"
    shm_bytes = quantity_bytes(shm["sizeLimit"])
    assert shm_bytes >= 256 * 2**20, "docs/deploying.md: 256 MiB is the floor"
    limit = quantity_bytes(container["resources"]["limits"]["memory"])
    assert limit >= shm_bytes + PROCESS_BUDGET_BYTES, name


def test_a_memory_limit_that_cannot_hold_dev_shm_is_refused():
    with pytest.raises(helm().HelmRenderError, match=r"resources.limits.memory=1Gi is too small"):
        render({"resources": {"limits": {"memory": "1Gi"}}})
    with pytest.raises(helm().HelmValuesError, match="at '/shm/sizeLimit'"):
        render({"shm": {"sizeLimit": "half"}})


# Quantity -> its value, in the spellings Kubernetes accepts (resource.ParseQuantity).
QUANTITIES = [
    ("512Mi", 512 * 2**20),
    ("1.5Gi", 1.5 * 2**30),
    (".5Gi", 2**29),
    ("1.Gi", 2**30),
    ("16G", 16e9),
    ("2000M", 2e9),
    ("1500k", 1.5e6),
    ("500m", 0.5),
    ("1e3", 1000),
    ("1E9", 1e9),
    ("2.5e+9", 2.5e9),
    ("3e-3", 0.003),
    ("+1Ti", 2**40),
    ("1073741824", 2**30),
    (1073741824, 2**30),
    ("1Pi", 2**50),
    ("0", 0),
]
NOT_QUANTITIES = ["1.5GB", "half", "1 Gi", "Gi", "1gi", "-1Gi", "1e", "1.5.5Mi", "1Ki5", "0x10"]


def _without_schema(tmp_path):
    """A copy of the chart without values.schema.json (as `helm install --skip-schema-validation` reads it)."""
    copy = tmp_path / "pytriton"
    shutil.copytree(CHART, copy)
    (copy / "values.schema.json").unlink()
    return copy


@pytest.mark.parametrize("quantity, value", QUANTITIES, ids=[str(q) for q, _ in QUANTITIES])
def test_the_memory_check_reads_every_kubernetes_quantity_spelling(tmp_path, quantity, value):
    assert quantity_bytes(quantity) == pytest.approx(value)  # the tests' own reading agrees
    beyond = 2**30
    needed = value + beyond
    enough = {"shm": {"sizeLimit": quantity}, "memoryBeyondShm": "1Gi",
              "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": str(int(needed) + 1)}}}
    container = server_container(render(enough))
    assert container["resources"]["limits"]["memory"] == str(int(needed) + 1)
    # The same quantity as the limit itself, with /dev/shm just fitting or just not.
    fits = {"shm": {"sizeLimit": "0"}, "memoryBeyondShm": str(int(value)) if value >= 1 else "0",
            "resources": {"requests": {"memory": quantity}, "limits": {"memory": quantity}}}
    render(fits)
    if value >= 2:
        too_small = {**fits, "memoryBeyondShm": str(int(value) + 1)}
        with pytest.raises(helm().HelmRenderError, match="is too small"):
            render(too_small)
    short = {**enough, "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": str(int(needed) - 1)}}}
    if value >= 1:
        with pytest.raises(helm().HelmRenderError, match="resources.limits.memory=.* is too small"):
            render(short)
    # Rendered as written, which Kubernetes reads as the same quantity.
    pod = only(render(enough), "Deployment")["spec"]["template"]["spec"]
    [shm] = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert quantity_bytes(shm["emptyDir"]["sizeLimit"]) == pytest.approx(value)
    utils = kubernetes_validate()
    utils.validate(only(render(enough), "Deployment"), _kubernetes_versions()[-1], strict=True)


@pytest.mark.parametrize("text", NOT_QUANTITIES)
def test_a_spelling_kubernetes_refuses_is_refused_by_the_schema_and_the_template(tmp_path, text):
    with pytest.raises(helm().HelmValuesError, match="at '/shm/sizeLimit'"):
        render({"shm": {"sizeLimit": text}})
    # The template's own check, for an install that skips the schema.
    with pytest.raises(helm().HelmRenderError, match=re.escape(f'shm.sizeLimit="{text}" is not a Kubernetes quantity')):
        render({"shm": {"sizeLimit": text}}, chart_dir=_without_schema(tmp_path))
    with pytest.raises(AssertionError):
        quantity_bytes(text)


# --- values.schema.json -----------------------------------------------------------------------


def test_the_schema_describes_values_yaml_and_accepts_its_defaults():
    schema = json.loads((CHART / "values.schema.json").read_text())
    # Draft 7: read by Helm 3's schema library (draft 4 to 7) and Helm 4's alike.
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(defaults)

    def keys(tree, prefix=""):
        for key, value in tree.items():
            yield prefix + key
            if isinstance(value, dict) and value and key not in ("config", "podSecurityContext", "securityContext"):
                yield from keys(value, prefix + key + ".")

    def resolved(node):
        # A shared definition ("$ref": "#/definitions/monitor") stands for its content.
        while "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
        return node

    def schema_keys(node, prefix=""):
        for key, value in node.get("properties", {}).items():
            value = resolved(value)
            if "Removed" in value.get("description", ""):
                continue
            yield prefix + key
            if value.get("additionalProperties") is False:
                yield from schema_keys(value, prefix + key + ".")

    def closed(node, path=""):
        # Every object the chart defines is closed; open ones are maps or Kubernetes objects.
        node = resolved(node)
        if node.get("type") == "object" and "properties" in node:
            assert node.get("additionalProperties") is False, path
        for key, value in node.get("properties", {}).items():
            closed(value, f"{path}.{key}")

    closed(schema)
    # Kubernetes objects passed through keep their own keys; the schema stops at them.
    documented = {k for k in keys(defaults) if not k.startswith(("resources.requests.", "resources.limits."))}
    assert documented - set(schema_keys(schema)) == set()
    # Keys values.yaml leaves out: Helm's `global`, and fields of objects that are empty by default.
    optional = {"global", "resources.claims", "strategy.type", "strategy.rollingUpdate",
                "strategy.rollingUpdate.maxSurge", "strategy.rollingUpdate.maxUnavailable"}
    assert set(schema_keys(schema)) - documented == optional


@pytest.mark.parametrize(
    "values, path, words",
    [
        ({"replicas": 3}, "", "'replicas' not allowed"),
        ({"replicaCount": "two"}, "/replicaCount", "got string, want integer"),
        ({"image": {"tagg": "1.0"}}, "/image", "'tagg' not allowed"),
        ({"probes": {"readiness": {"timeout": 5}}}, "/probes/readiness", "'timeout' not allowed"),
        ({"probes": {"startup": {"failureThreshold": "lots"}}}, "/probes/startup/failureThreshold", "want integer"),
        ({"gpu": {"cout": 2}}, "/gpu", "'cout' not allowed"),
        ({"autoscaling": {"hpa": {"enable": True}}}, "/autoscaling/hpa", "'enable' not allowed"),
        ({"autoscaling": {"behavior": {"scaleUp": {"podz": 2}}}}, "/autoscaling/behavior/scaleUp",
         "'podz' not allowed"),
        ({"networkPolicy": {"metricsNamespace": ["x"]}}, "/networkPolicy", "'metricsNamespace' not allowed"),
        ({"resources": {"limits": {"memory": "2 GB"}}}, "/resources/limits/memory", ""),
        ({"helmTest": {"modle": "Linear"}}, "/helmTest", "'modle' not allowed"),
        ({"lifecycle": {"preStopAction": "http"}}, "/lifecycle/preStopAction", ""),
        ({"podMonitor": {"label": {"release": "x"}}}, "/podMonitor", "'label' not allowed"),
        ({"serviceMonitor": {"labelsNotNeeded": "yes"}}, "/serviceMonitor/labelsNotNeeded", "want boolean"),
        ({"podDisruptionBudget": {"maxUnavailable": "abc"}}, "/podDisruptionBudget/maxUnavailable", ""),
        ({"podDisruptionBudget": {"maxUnavailable": -1}}, "/podDisruptionBudget/maxUnavailable", ""),
        ({"autoscaling": {"requests": {"target": 0}}}, "/autoscaling/requests/target", ""),
        ({"nameOverride": "My_Model"}, "/nameOverride", ""),
        ({"fullnameOverride": "x" * 64}, "/fullnameOverride", ""),
        ({"commonLabels": {"team": "ml platform"}}, "/commonLabels/team", ""),
        ({"image": {"registry": "https://registry.example.com"}}, "/image/registry", ""),
        ({"extraVolumes": [{"persistentVolumeClaim": {"claimName": "w"}}]}, "/extraVolumes/0", "name"),
        ({"extraVolumeMounts": [{"name": "weights", "mountPath": "models"}]}, "/extraVolumeMounts/0/mountPath", ""),
        ({"resources": {"claims": [{"name": "gpu", "count": 1}]}}, "/resources/claims/0", "'count' not allowed"),
        ({"serviceAccount": {"annotation": {}}}, "/serviceAccount", "'annotation' not allowed"),
        ({"service": {"loadBalancerSourceRanges": ["203.0.113.0"]}}, "/service/loadBalancerSourceRanges/0", ""),
        ({"triton": {"drainServingSeconds": -1}}, "/triton/drainServingSeconds", ""),
        ({"ingress": {"servicePort": "metrics"}}, "/ingress/servicePort", ""),
        ({"httpRoute": {"parentRefs": [{"gateway": "public"}]}}, "/httpRoute/parentRefs/0", "'gateway' not allowed"),
        ({"grpcRoute": {"hostnames": ["Models.Example.com"]}}, "/grpcRoute/hostnames/0", ""),
    ],
)
def test_the_schema_refuses_typos_wrong_types_and_unknown_keys_naming_the_path(values, path, words):
    with pytest.raises(helm().HelmValuesError) as caught:
        render(values)
    message = str(caught.value)
    assert f"at '{path}'" in message, message
    assert words in message, message
    report = helm().lint(CHART, values, strict=True, namespace=NAMESPACE)  # `helm lint` says the same
    assert any(f"at '{path}'" in error for error in report["errors"]), report


def test_requests_and_limits_are_set(rendered):
    name, objects = rendered
    resources = server_container(objects)["resources"]
    for side in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[side]), (name, side)
    assert quantity_bytes(resources["requests"]["memory"]) <= quantity_bytes(resources["limits"]["memory"]), name
    gpu = VALUE_SETS[name].get("gpu", {})
    if gpu.get("enabled"):
        count = gpu.get("count", 1)
        assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == count
    else:
        assert "nvidia.com/gpu" not in resources["limits"]


# --- GPUs ---------------------------------------------------------------------------------------


def test_a_gpu_rollout_does_not_surge_and_other_rollouts_keep_kubernetes_default(rendered):
    name, objects = rendered
    deployment = only(objects, "Deployment")
    chosen = VALUE_SETS[name].get("strategy")
    if chosen:
        assert deployment["spec"]["strategy"] == chosen
    elif VALUE_SETS[name].get("gpu", {}).get("enabled"):
        # A surge pod would wait for a GPU that a full pool does not have: the rollout would stall.
        rolling = deployment["spec"]["strategy"]["rollingUpdate"]
        assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
        assert rolling == {"maxSurge": 0, "maxUnavailable": 1}
    else:
        assert "strategy" not in deployment["spec"]


def test_gpu_pods_take_the_runtime_class_tolerations_affinity_and_node_selector():
    values = VALUE_SETS["gpu-operator-pool"]
    objects = render(values)
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["tolerations"] == values["tolerations"]
    assert pod["affinity"] == values["affinity"]
    limits = server_container(objects)["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 1 and limits["memory"] == "16G"
    assert only(render(VALUE_SETS["gpu"]), "Deployment")["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.present": "true"}
    assert "runtimeClassName" not in only(render(), "Deployment")["spec"]["template"]["spec"]
    # The test pod lands where the server's image is (the same pool), so it tolerates the same taint.
    assert only(objects, "Pod")["spec"]["tolerations"] == values["tolerations"]
    surge = only(render({"gpu": {"enabled": True}, "strategy": {"type": "Recreate"}}), "Deployment")
    assert surge["spec"]["strategy"] == {"type": "Recreate"}


def test_image_is_pinned_and_latest_is_refused(rendered):
    _, objects = rendered
    for container in only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]:
        image = container["image"]
        assert "@sha256:" in image or re.fullmatch(r"[^:@]+(:\d+)?/[^:@]+:[A-Za-z0-9_.-]+", image), image
        assert not image.endswith(":latest")
    for tag in ("latest", "LATEST", ""):
        with pytest.raises(helm().HelmRenderError, match="is not allowed"):
            render({"image": {"tag": tag}})
    digest = "sha256:" + "a" * 64
    pinned = server_container(render({"image": {"tag": "latest", "digest": digest}}))
    assert pinned["image"].endswith("@" + digest)


# --- policies: security ---------------------------------------------------------------------


def test_security_context_is_locked_down_with_writable_tmp_and_home(rendered):
    name, objects = rendered
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    container = server_container(objects)
    security = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True and security["runAsNonRoot"] is True
    assert isinstance(security["runAsUser"], int) and security["runAsUser"] > 0
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"] and "add" not in security["capabilities"]
    assert security["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert security["readOnlyRootFilesystem"] is True
    # Where the library writes must be writable: its workspace under TMPDIR, caches under HOME.
    env = plain_env(container)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for variable in ("TMPDIR", "HOME"):
        assert env[variable] in mounts, f"{variable}={env[variable]} is not a mounted volume"
        assert "emptyDir" in volumes[mounts[env[variable]]]
    assert pod["automountServiceAccountToken"] is False


def test_access_token_reaches_the_environment_from_a_secret():
    objects = render(VALUE_SETS["token"])
    container = server_container(objects)
    [entry] = [e for e in container["env"] if e["name"] == "PYTRITON_ACCESS_TOKEN"]
    assert "value" not in entry, "the token must not be in the pod spec"
    reference = entry["valueFrom"]["secretKeyRef"]
    secret = only(objects, "Secret", reference["name"])
    assert base64.b64decode(secret["data"][reference["key"]]).decode() == "s3cr3t-token"
    annotations = only(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/access-token"])

    existing = server_container(render(VALUE_SETS["token-existing-secret"]))
    [entry] = [e for e in existing["env"] if e["name"] == "PYTRITON_ACCESS_TOKEN"]
    assert entry["valueFrom"]["secretKeyRef"] == {"name": "team-token", "key": "tok"}
    with pytest.raises(helm().HelmRenderError, match="accessToken.enabled=true needs"):
        render({"accessToken": {"enabled": True}})


def _metrics_rules(policy):
    return [r for r in policy["ingress"] if any(p["port"] == "metrics" for p in r["ports"])]


def test_network_policy_keeps_metrics_to_the_monitoring_namespaces(rendered):
    name, objects = rendered
    chosen = VALUE_SETS[name].get("networkPolicy", {})
    if chosen.get("enabled") is False:
        assert not [o for o in objects if o["kind"] == "NetworkPolicy"]
        return
    policy = only(objects, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["podSelector"]["matchLabels"] == only(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    for rule in policy["ingress"]:
        for peer in rule.get("from", []):
            for expression in peer.get("namespaceSelector", {}).get("matchExpressions", []):
                # An In with no values matches nothing and is refused by the API server.
                assert expression["operator"] not in ("In", "NotIn") or expression["values"], (name, expression)
    other_ports = {p["port"] for r in policy["ingress"] if r not in _metrics_rules(policy) for p in r["ports"]}
    assert other_ports == {"http", "grpc"}
    if chosen.get("metricsNamespaces") == []:
        assert _metrics_rules(policy) == []  # the metrics port is closed: no rule opens it
        return
    [rule] = _metrics_rules(policy)
    assert [p["port"] for p in rule["ports"]] == ["metrics"], "metrics shares a rule with other ports"
    [peer] = rule["from"]
    if "metricsNamespaceSelector" in chosen:
        assert peer == {"namespaceSelector": chosen["metricsNamespaceSelector"],
                        "podSelector": chosen["metricsPodSelector"]}
    else:
        names = chosen.get("metricsNamespaces", ["monitoring"])
        assert peer == {"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": names}]}}


def test_network_policy_takes_the_monitoring_selector_from_values():
    chosen = {"matchLabels": {"team": "observability"}}
    policy = only(render({"networkPolicy": {"metricsNamespaceSelector": chosen}}), "NetworkPolicy")["spec"]
    [rule] = [r for r in policy["ingress"] if r["ports"][0]["port"] == "metrics"]
    assert rule["from"] == [{"namespaceSelector": chosen}]  # the default names are not ANDed in
    policy = only(render({"networkPolicy": {"metricsNamespaces": ["prometheus", "ops"]}}), "NetworkPolicy")["spec"]
    [rule] = [r for r in policy["ingress"] if r["ports"][0]["port"] == "metrics"]
    assert rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["prometheus", "ops"]


def test_a_closed_metrics_port_with_something_that_needs_a_scrape_is_refused():
    closed = {"networkPolicy": {"metricsNamespaces": []}}
    for needs_scrape in (VALUE_SETS["service-monitor"], VALUE_SETS["hpa"], VALUE_SETS["keda-ratio-external-scrape"]):
        values = {**needs_scrape, "networkPolicy": {"metricsNamespaces": []}}
        with pytest.raises(helm().HelmRenderError, match="lets nothing reach the metrics port"):
            render(values)
        # Without the NetworkPolicy the port is open, so the same values render.
        render({**values, "networkPolicy": {"enabled": False, "metricsNamespaces": []}})
    render(closed)


def test_inference_peers_let_the_helm_test_pod_in():
    policy = only(render(VALUE_SETS["inference-from-and-helm-test"]), "NetworkPolicy")["spec"]
    [rule] = [r for r in policy["ingress"] if r["ports"][0]["port"] == "http"]
    test_pod = only(render(VALUE_SETS["inference-from-and-helm-test"]), "Pod")
    assert rule["from"][0] == INFERENCE_PEER
    [own] = rule["from"][1:]
    assert own["podSelector"]["matchLabels"].items() <= test_pod["metadata"]["labels"].items()
    without_test = only(render({**VALUE_SETS["inference-from-and-helm-test"], "helmTest": {"enabled": False}}),
                        "NetworkPolicy")["spec"]
    assert [r for r in without_test["ingress"] if r["ports"][0]["port"] == "http"][0]["from"] == [INFERENCE_PEER]


@pytest.mark.parametrize(
    "values, lines",
    [
        ({}, ["http 8000, grpc 8001: any pod, any namespace", "metrics 8002: any pod in the namespaces monitoring"]),
        (VALUE_SETS["service-monitor"], ["metrics 8002: any pod in the namespaces monitoring, observability"]),
        (VALUE_SETS["metrics-closed"], ["metrics 8002: nobody (networkPolicy.metricsNamespaces is empty)"]),
        (VALUE_SETS["metrics-namespace-selector"], [
            "metrics 8002: the pods matching networkPolicy.metricsPodSelector in the namespaces matching "
            "networkPolicy.metricsNamespaceSelector"]),
        (VALUE_SETS["inference-from-and-helm-test"],
         ["http 8000, grpc 8001: only the peers in networkPolicy.inferenceFrom"]),
        (VALUE_SETS["no-network-policy"], ["every port: any pod, any namespace (networkPolicy.enabled=false"]),
    ],
    ids=["defaults", "two-namespaces", "closed", "selector", "inference-from", "no-policy"],
)
def test_notes_say_who_may_reach_which_port(values, lines):
    notes = render_manifests(values)["pytriton/templates/NOTES.txt"]
    for line in lines:
        assert line in notes, notes


# --- helm test ---------------------------------------------------------------------------------


def test_the_helm_test_pod_checks_readiness_and_one_inference_as_the_server_user(rendered):
    name, objects = rendered
    if VALUE_SETS[name].get("helmTest", {}).get("enabled") is False:
        assert not [o for o in objects if o["kind"] == "Pod"]
        return
    pod = only(objects, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    deployment_pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    [check] = pod["spec"]["containers"]
    server = server_container(objects)
    assert check["image"] == server["image"]  # the chart's own image: Python, no curl needed
    assert check["command"] == ["python", "-c"] and "urllib.request" in check["args"][0]
    assert check["securityContext"] == server["securityContext"]
    assert pod["spec"]["securityContext"] == deployment_pod["securityContext"]
    assert check["securityContext"]["runAsNonRoot"] is True and check["securityContext"]["runAsUser"] > 0
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["automountServiceAccountToken"] is False
    env = plain_env(check)
    fullname = only(objects, "Deployment")["metadata"]["name"]
    service = only(objects, "Service", fullname)
    http_port = {p["name"]: p["port"] for p in service["spec"]["ports"]}["http"]
    assert env["PYTRITON_TEST_URL"] == f"http://{fullname}.{NAMESPACE}.svc:{http_port}"
    chosen = VALUE_SETS[name].get("helmTest", {})
    assert env["PYTRITON_TEST_MODEL"] == chosen.get("model", "")
    assert (json.loads(env["PYTRITON_TEST_INPUT"]) if env["PYTRITON_TEST_INPUT"] else {}) == chosen.get("input", {})


def test_a_helm_test_input_without_a_model_is_refused():
    with pytest.raises(helm().HelmRenderError, match="helmTest.input is set but helmTest.model is empty"):
        render({"helmTest": {"input": SMOKE_REQUEST}})


# --- autoscaling ------------------------------------------------------------------------------


HPA_ON = {"autoscaling": {"hpa": {"enabled": True}}, "serviceMonitor": {"enabled": True}}
KEDA_ON = {"autoscaling": {"keda": {"enabled": True}}, "serviceMonitor": {"enabled": True}}
RATIO = {"autoscaling": {"signal": "queueRatio"}}


def _merged(*layers):
    """Value layers merged key by key, later ones winning (as repeated `-f` files are)."""
    merged = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = _merged(merged[key], value)
            else:
                merged[key] = value
    return merged


def test_hpa_scales_on_the_requests_in_the_server_by_default():
    objects = render(VALUE_SETS["hpa"])
    hpa = only(objects, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "pytriton_requests_in_server"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "4"}
    rule = adapter_rule("pytriton_requests_in_server")
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    assert rule["seriesQuery"] == 'nv_inference_request_duration_us{namespace!="",pod!=""}'
    query = rule["metricsQuery"]
    # Little's law: the summed request time per second over 1e6 is the average in the server.
    assert query == "sum(rate(nv_inference_request_duration_us{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>) / 1e6"
    assert "replicas" not in only(objects, "Deployment")["spec"], "the HPA owns the replica count"


def test_the_queue_ratio_stays_an_option_with_its_own_target_and_rule():
    hpa = only(render(_merged(VALUE_SETS["hpa"], RATIO)), "HorizontalPodAutoscaler")
    [metric] = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == "pytriton_queue_compute_ratio"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "0.5"}
    rule = adapter_rule("pytriton_queue_compute_ratio")
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    query = rule["metricsQuery"]
    assert "rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}" in query
    assert "rate(nv_inference_compute_infer_duration_us{<<.LabelMatchers>>}" in query
    assert query.index("nv_inference_queue_duration_us") < query.index("/") < query.index("compute_infer")
    assert query.count("(") == query.count(")")
    chosen = _merged(VALUE_SETS["hpa"], {"autoscaling": {"signal": "requests", "requests": {"target": "2500m"}}})
    [metric] = only(render(chosen), "HorizontalPodAutoscaler")["spec"]["metrics"]
    assert metric["pods"]["target"]["averageValue"] == "2500m"


def test_an_unknown_signal_a_bad_target_and_renamed_values_are_refused():
    refusal = "at '/autoscaling/signal': value must be one of 'requests', 'queueRatio'"
    with pytest.raises(helm().HelmValuesError, match=refusal):
        render(_merged(VALUE_SETS["hpa"], {"autoscaling": {"signal": "cpu"}}))
    with pytest.raises(helm().HelmRenderError, match='autoscaling.requests.target="four"'):
        render(_merged(VALUE_SETS["keda"], {"autoscaling": {"requests": {"target": "four"}}}))
    with pytest.raises(helm().HelmRenderError, match="autoscaling.targetRatio was replaced by autoscaling.queueRatio"):
        render({"autoscaling": {"targetRatio": "0.5"}})
    with pytest.raises(helm().HelmRenderError, match="replaced by autoscaling.behavior.scaleDown"):
        render({"autoscaling": {"scaleDownStabilizationSeconds": 300}})
    with pytest.raises(helm().HelmRenderError, match="autoscaling.hpa.metricName was replaced"):
        render({"autoscaling": {"hpa": {"metricName": "x"}}})


def _behavior_policies(behavior):
    return {
        direction: (
            behavior[direction]["stabilizationWindowSeconds"],
            behavior[direction]["selectPolicy"],
            sorted((p["type"], p["value"], p["periodSeconds"]) for p in behavior[direction]["policies"]),
        )
        for direction in behavior
    }


def test_the_hpa_and_kedas_hpa_limit_both_directions():
    expected = {
        "scaleUp": (0, "Max", [("Percent", 100, 60), ("Pods", 4, 60)]),
        "scaleDown": (300, "Max", [("Percent", 25, 60), ("Pods", 1, 60)]),
    }
    hpa = only(render(VALUE_SETS["hpa"]), "HorizontalPodAutoscaler")
    assert _behavior_policies(hpa["spec"]["behavior"]) == expected
    scaled = only(render(VALUE_SETS["keda"]), "ScaledObject")
    assert _behavior_policies(scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]) == expected
    slower = {"behavior": {"scaleUp": {"pods": 2, "percent": 50, "periodSeconds": 120}}}
    hpa = only(render(_merged(VALUE_SETS["hpa"], {"autoscaling": slower})), "HorizontalPodAutoscaler")
    slower_up = (0, "Max", [("Percent", 50, 120), ("Pods", 2, 120)])
    assert _behavior_policies(hpa["spec"]["behavior"])["scaleUp"] == slower_up
    refusal = "at '/autoscaling/behavior/scaleDown/pods': minimum: got 0, want 1"
    with pytest.raises(helm().HelmValuesError, match=refusal):
        render(_merged(VALUE_SETS["hpa"], {"autoscaling": {"behavior": {"scaleDown": {"pods": 0}}}}))


def test_autoscaling_with_nothing_scraping_the_pods_is_refused():
    for autoscaler in ("hpa", "keda"):
        alone = {"autoscaling": {autoscaler: {"enabled": True}}}
        refusal = f"autoscaling.{autoscaler}.enabled=true, but nothing scrapes"
        with pytest.raises(helm().HelmRenderError, match=refusal) as caught:
            render(alone)
        # The message says what to set.
        assert "serviceMonitor.enabled=true or podMonitor.enabled=true" in str(caught.value)
        assert "autoscaling.externalScrape=true" in str(caught.value)
        # Rendered when the chart's ServiceMonitor or PodMonitor scrapes the pods ...
        for monitor in ("ServiceMonitor", "PodMonitor"):
            chosen = {monitor[0].lower() + monitor[1:]: {"enabled": True, "labels": PROMETHEUS_RELEASE_LABEL}}
            kinds = {o["kind"] for o in render(_merged(alone, chosen))}
            assert monitor in kinds and kinds & {"HorizontalPodAutoscaler", "ScaledObject"}
        # ... or when the values say another scrape configuration does.
        kinds = {o["kind"] for o in render(_merged(alone, {"autoscaling": {"externalScrape": True}}))}
        assert "ServiceMonitor" not in kinds and kinds & {"HorizontalPodAutoscaler", "ScaledObject"}
    # Without an autoscaler nothing needs a scrape.
    assert "ServiceMonitor" not in {o["kind"] for o in render()}


def _keda_query(values, release=RELEASE):
    [trigger] = only(render(values, release), "ScaledObject")["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    return trigger["metadata"]


def _pod_patterns(query):
    """The regular expressions of the query's `pod=~` matchers (PromQL anchors them at both ends)."""
    patterns = set(re.findall(r'pod=~"([^"\\]*)"', query))
    assert len(patterns) == 1, query
    assert query.count("pod=~") == query.count(f'namespace="{NAMESPACE}",pod=~'), query
    return patterns.pop()


def test_keda_queries_the_requests_in_the_server_by_default_and_the_ratio_as_an_option():
    metadata = _keda_query(VALUE_SETS["keda"])
    selector = f'namespace="{NAMESPACE}",pod=~"{FULLNAME}-[a-z0-9]+-[a-z0-9]{{5}}"'
    assert metadata["query"] == f"sum(rate(nv_inference_request_duration_us{{{selector}}}[1m])) / 1e6"
    assert metadata["threshold"] == "4"

    metadata = _keda_query(VALUE_SETS["keda-ratio-external-scrape"])
    query = metadata["query"]
    assert query.count("(") == query.count(")")
    assert f"rate(nv_inference_queue_duration_us{{{selector}}}[1m])" in query
    assert f"rate(nv_inference_compute_infer_duration_us{{{selector}}}[1m])" in query
    assert "clamp_min(" in query and "sum by (pod)" in query
    assert metadata["threshold"] == "0.5"


@pytest.mark.parametrize(
    "short, long",
    [("demo", "demo-pytriton-canary"), ("a-pytriton", "a-pytriton-b"), ("demo", "demo-pytriton-2")],
)
def test_each_keda_query_selects_its_own_release_pods_only(short, long):
    # `short`'s fullname is a prefix of `long`'s; Deployment pods are <fullname>-<hash>-<5 chars>.
    fullnames, patterns = {}, {}
    for release in (short, long):
        fullnames[release] = only(render(VALUE_SETS["keda"], release), "Deployment")["metadata"]["name"]
        for values in (VALUE_SETS["keda"], VALUE_SETS["keda-ratio-external-scrape"]):
            pattern = _pod_patterns(_keda_query(values, release)["query"])
            assert patterns.setdefault(release, pattern) == pattern
    assert fullnames[long].startswith(fullnames[short] + "-"), fullnames

    def pods(fullname):
        samples = (("7d9f8c6b5", "x2k4q"), ("5c7b9d4f8b", "bcdfg"), ("64f5", "zz9q2"))
        return [f"{fullname}-{template_hash}-{suffix}" for template_hash, suffix in samples]

    for release, other in ((short, long), (long, short)):
        for pod in pods(fullnames[release]):
            assert re.fullmatch(patterns[release], pod), (patterns[release], pod)
        for pod in pods(fullnames[other]):
            assert not re.fullmatch(patterns[release], pod), (patterns[release], pod)
    # The negative control: the prefix match the chart used before counts the longer release's pods.
    assert all(re.fullmatch(f"{fullnames[short]}-.*", pod) for pod in pods(fullnames[long]))


def test_keda_refuses_a_fullname_kubernetes_would_shorten_in_pod_names():
    longest = "r" * (46 - len("-pytriton"))
    assert only(render(VALUE_SETS["keda"], longest), "ScaledObject")["metadata"]["name"] == longest + "-pytriton"
    with pytest.raises(helm().HelmRenderError, match="choose a shorter release name"):
        render(VALUE_SETS["keda"], longest + "r")


def test_both_autoscalers_at_once_are_refused():
    both = {"autoscaling": {"hpa": {"enabled": True}, "keda": {"enabled": True}}}
    with pytest.raises(helm().HelmRenderError, match="choose one"):
        render(both)


def test_notes_name_the_endpoints():
    notes = render_manifests()["pytriton/templates/NOTES.txt"]
    assert f"http://{FULLNAME}.{NAMESPACE}.svc:8000" in notes
    assert f"helm test {RELEASE} -n {NAMESPACE}   (readiness)" in notes
    tested = render_manifests(VALUE_SETS["inference-from-and-helm-test"])["pytriton/templates/NOTES.txt"]
    assert "(readiness and one inference of Linear)" in tested


# --- escape hatches: what a real cluster needs besides the server -------------------------------


def _validated(obj, versions=None):
    """`obj`, after checking it strictly against every supported Kubernetes version (or `versions`)."""
    utils = kubernetes_validate()
    for version in versions or _kubernetes_versions():
        try:
            utils.validate(obj, version, strict=True)
        except utils.ValidationError as exc:
            pytest.fail(f"{obj['kind']} invalid in Kubernetes {version}: {'.'.join(map(str, exc.path))}: {exc.message}")
    return obj


def _pod_spec(objects):
    return only(objects, "Deployment")["spec"]["template"]["spec"]


def test_weights_on_a_volume_reach_the_server_through_extra_volumes_and_mounts():
    objects = render(VALUE_SETS["weights-on-a-volume"])
    _validated(only(objects, "Deployment"))
    pod = _pod_spec(objects)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["weights"] == WEIGHTS_VOLUME
    assert {"dshm", "tmp", "home"} < set(volumes)  # the chart's own stay
    mounts = server_container(objects)["volumeMounts"]
    assert WEIGHTS_MOUNT in mounts and {m["mountPath"] for m in mounts} >= {"/dev/shm", "/tmp", "/home/pytriton"}
    assert "weights" not in {v["name"] for v in _pod_spec(render())["volumes"]}


@pytest.mark.parametrize(
    "values, refusal",
    [
        ({"extraVolumes": [{"name": "dshm", "emptyDir": {}}]}, 'a volume named "dshm" already exists'),
        ({"extraVolumes": [WEIGHTS_VOLUME, WEIGHTS_VOLUME], "extraVolumeMounts": [WEIGHTS_MOUNT]},
         'a volume named "weights" already exists'),
        ({"extraVolumes": [WEIGHTS_VOLUME], "extraVolumeMounts": [{**WEIGHTS_MOUNT, "mountPath": "/tmp"}]},
         'mountPath "/tmp" is one of the chart\'s own mounts'),
        ({"extraVolumeMounts": [WEIGHTS_MOUNT]},
         'the mount at "/models" names the volume "weights", which the pod does not have: '
         "expected one of dshm, tmp, home"),
        ({"extraContainers": [{**SIDECAR, "name": "pytriton"}]}, 'a container named "pytriton" already exists'),
        ({"initContainers": [FETCH_WEIGHTS], "extraContainers": [{**SIDECAR, "name": "fetch-weights"}]},
         'a container named "fetch-weights" already exists'),
    ],
    ids=["chart-volume-name", "twice", "chart-mount-path", "unknown-volume", "server-name", "init-and-sidecar"],
)
def test_volumes_mounts_and_containers_that_clash_are_refused_by_name(values, refusal):
    with pytest.raises(helm().HelmRenderError, match=re.escape(refusal)):
        render(values)


def test_init_containers_and_sidecars_run_beside_the_server_which_kubectl_still_picks():
    objects = render(VALUE_SETS["weights-on-a-volume"])
    pod = _pod_spec(objects)
    assert pod["initContainers"] == [FETCH_WEIGHTS]
    assert [c["name"] for c in pod["containers"]] == ["pytriton", SIDECAR["name"]]
    assert pod["containers"][1] == SIDECAR
    annotations = only(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kubectl.kubernetes.io/default-container"] == "pytriton"
    default = _pod_spec(render())
    assert "initContainers" not in default and len(default["containers"]) == 1
    # A pod of one container needs no default-container annotation (and gets no other annotation).
    assert "annotations" not in only(render(), "Deployment")["spec"]["template"]["metadata"]


def test_env_from_brings_whole_secrets_and_config_maps_into_the_server():
    container = server_container(render(VALUE_SETS["weights-on-a-volume"]))
    assert container["envFrom"] == [{"secretRef": {"name": "object-store-credentials"}}]
    assert "envFrom" not in server_container(render())


def test_service_account_annotations_carry_a_cloud_identity_and_need_the_charts_account():
    objects = render(VALUE_SETS["weights-on-a-volume"])
    account = only(objects, "ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/llm-reader"}
    assert _pod_spec(objects)["serviceAccountName"] == account["metadata"]["name"]
    assert "annotations" not in only(render(), "ServiceAccount")["metadata"]
    refusal = ('serviceAccount.annotations is set, but serviceAccount.create=false: '
               '.* annotate your own ServiceAccount \\("inference"\\)')
    with pytest.raises(helm().HelmRenderError, match=refusal):
        render({"serviceAccount": {"create": False, "name": "inference",
                                   "annotations": {"iam.gke.io/gcp-service-account": "x"}}})


def test_priority_class_name_reaches_the_server_pods_and_the_test_pod():
    objects = render(VALUE_SETS["weights-on-a-volume"])
    assert _pod_spec(objects)["priorityClassName"] == "serving-high"
    assert only(objects, "Pod")["spec"]["priorityClassName"] == "serving-high"
    assert "priorityClassName" not in _pod_spec(render())


def test_name_overrides_rename_every_object_and_the_selector_follows():
    objects = render(VALUE_SETS["renamed"])
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert names == {("Deployment", "llm-serving"), ("Service", "llm-serving"), ("ServiceAccount", "llm-serving"),
                     ("PodDisruptionBudget", "llm-serving"), ("NetworkPolicy", "llm-serving"),
                     ("Pod", "llm-serving-test")}
    deployment = only(objects, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "llm", "app.kubernetes.io/instance": RELEASE}
    assert only(objects, "Service")["spec"]["selector"] == selector
    assert only(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == selector
    # nameOverride alone: <release>-<name>; a release name holding the name is used as it stands.
    assert only(render({"nameOverride": "llm"}), "Deployment")["metadata"]["name"] == f"{RELEASE}-llm"
    assert only(render({"nameOverride": "llm"}, release="llm-prod"), "Deployment")["metadata"]["name"] == "llm-prod"
    # The headless Service's name stays a DNS label (63 characters at most) with the longest fullname.
    longest = render({"fullnameOverride": "a" * 63, "service": {"headless": True}})
    headless = [o["metadata"]["name"] for o in longest if o["kind"] == "Service" and o["metadata"]["name"] != "a" * 63]
    assert headless == ["a" * 54 + "-headless"]


def test_common_labels_reach_every_object_and_the_pods_without_changing_the_selector():
    for name in ("renamed", "exposed", "keda-pod-monitor", "token"):
        values = {**VALUE_SETS[name], "commonLabels": {"team": "ml-platform", "cost-center": "4711"}}
        objects = render(values)
        for obj in objects:
            assert obj["metadata"]["labels"]["team"] == "ml-platform", (name, obj["kind"])
            assert obj["metadata"]["labels"]["cost-center"] == "4711", (name, obj["kind"])
        deployment = only(objects, "Deployment")
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert pod_labels["team"] == "ml-platform"
        assert "team" not in deployment["spec"]["selector"]["matchLabels"]  # a selector is immutable
    pod_labels = only(render(VALUE_SETS["renamed"]), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["example.com/tier"] == "gold"  # podLabels too
    # On the pods, a podLabels value wins over a commonLabels one of the same key.
    both = render({"commonLabels": {"team": "ml-platform"}, "podLabels": {"team": "llm"}})
    assert only(both, "Deployment")["spec"]["template"]["metadata"]["labels"]["team"] == "llm"
    assert only(both, "Deployment")["metadata"]["labels"]["team"] == "ml-platform"
    for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "helm.sh/chart"):
        with pytest.raises(helm().HelmRenderError, match=re.escape(f"commonLabels.{key} is set by the chart itself")):
            render({"commonLabels": {key: "x"}})
    refusal = "podLabels.app.kubernetes.io/name is one of the Deployment's selector labels"
    with pytest.raises(helm().HelmRenderError, match=re.escape(refusal)):
        render({"podLabels": {"app.kubernetes.io/name": "x"}})


def test_image_registry_is_prefixed_once():
    objects = render(VALUE_SETS["renamed"])
    assert server_container(objects)["image"] == "registry.example.com:5000/ml/llm-server:2.0.1"
    assert only(objects, "Pod")["spec"]["containers"][0]["image"] == server_container(objects)["image"]
    digest = "sha256:" + "b" * 64
    pinned = server_container(render({"image": {"registry": "localhost:5000/", "repository": "llm", "digest": digest}}))
    assert pinned["image"] == f"localhost:5000/llm@{digest}"
    refusal = ('image.registry="mirror.example.com" is set, but image.repository="registry.example.com/my-team/'
               'my-pytriton-server" already starts with the registry host "registry.example.com"')
    with pytest.raises(helm().HelmRenderError, match=re.escape(refusal)):
        render({"image": {"registry": "mirror.example.com"}})


# --- the autoscaler must read something -----------------------------------------------------------


@pytest.mark.parametrize("autoscaler", ["hpa", "keda"])
@pytest.mark.parametrize("monitor", ["serviceMonitor", "podMonitor"])
def test_an_autoscaler_on_a_monitor_prometheus_would_not_select_is_refused(autoscaler, monitor):
    unlabelled = {"autoscaling": {autoscaler: {"enabled": True}}, monitor: {"enabled": True}}
    with pytest.raises(helm().HelmRenderError) as caught:
        render(unlabelled)
    message = str(caught.value)
    assert f"autoscaling.{autoscaler}.enabled=true with {monitor}.labels empty" in message
    assert f"Set {monitor}.labels (e.g. {{release: kube-prometheus-stack}}" in message
    assert f"or {monitor}.labelsNotNeeded=true" in message
    # Labels Prometheus selects by, or the user's word that it needs none, and it renders.
    for chosen in ({"labels": PROMETHEUS_RELEASE_LABEL}, {"labelsNotNeeded": True}):
        objects = render(_merged(unlabelled, {monitor: chosen}))
        [found] = [o for o in objects if o["kind"] == monitor[0].upper() + monitor[1:]]
        assert found["metadata"]["labels"].items() >= chosen.get("labels", {}).items()
    # A monitor without an autoscaler feeds only dashboards: not refused.
    render({monitor: {"enabled": True}})


def test_both_monitors_at_once_are_refused_since_they_would_double_the_signal():
    both = {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}
    with pytest.raises(helm().HelmRenderError, match="serviceMonitor.enabled and podMonitor.enabled are both true"):
        render(both)


def test_a_pod_monitor_scrapes_the_server_pods_and_not_the_test_pod():
    objects = render(VALUE_SETS["keda-pod-monitor"])
    monitor = only(objects, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    assert not selector.items() <= only(objects, "Pod")["metadata"]["labels"].items()
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}]
    assert "ServiceMonitor" not in {o["kind"] for o in objects}


@pytest.mark.parametrize(
    "values, lines",
    [
        (VALUE_SETS["hpa"], [
            "Autoscaling (HPA) on pytriton_requests_in_server, target 4 per pod,",
            "scraped through the ServiceMonitor demo-pytriton (labels release=kube-prometheus-stack).",
            'kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/serving/pods/*/'
            'pytriton_requests_in_server"',
            "kubectl -n serving describe hpa demo-pytriton",
        ]),
        (VALUE_SETS["keda-pod-monitor"], [
            "Autoscaling (KEDA) on pytriton_requests_in_server, target 4 per pod,",
            "scraped through the PodMonitor demo-pytriton (labels release=kube-prometheus-stack).",
            'kubectl get --raw "/apis/external.metrics.k8s.io/v1beta1/namespaces/serving/$(kubectl -n serving get '
            "scaledobject demo-pytriton -o jsonpath='{.status.externalMetricNames[0]}')?labelSelector="
            'scaledobject.keda.sh%2Fname%3Ddemo-pytriton"',
        ]),
        (VALUE_SETS["hpa-prometheus-selects-every-monitor"], [
            "scraped through the ServiceMonitor demo-pytriton (no labels: labelsNotNeeded).",
        ]),
        (_merged(VALUE_SETS["keda-ratio-external-scrape"],
                 {"networkPolicy": {"metricsNamespaces": ["observability"]}}), [
            "Autoscaling (KEDA) on pytriton_queue_compute_ratio, target 0.5 per pod,",
            "scraped through a scrape configuration of yours (autoscaling.externalScrape).",
            "kubectl -n observability port-forward svc/prometheus-operated 9090",
        ]),
    ],
    ids=["hpa", "keda-pod-monitor", "no-labels", "external-scrape"],
)
def test_notes_print_the_commands_that_show_whether_the_metric_arrives(values, lines):
    notes = render_manifests(values)["pytriton/templates/NOTES.txt"]
    for line in lines:
        assert line in notes, notes
    query = "query=up{namespace=\"serving\",pod=~\"demo-pytriton-[a-z0-9]+-[a-z0-9]{5}\"}"
    assert query in notes
    assert "Autoscaling" not in render_manifests()["pytriton/templates/NOTES.txt"]


# --- two replicas, two nodes -------------------------------------------------------------------


def test_replicas_spread_over_nodes_by_default_and_the_users_spread_replaces_it():
    objects = render()
    deployment = only(objects, "Deployment")
    [spread] = _pod_spec(objects)["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"  # never keeps a pod Pending
    assert spread["maxSkew"] == 1
    assert spread["labelSelector"] == {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}
    assert spread["matchLabelKeys"] == ["pod-template-hash"]
    # The selector counts the server's pods: those of the Deployment, not the helm test pod.
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert spread["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    assert not spread["labelSelector"]["matchLabels"].items() <= only(objects, "Pod")["metadata"]["labels"].items()
    # Renamed, the selector follows.
    [renamed] = _pod_spec(render(VALUE_SETS["renamed"]))["topologySpreadConstraints"]
    assert renamed["labelSelector"]["matchLabels"]["app.kubernetes.io/name"] == "llm"
    chosen = VALUE_SETS["weights-on-a-volume"]["topologySpreadConstraints"]
    assert _pod_spec(render(VALUE_SETS["weights-on-a-volume"]))["topologySpreadConstraints"] == chosen


# --- values that broke or vanished -------------------------------------------------------------


def test_resource_claims_reach_the_container_and_the_pod():
    claims = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
              "resources": {"claims": [{"name": "gpu"}]}}
    objects = render(claims)
    assert server_container(objects)["resources"]["claims"] == [{"name": "gpu"}]
    assert _pod_spec(objects)["resourceClaims"] == claims["resourceClaims"]
    # This form of PodResourceClaim is Kubernetes 1.31's (1.29 and 1.30 had an alpha `source`);
    # dynamic resource allocation is on by default from 1.34.
    newer = [v for v in _kubernetes_versions() if _minor(v) >= (1, 31)]
    _validated(only(objects, "Deployment"), newer)
    assert "claims" not in server_container(render())["resources"]
    refusal = 'resources.claims names "gpu", which is not in resourceClaims (empty)'
    with pytest.raises(helm().HelmRenderError, match=re.escape(refusal)):
        render({"resources": {"claims": [{"name": "gpu"}]}})


def test_min_replicas_above_max_replicas_is_refused():
    refusal = "autoscaling.minReplicas=5 is greater than autoscaling.maxReplicas=3: expected minReplicas <= maxReplicas"
    with pytest.raises(helm().HelmRenderError, match=re.escape(refusal)):
        render(_merged(VALUE_SETS["hpa"], {"autoscaling": {"minReplicas": 5, "maxReplicas": 3}}))
    hpa = only(render(_merged(VALUE_SETS["hpa"], {"autoscaling": {"minReplicas": 3, "maxReplicas": 3}})),
               "HorizontalPodAutoscaler")
    assert hpa["spec"]["minReplicas"] == hpa["spec"]["maxReplicas"] == 3


@pytest.mark.parametrize("target", ["0", "0m", "0.0", "000"])
def test_a_zero_autoscaling_target_is_refused(target):
    for autoscaler in ("hpa", "keda"):
        values = _merged(VALUE_SETS[autoscaler], {"autoscaling": {"requests": {"target": target}}})
        with pytest.raises(helm().HelmRenderError,
                           match=re.escape(f'autoscaling.requests.target="{target}": expected a number above 0')):
            render(values)
    ratio = _merged(VALUE_SETS["hpa"], {"autoscaling": {"signal": "queueRatio", "queueRatio": {"target": target}}})
    with pytest.raises(helm().HelmRenderError, match=re.escape(f'autoscaling.queueRatio.target="{target}"')):
        render(ratio)
    # The smallest positive targets still render.
    small = only(render(_merged(VALUE_SETS["hpa"], {"autoscaling": {"requests": {"target": "1m"}}})),
                 "HorizontalPodAutoscaler")
    assert small["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "1m"


@pytest.mark.parametrize("budget", ["abc", "1.5", "50 %", "101%", "-1"])
def test_a_disruption_budget_that_is_no_number_or_percentage_is_refused(tmp_path, budget):
    values = {"podDisruptionBudget": {"maxUnavailable": budget}}
    with pytest.raises(helm().HelmValuesError, match="at '/podDisruptionBudget/maxUnavailable'"):
        render(values)
    # The template's own check, for an install that skips the schema.
    refusal = f'podDisruptionBudget.maxUnavailable="{budget}": expected a number of pods (0 or more) or a percentage'
    with pytest.raises(helm().HelmRenderError, match=re.escape(refusal)):
        render(values, chart_dir=_without_schema(tmp_path))


@pytest.mark.parametrize("budget", [0, 2, "25%", "100%"])
def test_a_disruption_budget_of_pods_or_a_percentage_renders(budget):
    budget_object = _validated(only(render({"podDisruptionBudget": {"maxUnavailable": budget}}), "PodDisruptionBudget"))
    assert budget_object["spec"]["maxUnavailable"] == budget


@pytest.mark.parametrize(
    "ports, refusal",
    [
        ({"grpc": 8000}, "ports.grpc=8000 is the same as ports.http"),
        ({"metrics": 8000}, "ports.metrics=8000 is the same as ports.http"),
        ({"metrics": 8001}, "ports.metrics=8001 is the same as ports.grpc"),
    ],
)
def test_one_port_for_two_endpoints_is_refused(ports, refusal):
    with pytest.raises(helm().HelmRenderError, match=re.escape(refusal + ": expected a port of its own")):
        render({"ports": ports})


def test_the_kubelet_sleep_action_is_refused_below_kubernetes_1_30():
    # The version is the cluster's (an install asks the API server), so the stand-in cluster of
    # install_on decides it; a refusal is a template's, anything later means rendering passed.
    sleep = VALUE_SETS["sleep-action"]
    rendered = "unable to build kubernetes objects from release manifest"  # the step after rendering
    refused = install_on("v1.29.4", sleep)
    assert refused.endswith(
        'lifecycle.preStopAction="sleep" needs Kubernetes 1.30 or newer (the kubelet\'s sleep action is alpha and '
        "off by default in 1.29), and this cluster is v1.29.4: use lifecycle.preStopAction=exec (a `sleep` from "
        "the image)"), refused
    assert rendered in install_on("v1.30.0", sleep)
    assert rendered in install_on("v1.29.4", {})  # the exec sleep, the default, works on 1.29
    # Offline (the SDK's own, newer version) it renders.
    assert server_container(render(sleep))["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}


def test_the_helm_test_pod_is_no_server_pod_for_any_selector():
    # A selector that matched the test pod would count it: the PDB as one of the server's pods
    # (a finished test pod is unavailable, so a drain could be refused), the Service as an
    # endpoint, a PodMonitor as a target.
    for name in ("defaults", "keda-pod-monitor", "renamed", "inference-from-and-helm-test"):
        objects = render(VALUE_SETS[name])
        test_labels = only(objects, "Pod")["metadata"]["labels"]
        selectors = {
            "Deployment": only(objects, "Deployment")["spec"]["selector"]["matchLabels"],
            "Service": only(objects, "Service")["spec"]["selector"],
            "PodDisruptionBudget": only(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
            "NetworkPolicy": only(objects, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"],
        }
        for monitor in [o for o in objects if o["kind"] == "PodMonitor"]:
            selectors["PodMonitor"] = monitor["spec"]["selector"]["matchLabels"]
        for kind, selector in selectors.items():
            assert not selector.items() <= test_labels.items(), (name, kind, selector, test_labels)
        # It still says what it is and whose it is.
        assert test_labels["app.kubernetes.io/component"] == "helm-test"
        assert test_labels["app.kubernetes.io/instance"] == RELEASE
    # The negative control: the labels the test pod had before matched every one of them.
    objects = render()
    before = {**only(objects, "Deployment")["metadata"]["labels"], "app.kubernetes.io/component": "helm-test"}
    assert only(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= before.items()


# --- exposure ------------------------------------------------------------------------------------


def test_an_ingress_sends_its_hosts_to_the_chosen_service_port():
    objects = render(VALUE_SETS["exposed"])
    ingress = only(objects, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["models.example.com"], "secretName": "models-tls"}]
    assert ingress["metadata"]["annotations"] == {"nginx.ingress.kubernetes.io/proxy-body-size": "64m"}
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "models.example.com"
    [path] = rule["http"]["paths"]
    assert path["path"] == "/" and path["pathType"] == "Prefix"
    service = only(objects, "Service")
    assert path["backend"] == {"service": {"name": service["metadata"]["name"], "port": {"name": "http"}}}
    assert "http" in {p["name"] for p in service["spec"]["ports"]}
    # No host: one rule for every host; and gRPC for a controller told to speak it to the backend.
    grpc = _validated(only(render({"ingress": {"enabled": True, "servicePort": "grpc"}}), "Ingress"))
    [rule] = grpc["spec"]["rules"]
    assert "host" not in rule and rule["http"]["paths"][0]["backend"]["service"]["port"] == {"name": "grpc"}
    assert "Ingress" not in {o["kind"] for o in render()}


def test_gateway_routes_send_http_and_grpc_to_their_ports():
    objects = render(VALUE_SETS["exposed"])
    http_route, grpc_route = only(objects, "HTTPRoute"), only(objects, "GRPCRoute")
    assert http_route["apiVersion"] == grpc_route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert http_route["spec"]["parentRefs"] == grpc_route["spec"]["parentRefs"] == [GATEWAY]
    assert http_route["spec"]["hostnames"] == ["models.example.com"]
    assert grpc_route["spec"]["hostnames"] == ["grpc.models.example.com"]
    [http_rule] = http_route["spec"]["rules"]
    assert http_rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert http_rule["backendRefs"] == [{"name": FULLNAME, "port": 8000}]
    [grpc_rule] = grpc_route["spec"]["rules"]
    assert grpc_rule == {"backendRefs": [{"name": FULLNAME, "port": 8001}]}  # every service and method
    moved = render({**VALUE_SETS["exposed"], "ports": {"http": 9000, "grpc": 9001, "metrics": 9002}})
    assert only(moved, "HTTPRoute")["spec"]["rules"][0]["backendRefs"][0]["port"] == 9000
    assert only(moved, "GRPCRoute")["spec"]["rules"][0]["backendRefs"][0]["port"] == 9001
    notes = render_manifests(VALUE_SETS["exposed"])["pytriton/templates/NOTES.txt"]
    assert "HTTPRoute demo-pytriton: from Gateway gateways/public (https), for models.example.com -> port http" in notes
    assert "Ingress demo-pytriton: for models.example.com, path / -> port http" in notes


@pytest.mark.parametrize("route", ["httpRoute", "grpcRoute"])
def test_a_route_attached_to_no_gateway_is_refused(route):
    with pytest.raises(helm().HelmRenderError, match=re.escape(f"{route}.enabled=true with {route}.parentRefs empty")):
        render({route: {"enabled": True}})


def test_load_balancer_source_ranges_reach_a_load_balancer_and_are_refused_elsewhere():
    service = only(render(VALUE_SETS["exposed"]), "Service")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24", "2001:db8::/32"]
    assert "loadBalancerSourceRanges" not in only(render(), "Service")["spec"]
    refusal = ('service.loadBalancerSourceRanges is set, but service.type="ClusterIP": '
               "only a LoadBalancer Service uses it")
    with pytest.raises(helm().HelmRenderError, match=re.escape(refusal)):
        render({"service": {"loadBalancerSourceRanges": ["203.0.113.0/24"]}})


# --- the drain that keeps serving --------------------------------------------------------------


def test_drain_serving_seconds_reaches_the_server_and_lengthens_the_grace_period():
    objects = render(VALUE_SETS["weights-on-a-volume"])
    container = server_container(objects)
    served = TritonConfig.from_env(plain_env(container))
    assert served.drain_serving_s == 5
    grace = _pod_spec(objects)["terminationGracePeriodSeconds"]
    assert grace == 10 + 5 + 30 + PYTRITON_KILL_MARGIN_S + 5
    # Unset by default: pytriton's own 0, since the preStop sleep already took the pod out.
    assert "PYTRITON_TRITON_CONFIG_DRAIN_SERVING_S" not in plain_env(server_container(render()))
    assert TritonConfig.from_env(plain_env(server_container(render()))).drain_serving_s is None
    # A fraction of a second is passed as it is, and the grace period rounds it up.
    fraction = render({"triton": {"drainServingSeconds": 2.5}})
    assert TritonConfig.from_env(plain_env(server_container(fraction))).drain_serving_s == 2.5
    assert _pod_spec(fraction)["terminationGracePeriodSeconds"] == 10 + 3 + 30 + PYTRITON_KILL_MARGIN_S + 5
    refusal = ("terminationGracePeriodSeconds=60 is too short: it must be at least lifecycle.preStopSleepSeconds (10) "
               "+ triton.drainServingSeconds (5, rounded up) + triton.exitTimeoutSecs (30)")
    with pytest.raises(helm().HelmRenderError, match=re.escape(refusal)):
        render({"triton": {"drainServingSeconds": 5}, "terminationGracePeriodSeconds": 60})
    with pytest.raises(helm().HelmRenderError, match="triton.config.DRAIN_SERVING_S is set by the chart"):
        render({"triton": {"config": {"DRAIN_SERVING_S": "5"}}})


# --- the chart's README --------------------------------------------------------------------------


def test_every_repository_path_the_chart_readme_names_exists():
    text = (CHART / "README.md").read_text()
    paths = set(re.findall(r"`((?:tests|deploy|docs|bench|examples)/[^`\s]+)`", text))
    assert "tests/functional/deploy/data/README.md" in paths, "say where the CRD copies come from"
    root = CHART.parents[2]
    assert [p for p in sorted(paths) if not (root / p).exists()] == []


def test_every_crd_copy_is_used_and_its_source_is_recorded():
    crd_dir = CHART.parents[2] / "tests" / "functional" / "deploy" / "data" / "crds"
    readme = (crd_dir.parent / "README.md").read_text()
    copies = sorted(path.name for path in crd_dir.iterdir())
    assert copies == sorted(path.name for path in CRD_FILES.values())
    for name in copies:
        [row] = [line for line in readme.splitlines() if line.startswith(f"| `{name}` |")]
        assert re.search(r"`[0-9a-f]{40}`", row), f"{name}: no commit in data/README.md"


# --- the OpenAI-compatible API ------------------------------------------------------------------


def test_the_openai_port_is_opened_on_the_container_and_the_service_only_when_set():
    objects = render({"ports": {"openai": 9000}})
    container = server_container(objects)
    assert TritonConfig.from_env(plain_env(container)).openai_port == 9000
    assert {"name": "openai", "containerPort": 9000, "protocol": "TCP"} in container["ports"]
    service = [o for o in objects if o["kind"] == "Service" and not o["metadata"]["name"].endswith("-headless")][0]
    assert {"name": "openai", "port": 9000, "targetPort": "openai", "protocol": "TCP",
            "appProtocol": "http"} in service["spec"]["ports"]
    # Unset by default: no port, and the server starts no front.
    plain = render()
    assert "openai" not in [port["name"] for port in server_container(plain)["ports"]]
    assert TritonConfig.from_env(plain_env(server_container(plain))).openai_port is None
    with pytest.raises(helm().HelmRenderError, match="triton.config.OPENAI_PORT is set by the chart"):
        render({"triton": {"config": {"OPENAI_PORT": "9000"}}})
    # A NetworkPolicy lets the API in from the same peers as inference.
    policy = only(render({"ports": {"openai": 9000}, "networkPolicy": {"enabled": True}}), "NetworkPolicy")
    assert {"port": "openai", "protocol": "TCP"} in policy["spec"]["ingress"][0]["ports"]
