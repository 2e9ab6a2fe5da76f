"""The reference: a plain Triton Python-backend identity model, with no extra process hop.

The benchmark harness copies this file into each model folder of its hand-written repository
(see bench/servers.py). It is what Triton's own documentation shows: read every request of the
batch with ``as_numpy()``, answer each with a ``pb_utils.Tensor``. A ``sleep_s`` parameter in
config.pbtxt adds a fixed cost per call (once per batch, not per request); a ``loop_count``
parameter adds CPU-bound Python work per call (`cpu_work.spin`, from bench/cpu_work.py, which the
harness copies next to this file).
"""

import json
import os
import sys
import time

# Triton 2.51's stub is built against NumPy 1.x and silently corrupts tensors under NumPy 2, so
# the NumPy 1.x bundled for the stub (pytriton/tritonserver/stub_python/<X.Y>) must come first.
# The harness names that folder in the server's environment; the stub ignores PYTHONPATH.
_STUB_PYTHON = os.environ.get("PYTRITON_BENCH_STUB_PYTHON")
if _STUB_PYTHON and _STUB_PYTHON not in sys.path:
    sys.path.insert(0, _STUB_PYTHON)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # cpu_work.py, copied beside this file

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402
from cpu_work import spin  # noqa: E402

STAMPS_ENV = "PYTRITON_BENCH_STAMPS"  # a folder: record each execute's entry and exit (bench/breakdown.py)


class TritonPythonModel:
    def initialize(self, args):
        if int(np.__version__.split(".")[0]) >= 2:
            raise RuntimeError(
                f"the reference model runs under NumPy {np.__version__} from {np.__file__}; Triton 2.51's stub "
                "needs NumPy 1.x (set PYTRITON_BENCH_STUB_PYTHON to the stub_python folder)"
            )
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.sleep_s = float(parameters.get("sleep_s", {}).get("string_value", "0"))
        self.loop_count = int(parameters.get("loop_count", {}).get("string_value", "0"))
        self.stamps_dir = os.environ.get(STAMPS_ENV)
        self.stamps = []
        self.name = args["model_name"]
        if self.stamps_dir:
            self.execute = self._execute_stamped

    def _execute_stamped(self, requests):
        entered = time.monotonic_ns()
        responses = TritonPythonModel.execute(self, requests)
        self.stamps.append((entered, time.monotonic_ns()))
        return responses

    def finalize(self):
        if self.stamps_dir and self.stamps:
            path = os.path.join(self.stamps_dir, f"reference-{self.name}-{os.getpid()}.json")
            with open(path, "w") as handle:
                json.dump({"model": self.name, "records": self.stamps}, handle)

    def execute(self, requests):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.loop_count:
            spin(self.loop_count)
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT_1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT_1", data)]))
        return responses
