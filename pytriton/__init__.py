"""pytriton: serve Python inference callables through the NVIDIA Triton Inference Server.

The two flows, one folder each step:

* setup: ``model_config`` (what the user declares) -> ``repository`` (config.pbtxt on disk)
  -> ``server`` (the tritonserver process) -> ``triton`` (the facade wiring them);
* one request: ``client`` -> tritonserver -> ``proxy`` (inside Triton's Python backend)
  -> ``ipc`` (ZeroMQ frames + /dev/shm tensors) -> ``worker`` (the user's process)
  -> ``decorators`` -> the user's callable, and back.
"""

__version__ = "0.1.0"
