"""The Helm chart in deploy/helm/pytriton, rendered offline for the tests of this folder.

Rendering uses helm-python-sdk, whose wheel bundles Helm's Go SDK as a native library, so no
helm binary is downloaded or needed. Each value set below is one way the chart is meant to be
installed; the tests render every one of them.
"""

from __future__ import annotations

import functools
import pathlib
import re
import sys
from typing import Any, Dict, List, Optional

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
    "hpa": {"autoscaling": {"hpa": {"enabled": True}}, "serviceMonitor": {"enabled": True}},
    "keda": {"autoscaling": {"keda": {"enabled": True}}, "serviceMonitor": {"enabled": True}},
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


def only(objects: List[Dict[str, Any]], kind: str, name: Optional[str] = None) -> Dict[str, Any]:
    """The one object of `kind` (and `name`), failing the test when there is not exactly one."""
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, rendered {[o['metadata']['name'] for o in found]}"
    return found[0]


def server_container(objects: List[Dict[str, Any]]) -> Dict[str, Any]:
    containers = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["pytriton"]
    return containers[0]


def plain_env(container: Dict[str, Any]) -> Dict[str, str]:
    """The container's environment variables that have literal values."""
    return {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}


def probe_paths(values: Optional[Dict[str, Any]] = None) -> Dict[str, str]:
    """startup/readiness/liveness -> the HTTP path the rendered Deployment probes."""
    container = server_container(render(values))
    return {kind: container[f"{kind}Probe"]["httpGet"]["path"] for kind in ("startup", "readiness", "liveness")}


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
    "ScaledObject": CRD_DIR / "keda.sh_scaledobjects.yaml",
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
