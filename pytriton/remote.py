"""The published `RemoteTriton` facade: bind callables of this process to a tritonserver something else started.

``from pytriton.remote import RemoteTriton`` (docs/remote.md; ``pytriton.triton`` exports it
too); the code is in ``pytriton.facade.remote``.
"""

from pytriton.facade.remote import RemoteTriton

__all__ = ["RemoteTriton"]
