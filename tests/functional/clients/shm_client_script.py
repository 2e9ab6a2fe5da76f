"""A client process for the shared-memory tests: one request through shared memory, then a report.

Usage: shm_client_script.py URL MODEL TOKEN MODE. Sends one batch of ones to MODEL (``shared_memory``
MODE: ``auto`` or ``true``; TOKEN ``-`` for none), prints one JSON line (whether the answer was
right, and this process's /dev/shm names), then waits for a line on stdin before closing the
client, so that a test can kill it with its regions registered.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import numpy as np

from pytriton.client import ModelClient


def main() -> None:
    url, model, token, mode = sys.argv[1:5]
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    data = np.ones((2, 65536), dtype=np.float32)
    client = ModelClient(url, model, access_token=None if token == "-" else token,
                         shared_memory=True if mode == "true" else mode, init_timeout_s=30)
    outputs = client.infer_batch(data)
    prefix = f"pytriton-{os.getpid()}-"
    names = sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix))
    print(json.dumps({"right": bool(np.array_equal(outputs["y"], data * 2)), "names": names}), flush=True)
    sys.stdin.readline()
    client.close()


if __name__ == "__main__":
    main()
