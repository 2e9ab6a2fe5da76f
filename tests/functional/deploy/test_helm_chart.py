"""The Helm chart (deploy/helm/pytriton), offline: it renders, lints, fits the Kubernetes schemas, keeps its policies.

No cluster is contacted: Helm's Go SDK (bundled in helm-python-sdk) renders the templates, and
kubernetes-validate holds the JSON schemas of each Kubernetes release. The probe paths and
ports are checked against what pytriton's server really serves (TritonConfig read from the
rendered environment); the probes' behaviour against a live server is in test_probes_k8s.py.
"""

from __future__ import annotations

import base64
import re

import jsonschema
import pytest
from helm_chart_support import (
    CHART,
    NAMESPACE,
    RELEASE,
    TRITON_HEALTH_PATHS,
    VALUE_SETS,
    adapter_rule,
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


def _kubernetes_versions():
    utils = kubernetes_validate()

    versions = [v for v in utils.all_versions() if tuple(map(int, v.split(".")[:2])) >= (1, 29)]
    return versions


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request):
    return request.param, render(VALUE_SETS[request.param])


# --- rendering and lint ------------------------------------------------------------------------


def test_every_value_set_renders_the_objects_it_asks_for():
    kinds = {name: sorted(o["kind"] for o in render(values)) for name, values in VALUE_SETS.items()}
    base = ["Deployment", "NetworkPolicy", "PodDisruptionBudget", "Service", "ServiceAccount"]
    assert kinds["defaults"] == base
    assert kinds["hpa"] == sorted(base + ["HorizontalPodAutoscaler", "ServiceMonitor"])
    assert kinds["keda"] == sorted(base + ["ScaledObject", "ServiceMonitor"])
    assert kinds["keda-ratio-external-scrape"] == sorted(base + ["ScaledObject"])
    assert kinds["token"] == sorted(base + ["Secret", "Service"])  # and the headless Service
    assert kinds["token-existing-secret"] == base  # the user's Secret is not rendered


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_is_clean_in_strict_mode(name):
    report = helm().lint(CHART, VALUE_SETS[name], strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error
    assert report["errors"] == [] and problems == [], report


# --- Kubernetes schemas ------------------------------------------------------------------------


def test_the_bundled_schemas_cover_1_29_and_newer():
    versions = _kubernetes_versions()
    assert versions[0].startswith(OLDEST_KUBERNETES + "."), versions
    assert len(versions) >= 5, versions


def test_every_object_fits_every_kubernetes_version_strictly(rendered):
    utils = kubernetes_validate()

    name, objects = rendered
    checked = 0
    for obj in objects:
        if obj["kind"] in CRD_SCHEMAS:
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
    assert checked >= 5 * len(_kubernetes_versions())


def test_strict_validation_rejects_an_unknown_field():
    # The negative control of the test above: strict schemas refuse fields Kubernetes would drop.
    utils = kubernetes_validate()

    deployment = only(render(), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(utils.ValidationError):
        utils.validate(deployment, _kubernetes_versions()[0], strict=True)
    with pytest.raises(utils.SchemaNotFoundError):
        utils.validate({**only(render(), "PodDisruptionBudget"), "apiVersion": "policy/v1beta1"}, "1.29.0", strict=True)


# Written from the documented fields of the Prometheus operator's ServiceMonitor
# (monitoring.coreos.com/v1) and KEDA's ScaledObject (keda.sh/v1alpha1), restricted to what
# the chart uses: unknown fields are refused, as Kubernetes' structural CRD schemas would drop them.
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}, "labels": _LABELS},
}
CRD_SCHEMAS = {
    "ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "additionalProperties": False,
                "properties": {
                    "selector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"matchLabels": _LABELS},
                    },
                    "namespaceSelector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                            },
                        },
                    },
                },
            },
        },
    },
    "ScaledObject": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "keda.sh/v1alpha1"},
            "kind": {"const": "ScaledObject"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "required": ["scaleTargetRef", "triggers"],
                "additionalProperties": False,
                "properties": {
                    "scaleTargetRef": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {name: {"type": "string"} for name in ("name", "kind", "apiVersion")},
                    },
                    "minReplicaCount": {"type": "integer", "minimum": 0},
                    "maxReplicaCount": {"type": "integer", "minimum": 1},
                    "pollingInterval": {"type": "integer", "minimum": 1},
                    "cooldownPeriod": {"type": "integer", "minimum": 0},
                    "advanced": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "horizontalPodAutoscalerConfig": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {"behavior": {"type": "object"}, "name": {"type": "string"}},
                            },
                        },
                    },
                    "triggers": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["type", "metadata"],
                            "additionalProperties": False,
                            "properties": {
                                "type": {"const": "prometheus"},
                                "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                                "metadata": {
                                    "type": "object",
                                    "required": ["serverAddress", "query", "threshold"],
                                    "additionalProperties": {"type": "string"},
                                    "properties": {
                                        "serverAddress": {"type": "string", "pattern": "^https?://"},
                                        "threshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_custom_resources_fit_their_documented_schemas(rendered):
    name, objects = rendered
    for obj in objects:
        if obj["kind"] in CRD_SCHEMAS:
            jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])
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


def test_crd_schemas_refuse_a_misspelt_field():
    monitor = only(render(VALUE_SETS["hpa"]), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, CRD_SCHEMAS["ServiceMonitor"])


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


def test_probe_timing_fits_loading_and_healing(rendered):
    _, objects = rendered
    container = server_container(objects)
    startup, readiness, liveness = (container[f"{k}Probe"] for k in ("startup", "readiness", "liveness"))
    assert startup["periodSeconds"] <= 2 and startup["periodSeconds"] * startup["failureThreshold"] >= 120
    # Out of the Service before a healing ends (~3 s) ...
    assert readiness["periodSeconds"] * readiness["failureThreshold"] <= 3
    # ... but never restarted by one: the liveness window is longer than a healing.
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > HEALING_BOUND_S
    assert liveness["timeoutSeconds"] >= 2


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
    with pytest.raises(helm().HelmRenderError, match=r"shm.sizeLimit=\"half\""):
        render({"shm": {"sizeLimit": "half"}})


def test_requests_and_limits_are_set(rendered):
    name, objects = rendered
    resources = server_container(objects)["resources"]
    for side in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[side]), (name, side)
    if VALUE_SETS[name].get("gpu", {}).get("enabled"):
        assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 2
    else:
        assert "nvidia.com/gpu" not in resources["limits"]


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


def test_network_policy_keeps_metrics_to_the_monitoring_namespace(rendered):
    _, objects = rendered
    policy = only(objects, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["podSelector"]["matchLabels"] == only(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    metrics_rules = [r for r in policy["ingress"] if any(p["port"] == "metrics" for p in r["ports"])]
    assert len(metrics_rules) == 1
    [rule] = metrics_rules
    assert [p["port"] for p in rule["ports"]] == ["metrics"], "metrics shares a rule with other ports"
    monitoring = {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring"]}
    assert rule["from"] == [{"namespaceSelector": {"matchExpressions": [monitoring]}}]
    other_ports = {p["port"] for r in policy["ingress"] if r is not rule for p in r["ports"]}
    assert other_ports == {"http", "grpc"}


def test_network_policy_takes_the_monitoring_selector_from_values():
    chosen = {"matchLabels": {"team": "observability"}}
    policy = only(render({"networkPolicy": {"metricsNamespaceSelector": chosen}}), "NetworkPolicy")["spec"]
    [rule] = [r for r in policy["ingress"] if r["ports"][0]["port"] == "metrics"]
    assert rule["from"] == [{"namespaceSelector": chosen}]  # the default names are not ANDed in
    policy = only(render({"networkPolicy": {"metricsNamespaces": ["prometheus", "ops"]}}), "NetworkPolicy")["spec"]
    [rule] = [r for r in policy["ingress"] if r["ports"][0]["port"] == "metrics"]
    assert rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["prometheus", "ops"]


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
    with pytest.raises(helm().HelmRenderError, match='autoscaling.signal="cpu": choose "requests"'):
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
    with pytest.raises(helm().HelmRenderError, match="autoscaling.behavior.scaleDown.pods=0: must be at least 1"):
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
