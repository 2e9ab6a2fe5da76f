"""Runs inside Triton's Python backend stub; imports only the standard library, numpy, zmq and ipc.

The exception is `types`, which the stub never imports: it re-exports the worker's request and
response types under their published path (``pytriton.proxy.types``).
"""
