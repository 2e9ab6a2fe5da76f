"""The Helm chart in deploy/helm/pytriton, rendered offline for the tests of this folder.

Rendering uses helm-python-sdk, whose wheel bundles Helm's Go SDK as a native library, so no
helm binary is downloaded or needed. Each value set below is one way the chart is meant to be
installed; the tests render every one of them.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import pathlib
import re
import sys
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "pytriton"
CHART_README = CHART / "README.md"
RELEASE = "demo"
NAMESPACE = "serving"

# Triton's health endpoints (docs/deploying.md "Readiness"); probes may use only these.
TRITON_HEALTH_PATHS = ("/v2/health/live", "/v2/health/ready")

# Each documented way to install the chart, by name (docs/deploying.md, the chart's README.md):
# test_helm_chart.py renders every one, validates each object strictly against the Kubernetes
# versions the chart supports and the custom resources against their CRDs, and checks that
# every switch and optional group of values.yaml is exercised by at least one set here.
INFERENCE_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "clients"}}}
SMOKE_REQUEST = {"inputs": [{"name": "features", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
# kube-prometheus-stack's Prometheus selects the monitors labelled with its Helm release.
PROMETHEUS_RELEASE_LABEL = {"release": "kube-prometheus-stack"}
# Model weights on a PersistentVolumeClaim, copied there by an init container, beside a sidecar.
WEIGHTS_VOLUME = {"name": "weights", "persistentVolumeClaim": {"claimName": "llm-weights", "readOnly": True}}
WEIGHTS_MOUNT = {"name": "weights", "mountPath": "/models", "readOnly": True}
FETCH_WEIGHTS = {"name": "fetch-weights", "image": "registry.example.com/tools/s5cmd:2.3.0",
                 "args": ["sync", "s3://models/llm/*", "/models/"],
                 "volumeMounts": [{"name": "weights", "mountPath": "/models"}]}
SIDECAR = {"name": "log-shipper", "image": "registry.example.com/tools/fluent-bit:3.2.4",
           "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}
GATEWAY = {"name": "public", "namespace": "gateways", "sectionName": "https"}
VALUE_SETS: Dict[str, Dict[str, Any]] = {
    "defaults": {},
    "gpu": {"gpu": {"enabled": True, "count": 2}, "nodeSelector": {"nvidia.com/gpu.present": "true"}},
    # A GPU pool as the GPU Operator sets one up: its RuntimeClass, its taint, its label by affinity.
    "gpu-operator-pool": {
        "gpu": {"enabled": True},
        "runtimeClassName": "nvidia",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}]},
        ]}}},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "50%"}},
        "resources": {"requests": {"cpu": "2", "memory": "14.5Gi"}, "limits": {"cpu": "4", "memory": "16G"}},
        "shm": {"sizeLimit": "2Gi"},
    },
    "hpa": {"autoscaling": {"hpa": {"enabled": True}},
            "serviceMonitor": {"enabled": True, "labels": PROMETHEUS_RELEASE_LABEL}},
    "keda": {"autoscaling": {"keda": {"enabled": True}},
             "serviceMonitor": {"enabled": True, "labels": PROMETHEUS_RELEASE_LABEL}},
    # The pods scraped by a PodMonitor instead of through the Service.
    "keda-pod-monitor": {"autoscaling": {"keda": {"enabled": True}},
                         "podMonitor": {"enabled": True, "labels": PROMETHEUS_RELEASE_LABEL}},
    # A Prometheus that selects every monitor (its selectors are {}): no labels needed, said so.
    "hpa-prometheus-selects-every-monitor": {"autoscaling": {"hpa": {"enabled": True}},
                                             "serviceMonitor": {"enabled": True, "labelsNotNeeded": True}},
    "pod-monitor-without-labels": {"podMonitor": {"enabled": True, "labelsNotNeeded": True}},
    # The optional signal, with a Prometheus that scrapes the pods by a configuration of its own.
    "keda-ratio-external-scrape": {
        "autoscaling": {"keda": {"enabled": True}, "signal": "queueRatio", "externalScrape": True},
    },
    # Prometheus in two namespaces of the user's, scraping through the chart's ServiceMonitor.
    "service-monitor": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "networkPolicy": {"metricsNamespaces": ["monitoring", "observability"]},
    },
    "metrics-namespace-selector": {
        "networkPolicy": {"metricsNamespaceSelector": {"matchLabels": {"team": "observability"}},
                          "metricsPodSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
    },
    # Nothing may scrape the metrics port (no monitoring at all).
    "metrics-closed": {"networkPolicy": {"metricsNamespaces": []}},
    "no-network-policy": {"networkPolicy": {"enabled": False}},
    # Inference only from the clients' namespace, and `helm test` with one inference.
    "inference-from-and-helm-test": {
        "networkPolicy": {"inferenceFrom": [INFERENCE_PEER]},
        "helmTest": {"model": "Linear", "input": SMOKE_REQUEST},
    },
    "no-helm-test": {"helmTest": {"enabled": False}},
    # A ServiceAccount and a PodDisruptionBudget of the user's, memory-backed scratch folders,
    # Service annotations and one more TritonConfig field through the environment.
    "own-account-memory-volumes": {
        "serviceAccount": {"create": False, "name": "inference"},
        "podDisruptionBudget": {"enabled": False},
        "tmp": {"medium": "Memory", "sizeLimit": "256Mi"},
        "home": {"medium": "Memory", "sizeLimit": "256Mi"},
        "resources": {"requests": {"memory": "3Gi"}, "limits": {"memory": "3Gi"}},
        "service": {"annotations": {"example.com/owner": "ml-platform"}},
        "triton": {"config": {"LOG_VERBOSE": "1"}},
    },
    "token": {"accessToken": {"enabled": True, "value": "s3cr3t-token"}, "service": {"headless": True}},
    "token-existing-secret": {"accessToken": {"enabled": True, "existingSecret": "team-token", "secretKey": "tok"}},
    "sleep-action": {"lifecycle": {"preStopAction": "sleep", "preStopSleepSeconds": 5}},
    # A release named by the user, in a registry given apart, with labels of the user's on everything.
    "renamed": {
        "nameOverride": "llm",
        "fullnameOverride": "llm-serving",
        "commonLabels": {"team": "ml-platform", "cost-center": "4711"},
        "podLabels": {"example.com/tier": "gold"},
        "image": {"registry": "registry.example.com:5000", "repository": "ml/llm-server", "tag": "2.0.1"},
    },
    # Weights on a volume an init container fills, a sidecar, credentials from a Secret and a cloud
    # identity for object storage, a priority class, the user's own spreading, and a drain that keeps
    # serving for 5 s after readiness turned false.
    "weights-on-a-volume": {
        "extraVolumes": [WEIGHTS_VOLUME],
        "extraVolumeMounts": [WEIGHTS_MOUNT],
        "initContainers": [FETCH_WEIGHTS],
        "extraContainers": [SIDECAR],
        "envFrom": [{"secretRef": {"name": "object-store-credentials"}}],
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/llm-reader"}},
        "priorityClassName": "serving-high",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": RELEASE}}}],
        "triton": {"drainServingSeconds": 5},
    },
    # Reached from outside: an Ingress with TLS, Gateway API routes, a LoadBalancer for a few ranges.
    "exposed": {
        "ingress": {"enabled": True, "className": "nginx", "hosts": ["models.example.com"],
                    "annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "64m"},
                    "tls": [{"hosts": ["models.example.com"], "secretName": "models-tls"}]},
        "httpRoute": {"enabled": True, "parentRefs": [GATEWAY], "hostnames": ["models.example.com"],
                      "annotations": {"example.com/owner": "ml-platform"}},
        "grpcRoute": {"enabled": True, "parentRefs": [GATEWAY], "hostnames": ["grpc.models.example.com"],
                      "annotations": {"example.com/owner": "ml-platform"}},
        "service": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["203.0.113.0/24", "2001:db8::/32"]},
    },
}


def helm():
    """The helm_python module; Python < 3.10 has no wheel of it, so the chart tests skip there only."""
    if sys.version_info < (3, 10):
        pytest.skip("helm-python-sdk needs Python >= 3.10")
    import helm_python

    return helm_python


def kubernetes_validate():
    """kubernetes_validate.utils, reading each bundled schema file once per test process.

    Its `validate` parses the multi-megabyte definitions file of a Kubernetes version on every
    call; a few hundred calls (objects x value sets x versions) spent most of their time there.
    The schemas are only read, so sharing the parsed documents changes no result.
    """
    from kubernetes_validate import utils

    if not hasattr(utils.schema_contents, "cache_info"):
        utils.schema_contents = functools.lru_cache(maxsize=None)(utils.schema_contents)
    return utils


def render_manifests(values: Optional[Dict[str, Any]] = None, release: str = RELEASE,
                     chart_dir: pathlib.Path = CHART) -> Dict[str, str]:
    """Template path -> rendered text, as `helm template demo deploy/helm/pytriton -n serving` gives."""
    chart = helm().Chart.load(chart_dir)
    return chart.render(values or {}, name=release, namespace=NAMESPACE, is_install=True)


def render(values: Optional[Dict[str, Any]] = None, release: str = RELEASE,
           chart_dir: pathlib.Path = CHART) -> List[Dict[str, Any]]:
    """Every Kubernetes object the chart renders with `values` for the release named `release`
    (the `helm test` pod included, as `helm template` gives it)."""
    objects = []
    for path, text in sorted(render_manifests(values, release, chart_dir).items()):
        if not path.endswith(".yaml"):
            continue  # NOTES.txt
        objects.extend(document for document in yaml.safe_load_all(text) if document)
    return objects


class _KubernetesVersionServer(http.server.ThreadingHTTPServer):
    git_version = "v1.29.4"


class _KubernetesVersionHandler(http.server.BaseHTTPRequestHandler):
    """Answers the few reads `helm install` makes before it renders: the server's version, API
    discovery (only the core group, v1) and the list of release Secrets (none). Anything else,
    e.g. the OpenAPI documents Helm fetches after rendering to build the objects, is a 404."""

    def do_GET(self) -> None:  # the name http.server calls
        path = self.path.split("?")[0]
        version = self.server.git_version  # type: ignore[attr-defined]
        major, minor = version.lstrip("v").split(".")[:2]
        answers = {
            "/version": {"major": major, "minor": minor, "gitVersion": version, "platform": "linux/amd64"},
            "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
            "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
            "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret",
                 "verbs": ["create", "get", "list"]}]},
        }
        body = answers.get(path)
        if body is None and path.endswith("/secrets"):
            body = {"kind": "SecretList", "apiVersion": "v1", "metadata": {}, "items": []}
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def cluster_of_version(git_version: str) -> Iterator[Any]:
    """A helm_python.Config whose API server says it is Kubernetes `git_version` (e.g. "v1.29.4").

    Offline rendering gives the templates the SDK's own Kubernetes version, and `helm lint
    --kube-version` only logs a template's `fail`. An install reads the version from the cluster,
    so `install(..., dry_run="server")` against this stand-in renders the templates with that
    version, exactly as `helm install` on such a cluster would, and fails after rendering (the
    stand-in serves no OpenAPI documents), creating nothing.
    """
    server = _KubernetesVersionServer(("127.0.0.1", 0), _KubernetesVersionHandler)
    server.git_version = git_version
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield helm().Config(kube_apiserver=f"http://127.0.0.1:{server.server_port}", namespace=NAMESPACE)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def install_on(git_version: str, values: Dict[str, Any]) -> str:
    """What `helm install --dry-run=server` says on a cluster of `git_version`: the error message of
    the first step that failed (a template's refusal, or the build of the objects after rendering)."""
    with cluster_of_version(git_version) as config:
        try:
            config.install(CHART, RELEASE, values, namespace=NAMESPACE, dry_run="server", timeout=30)
        except helm().HelmError as exc:
            return str(exc)
    return ""


def only(objects: List[Dict[str, Any]], kind: str, name: Optional[str] = None) -> Dict[str, Any]:
    """The one object of `kind` (and `name`), failing the test when there is not exactly one."""
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, rendered {[o['metadata']['name'] for o in found]}"
    return found[0]


def server_container(objects: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The server's container: the first of the pod, named pytriton (sidecars of extraContainers follow)."""
    containers = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert containers[0]["name"] == "pytriton", [c["name"] for c in containers]
    assert [c["name"] for c in containers].count("pytriton") == 1
    return containers[0]


def plain_env(container: Dict[str, Any]) -> Dict[str, str]:
    """The container's environment variables that have literal values."""
    return {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}


def chart_probes(values: Optional[Dict[str, Any]] = None) -> Dict[str, Tuple[str, float]]:
    """startup/readiness/liveness -> (the HTTP path the rendered Deployment probes, the seconds it
    gives an answer: timeoutSeconds), from one rendering."""
    container = server_container(render(values))
    probes = {kind: container[f"{kind}Probe"] for kind in ("startup", "readiness", "liveness")}
    return {kind: (probe["httpGet"]["path"], float(probe["timeoutSeconds"])) for kind, probe in probes.items()}


def adapter_rule(metric: str) -> Dict[str, Any]:
    """The prometheus-adapter rule serving `metric`, from the chart README (first ```yaml block after the marker)."""
    text = CHART_README.read_text()
    marker = text.index("<!-- adapter-rule -->")
    block = re.search(r"```yaml\n(.*?)```", text[marker:], re.S)
    assert block, "no ```yaml block after <!-- adapter-rule --> in the chart README"
    document = yaml.safe_load(block.group(1))
    found = [rule for rule in document["rules"]["custom"] if rule["name"]["as"] == metric]
    assert len(found) == 1, f"expected one adapter rule serving {metric} in the chart README, found {len(found)}"
    return found[0]


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
# Kubernetes' quantity grammar (k8s.io/apimachinery/pkg/api/resource, ParseQuantity), without a sign.
QUANTITY = re.compile(r"\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?")


def quantity_bytes(quantity: Any) -> float:
    """A Kubernetes quantity ("512Mi", "1.5Gi", "16G", "500m", "1e3", 1073741824) as a number."""
    match = QUANTITY.fullmatch(str(quantity))
    assert match, f"not a Kubernetes quantity: {quantity!r}"
    number, suffix = match.group(1), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return float(number + suffix)
    return float(number) * (_BINARY.get(suffix) or _DECIMAL.get(suffix) or 1)


CRD_DIR = pathlib.Path(__file__).resolve().parent / "data" / "crds"
CRD_FILES = {
    "ServiceMonitor": CRD_DIR / "monitoring.coreos.com_servicemonitors.yaml",
    "PodMonitor": CRD_DIR / "monitoring.coreos.com_podmonitors.yaml",
    "ScaledObject": CRD_DIR / "keda.sh_scaledobjects.yaml",
    "HTTPRoute": CRD_DIR / "gateway.networking.k8s.io_httproutes.yaml",
    "GRPCRoute": CRD_DIR / "gateway.networking.k8s.io_grpcroutes.yaml",
}


def _closed(schema: Any) -> Any:
    """`schema` with every object that lists its properties closed to others.

    The API server prunes fields a structural CRD schema does not name (they vanish without an
    error), so for the tests an unknown field is an error, as kubernetes-validate --strict makes
    it for built-in kinds. Objects marked x-kubernetes-preserve-unknown-fields stay open.
    """
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    if ("properties" in closed and "additionalProperties" not in closed
            and not closed.get("x-kubernetes-preserve-unknown-fields")):
        closed["additionalProperties"] = False
    return closed


@functools.lru_cache(maxsize=None)
def crd_schema(kind: str) -> Dict[str, Any]:
    """The JSON schema of `kind`'s served storage version, from its vendored CRD (data/crds), closed."""
    crd = yaml.safe_load(CRD_FILES[kind].read_text())
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["names"]["kind"] == kind
    [version] = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
    schema = _closed(version["schema"]["openAPIV3Schema"])
    group = crd["spec"]["group"]
    schema["properties"]["apiVersion"] = {"const": f"{group}/{version['name']}"}
    schema["properties"]["kind"] = {"const": kind}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata", "spec"})
    return schema
