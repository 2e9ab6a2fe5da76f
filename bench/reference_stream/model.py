"""The reference of the streaming case: a plain decoupled Python-backend model.

For every request of the batch it sends ``steps`` responses (a config.pbtxt parameter), each
carrying the request's ``INPUT_1`` as ``OUTPUT_1``, step by step across the batch (step 0 to
every request, then step 1, ...), then closes each stream with the final flag. That is what a
generator callable bound with ``ModelConfig(decoupled=True)`` does in pytriton, written the way
Triton's documentation shows decoupled models: one ``response_sender`` per request.
"""

import json
import os
import sys

# The stub's NumPy comes first; see bench/reference_model/model.py.
_STUB_PYTHON = os.environ.get("PYTRITON_BENCH_STUB_PYTHON")
if _STUB_PYTHON and _STUB_PYTHON not in sys.path:
    sys.path.insert(0, _STUB_PYTHON)

import triton_python_backend_utils as pb_utils  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.steps = int(parameters.get("steps", {}).get("string_value", "1"))

    def execute(self, requests):
        senders = [request.get_response_sender() for request in requests]
        data = [pb_utils.get_input_tensor_by_name(request, "INPUT_1").as_numpy() for request in requests]
        for _ in range(self.steps):
            for sender, values in zip(senders, data):
                sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT_1", values)]))
        for sender in senders:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
