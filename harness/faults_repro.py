"""Minimal reproductions of what the fault matrix found (harness/faults.py), with figures.

``python harness/faults_repro.py sigterm-at-load``: SIGTERM reaches a serving script while
``serve()`` is still starting (its tritonserver runs, the models load). ``serve()`` installs its
signal handlers only after ``run()`` returned, so the signal meets Python's default disposition:
as an ordinary process the script dies by SIGTERM (-15) without its cleanup (its /dev/shm entries
wait for the next start's sweep); as PID 1 of a PID namespace (a container) the kernel drops a
signal that has no handler, and the script goes on to serve as if nothing had been asked.
When the ordinary script dies this way before its stubs ran ``initialize()``, a stub can
outlive its dead server: printed are the processes of the server left 60 s after the exit.

``python harness/faults_repro.py zombie-stub``: a stub killed while it holds a request stayed a
zombie under tritonserver for as long as the server ran (Triton 2.51 never finishes unloading
that model version, so it never waits for the stub), although the model healed; a stub killed
while idle was reaped within about a second. Printed: how long each zombie lived. Since
pytriton starts tritonserver with SIGCHLD ignored, the kernel reaps both at once (measured:
15 s and counting before, gone at the first look after).
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import numpy as np
from common import MODELS
from faults_load import Load
from faults_script import ServingScript, describe, processes_of, shm_entries

from pytriton.client import ModelClient


def sigterm_at_load(pid1: bool) -> None:
    script = ServingScript(pid1=pid1)
    load = Load(script.http_url, script.grpc_url)  # clients knocking while the models load, as in the matrix
    load.start()
    try:
        deadline = time.monotonic() + 120
        while not script.stubs() and time.monotonic() < deadline:
            time.sleep(0.02)
        ready = sum(script.model_ready(model) for model in MODELS)
        stubs = len(script.stubs())
        script.root().send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        print(f"{'PID 1' if pid1 else 'ordinary'}: SIGTERM sent with {stubs} stub(s) up, "
              f"{ready}/{len(MODELS)} models ready")
        code = script.wait_exit(20.0)
        if code is None:
            print(f"  20 s later: still running; all models ready: {script.models_ready()}  <- the signal was lost")
            script.kill_all()
        else:
            print(f"  exit code {code}; /dev/shm entries left for the next start's sweep: "
                  f"{len(shm_entries([script.server_id or '']))}")
            exited = time.monotonic()
            while processes_of([script.server_id or ""]) and time.monotonic() - exited < 60:
                time.sleep(0.5)
            left = processes_of([script.server_id or ""])
            print(f"  processes of its server {time.monotonic() - exited:.0f} s after the exit: "
                  f"{[(describe(p), 'parent', p.ppid()) for p in left] or 'none'}")
            for process in left:
                process.kill()
    finally:
        load.stop()
        if script.is_running():
            script.kill_all()
        script.close()


def zombie_stub(mid_request: bool) -> None:
    script = ServingScript()
    try:
        script.wait_ready(120)
        victim = script.stubs()["echo"][0]
        if mid_request:
            # `text` is not batched, so a request of echo that arrives while the stub is killed is
            # what Triton keeps; several keep one in flight.
            def send() -> None:
                try:
                    with ModelClient(script.http_url, "echo", init_timeout_s=5, inference_timeout_s=5) as client:
                        for index in range(200):
                            client.infer_sample(id=np.array([index], np.int64), payload=np.zeros(1 << 20, np.uint8))
                except Exception:  # noqa: BLE001 - the request in flight fails when its stub dies
                    pass

            threading.Thread(target=send, daemon=True).start()
            time.sleep(0.5)
        victim.kill()
        killed = time.monotonic()
        seen = None
        while time.monotonic() - killed < 15:
            if any(str(victim.pid) in zombie for zombie in script.zombies()):
                seen = time.monotonic() - killed
            time.sleep(0.1)
        print(f"stub of echo killed {'during requests' if mid_request else 'while idle'}: zombie last seen "
              f"{'never' if seen is None else f'{seen:.1f} s'} after the kill (watched 15 s); model ready: "
              f"{script.model_ready('echo')}")
        script.root().send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        stopping = time.monotonic()
        print(f"  SIGTERM: exit code {script.wait_exit(60)} after {time.monotonic() - stopping:.1f} s")
    finally:
        if script.is_running():
            script.kill_all()
        script.close()


def main() -> int:
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "sigterm-at-load":
        sigterm_at_load(pid1=False)
        sigterm_at_load(pid1=True)
    elif what == "zombie-stub":
        zombie_stub(mid_request=False)
        zombie_stub(mid_request=True)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
