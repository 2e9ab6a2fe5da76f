"""pytriton: serve Python inference callables through the NVIDIA Triton Inference Server.

The two flows, one folder each step:

* setup: ``model_config`` (what the user declares) -> ``repository`` (config.pbtxt on disk)
  -> ``binding`` (worker handlers and the model folder of each bound callable) -> ``server``
  (the tritonserver process) -> ``triton`` (the facade wiring them), or ``remote`` (the facade
  binding to a tritonserver that something else started);
* one request: ``client`` -> tritonserver -> ``proxy`` (inside Triton's Python backend)
  -> ``ipc`` (a SEQPACKET socket per instance, a ZeroMQ greeting, /dev/shm tensors)
  -> ``worker`` (the user's process)
  -> ``decorators`` -> the user's callable, and back; a streaming callable's answers go back
  step by step through the proxy's relay thread (``proxy.relay``).
"""

__version__ = "0.1.0"
