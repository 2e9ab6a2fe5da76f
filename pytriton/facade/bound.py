"""The models a facade serves, by name and version.

A name may be bound in several versions at once (a new version loads while the old one serves,
then the old one is unbound: see `pytriton.facade.versions`). Triton keeps one configuration per name,
so that configuration cannot name a version's sockets. It names the name's endpoint
(`protocol.name_endpoint`) instead, and each version's handlers are named after it with their
version (`protocol.version_endpoint`): a proxy on the Python backend path asks Triton for the
version it serves, and pytriton's backend puts that version into the data socket paths the
configuration lists (`protocol.data_socket_patterns`). So an instance, whenever it connects or
reconnects, reaches its own version's workers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Union

from pytriton.model_config.instances import InstanceSetup
from pytriton.repository.ensemble import EnsemblePlan
from pytriton.repository.warmup import WarmupPlan
from pytriton.worker.context import TritonContext
from pytriton.worker.instance import Instance
from pytriton.worker.request import Request

InferFunc = Union[Callable[[List[Request]], Any], InstanceSetup]
"""An inference callable: a list of requests in, one mapping of output name to array per request out;
or the `InstanceSetup` that builds it in each worker process."""


@dataclasses.dataclass(frozen=True)
class ModelDeclaration:
    """A checked `bind` call: what to serve, before anything runs."""

    context: TritonContext
    infer_funcs: List[InferFunc]
    strict: bool
    asynchronous: List[bool]
    trace_settings: Optional[Dict[str, Any]] = None
    """The model's own trace settings (`pytriton.server.model_trace`), sent once it is ready."""
    ensemble: Optional[EnsemblePlan] = None
    """For an ensemble (`Triton.bind_ensemble`): its checked steps; it has no callable then."""
    warmups: WarmupPlan = dataclasses.field(default_factory=WarmupPlan)
    """Its checked warm-ups, for Triton (config.pbtxt and ``warmup/``) or run here (`pytriton.repository.warmup`)."""


@dataclasses.dataclass
class BoundModel:
    """A model version being served: its declaration and the handlers started for its instances."""

    declaration: ModelDeclaration
    handlers: List[Instance]
    shm_prefix: str = ""
    """Prefix of this version's shared-memory segments (`protocol.model_shm_prefix`)."""
    endpoint: str = ""
    """The ZeroMQ endpoint its handlers' sockets are named after (`protocol.version_endpoint`)."""
    config_text: str = ""
    """Its served config.pbtxt without a version policy: every version of a name has the same."""
    name_endpoint: str = ""
    """The endpoint of its name (`protocol.name_endpoint`), which that configuration names."""

    @property
    def name(self) -> str:
        return str(self.declaration.context.model_name)

    @property
    def version(self) -> int:
        return int(self.declaration.context.model_version)


class BoundModels:
    """The bound model versions of one facade, by name (in binding order) and version."""

    def __init__(self) -> None:
        self._by_name: Dict[str, Dict[int, BoundModel]] = {}

    def __contains__(self, model_name: object) -> bool:
        return model_name in self._by_name

    def names(self) -> List[str]:
        return list(self._by_name)

    def versions(self, model_name: str) -> List[int]:
        """The bound versions of `model_name`, lowest first (none when it is not bound)."""
        return sorted(self._by_name.get(model_name, {}))

    def get(self, model_name: str, version: Optional[int] = None) -> BoundModel:
        """Version `version` of `model_name`, or its highest (which requests naming no version reach).

        Raises:
            KeyError: that name or version is not bound.
        """
        versions = self._by_name[model_name]
        return versions[max(versions) if version is None else version]

    def all(self) -> List[BoundModel]:
        """Every bound version of every name."""
        return [model for versions in list(self._by_name.values()) for model in list(versions.values())]

    def add(self, model: BoundModel) -> None:
        self._by_name.setdefault(model.name, {})[model.version] = model

    def pop(self, model_name: str, version: Optional[int] = None) -> List[BoundModel]:
        """Forget one version of `model_name`, or every version; what was forgotten."""
        versions = self._by_name.get(model_name, {})
        popped = list(versions.values()) if version is None else [m for m in [versions.pop(version, None)] if m]
        if version is None or not versions:
            self._by_name.pop(model_name, None)
        return popped
