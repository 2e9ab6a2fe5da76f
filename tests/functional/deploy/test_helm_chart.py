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
    INFERENCE_PEER,
    NAMESPACE,
    RELEASE,
    SMOKE_REQUEST,
    TRITON_HEALTH_PATHS,
    VALUE_SETS,
    adapter_rule,
    crd_schema,
    helm,
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
        if path[0] in ("command", "args", "extraEnv", "imagePullSecrets", "podAnnotations", "podLabels",
                       "topologySpreadConstraints", "podSecurityContext", "securityContext") or path[-1] == "digest":
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
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        # It must select the chart's Service and scrape a port that Service has.
        service = only(objects, "Service", FULLNAME)
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
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

    def schema_keys(node, prefix=""):
        for key, value in node.get("properties", {}).items():
            if "Removed" in value.get("description", ""):
                continue
            yield prefix + key
            if value.get("additionalProperties") is False:
                yield from schema_keys(value, prefix + key + ".")

    def closed(node, path=""):
        # Every object the chart defines is closed; open ones are maps or Kubernetes objects.
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
    service = only(objects, "Service", FULLNAME)
    http_port = {p["name"]: p["port"] for p in service["spec"]["ports"]}["http"]
    assert env["PYTRITON_TEST_URL"] == f"http://{FULLNAME}.{NAMESPACE}.svc:{http_port}"
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
        assert "serviceMonitor.enabled=true" in str(caught.value)
        assert "autoscaling.externalScrape=true" in str(caught.value)
        # Rendered when the chart's ServiceMonitor scrapes the pods ...
        kinds = {o["kind"] for o in render(_merged(alone, {"serviceMonitor": {"enabled": True}}))}
        assert "ServiceMonitor" in kinds and kinds & {"HorizontalPodAutoscaler", "ScaledObject"}
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
