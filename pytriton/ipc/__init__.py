"""The single source of the wire between the proxy (inside Triton) and the worker (user process)."""
