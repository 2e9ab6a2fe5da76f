"""Runs inside Triton's Python backend stub; imports only the standard library, numpy, zmq and ipc."""
