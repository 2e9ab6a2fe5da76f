"""The reference of the GPU path: the torch MLP (bench/torch_mlp.py) in a plain Python-backend model.

Written the way one would by hand for Triton's Python backend: gather the batch's inputs into
one array, run the model once on the device from the ``device`` parameter, copy the result to
the host once, and answer each request with its rows.

The stub runs the base interpreter, which does not see the virtual environment torch is
installed in: the harness names that environment's site-packages in
``$PYTRITON_BENCH_SITE_PACKAGES``, appended to ``sys.path`` after the stub's own NumPy 1.x (see
bench/reference_model/model.py), so ``import torch`` works and NumPy stays the stub's.
"""

import json
import os
import sys

_STUB_PYTHON = os.environ.get("PYTRITON_BENCH_STUB_PYTHON")
if _STUB_PYTHON and _STUB_PYTHON not in sys.path:
    sys.path.insert(0, _STUB_PYTHON)
_SITE_PACKAGES = os.environ.get("PYTRITON_BENCH_SITE_PACKAGES")
if _SITE_PACKAGES and _SITE_PACKAGES not in sys.path:
    sys.path.append(_SITE_PACKAGES)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # torch_mlp.py, copied beside this file

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402
from torch_mlp import build  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.device = parameters.get("device", {}).get("string_value", "cuda")
        self.model = build(self.device)

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(request, "INPUT_1").as_numpy() for request in requests]
        with torch.inference_mode():
            batch = torch.from_numpy(np.concatenate(inputs)).to(self.device)
            result = self.model(batch).cpu().numpy()
        responses = []
        start = 0
        for rows in (len(array) for array in inputs):
            output = pb_utils.Tensor("OUTPUT_1", result[start:start + rows])
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
            start += rows
        return responses
