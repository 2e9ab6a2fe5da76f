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

VALUE_SETS: Dict[str, Dict[str, Any]] = {
    "defaults": {},
    "gpu": {"gpu": {"enabled": True, "count": 2}, "nodeSelector": {"nvidia.com/gpu.present": "true"}},
    "hpa": {"autoscaling": {"hpa": {"enabled": True}}, "serviceMonitor": {"enabled": True}},
    "keda": {"autoscaling": {"keda": {"enabled": True}}, "serviceMonitor": {"enabled": True}},
    # The optional signal, with a Prometheus that scrapes the pods by a configuration of its own.
    "keda-ratio-external-scrape": {
        "autoscaling": {"keda": {"enabled": True}, "signal": "queueRatio", "externalScrape": True},
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


def render_manifests(values: Optional[Dict[str, Any]] = None, release: str = RELEASE) -> Dict[str, str]:
    """Template path -> rendered text, as `helm template demo deploy/helm/pytriton -n serving` gives."""
    chart = helm().Chart.load(CHART)
    return chart.render(values or {}, name=release, namespace=NAMESPACE, is_install=True)


def render(values: Optional[Dict[str, Any]] = None, release: str = RELEASE) -> List[Dict[str, Any]]:
    """Every Kubernetes object the chart renders with `values` for the release named `release`."""
    objects = []
    for path, text in sorted(render_manifests(values, release).items()):
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


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity_bytes(quantity: Any) -> float:
    """A Kubernetes memory quantity ("512Mi", "2G", "1073741824") in bytes."""
    text = str(quantity)
    match = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T)?", text)
    assert match, f"not a memory quantity: {quantity!r}"
    number, suffix = float(match.group(1)), match.group(2)
    return number * (_BINARY.get(suffix) or _DECIMAL.get(suffix) or 1)
