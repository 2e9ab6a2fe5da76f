"""Raw Python-backend models for the streaming clients: decoupled ones, and one that is not.

Written into a dev server's repository (``dev_server(models=streaming_models(marker_dir))``), so
the streaming clients are tested against the real tritonserver without pytriton's server side.

* ``Countdown`` (no batching) and ``CountdownBatch`` (``max_batch_size`` 4): send ``COUNT``
  responses, ``DELAY`` seconds apart (the first after the optional ``LEAD`` seconds), then the
  final flag on its own (an empty final response);
  a cancelled request stops within a few milliseconds.
  Each response has ``INDEX`` (its number), ``WORD`` (BYTES, ``b"word-<i>"``) and ``GRID``
  (a 2 x 3 float32 array, ``i`` + 0..5), all with the batch axis for ``CountdownBatch``.
* ``Faulty``: two responses, then an error response carrying the final flag.
* ``Cancellable``: like ``Countdown``, but checks ``request.is_cancelled()`` before every
  response; when cancelled it writes ``<marker_dir>/<TAG>`` holding how many responses it
  sent, and stops. When it runs to the end it writes ``<TAG>.done`` instead.
* ``Half``: echoes an FP16 vector in two responses (HTTP streaming cannot carry FP16).
* ``Plain``: not decoupled, ``OUTPUT_1 = INPUT_1 + 1`` (for the misuse errors).
"""

from __future__ import annotations

_DECOUPLED = "model_transaction_policy { decoupled: true }\n"

_COUNTDOWN = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.batching = json.loads(args["model_config"]).get("max_batch_size", 0) > 0

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            lead = pb_utils.get_input_tensor_by_name(request, "LEAD")
            lead = 0.0 if lead is None else float(lead.as_numpy().reshape(-1)[0])
            size = count.shape[0] if self.batching else None
            for index in range(int(count.reshape(-1)[0])):
                pause = float(delay.reshape(-1)[0]) if index else lead
                if pause and not self._pause(request, pause):
                    break
                outputs = {
                    "INDEX": np.array([index], dtype=np.int32),
                    "WORD": np.array([f"word-{index}".encode()], dtype=np.object_),
                    "GRID": np.arange(6, dtype=np.float32).reshape(2, 3) + index,
                }
                if size is not None:
                    outputs = {name: np.stack([value] * size) for name, value in outputs.items()}
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(k, v) for k, v in outputs.items()]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    @staticmethod
    def _pause(request, delay):
        # Sleep in small steps, so that a cancelled request frees the instance for the next test.
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            if request.is_cancelled():
                return False
            time.sleep(min(0.02, max(deadline - time.monotonic(), 0)))
        return not request.is_cancelled()
"""

_FAULTY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for index in range(2):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("INDEX", np.array([index], dtype=np.int32))]))
            error = pb_utils.TritonError("the model broke after 2 responses")
            sender.send(pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_CANCELLABLE = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.marker_dir = parameters["marker_dir"]["string_value"]

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy().reshape(-1)[0])
            delay = float(pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy().reshape(-1)[0])
            tag = pb_utils.get_input_tensor_by_name(request, "TAG").as_numpy().reshape(-1)[0].decode()
            sent = 0
            marker = tag + ".done"
            for index in range(count):
                if index:
                    time.sleep(delay)
                if request.is_cancelled():
                    marker = tag
                    break
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("INDEX", np.array([index], dtype=np.int32))]))
                sent += 1
            with open(os.path.join(self.marker_dir, marker + ".tmp"), "w") as file:
                file.write(str(sent))
            os.replace(os.path.join(self.marker_dir, marker + ".tmp"), os.path.join(self.marker_dir, marker))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_HALF = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT_1").as_numpy()
            for _ in range(2):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT_1", value)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_PLAIN = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT_1", pb_utils.get_input_tensor_by_name(r, "INPUT_1").as_numpy() + 1)])
            for r in requests
        ]
"""

_COUNT_INPUTS = '{ name: "COUNT" data_type: TYPE_INT32 dims: [1] }, { name: "DELAY" data_type: TYPE_FP32 dims: [1] }'
_COUNTDOWN_IO = (
    f'input [{_COUNT_INPUTS}, {{ name: "LEAD" data_type: TYPE_FP32 dims: [1] optional: true }}]\n'
    'output [{ name: "INDEX" data_type: TYPE_INT32 dims: [1] }, { name: "WORD" data_type: TYPE_STRING dims: [1] },'
    ' { name: "GRID" data_type: TYPE_FP32 dims: [2, 3] }]\n'
)
_TWO_INSTANCES = "instance_group [{ count: 2 kind: KIND_CPU }]\n"


def streaming_models(marker_dir: str) -> dict[str, tuple[str, str]]:
    """The models, name -> (config.pbtxt body, model.py); ``Cancellable`` writes into ``marker_dir``."""
    return {
        "Countdown": ("max_batch_size: 0\n" + _DECOUPLED + _COUNTDOWN_IO + _TWO_INSTANCES, _COUNTDOWN),
        "CountdownBatch": ("max_batch_size: 4\n" + _DECOUPLED + _COUNTDOWN_IO, _COUNTDOWN),
        "Faulty": (
            "max_batch_size: 0\n" + _DECOUPLED + f"input [{_COUNT_INPUTS}]\n"
            'output [{ name: "INDEX" data_type: TYPE_INT32 dims: [1] }]\n',
            _FAULTY,
        ),
        "Cancellable": (
            "max_batch_size: 0\n"
            + _DECOUPLED
            + f'input [{_COUNT_INPUTS}, {{ name: "TAG" data_type: TYPE_STRING dims: [1] }}]\n'
            + 'output [{ name: "INDEX" data_type: TYPE_INT32 dims: [1] }]\n'
            + f'parameters {{ key: "marker_dir" value {{ string_value: "{marker_dir}" }} }}\n'
            + _TWO_INSTANCES,
            _CANCELLABLE,
        ),
        "Half": (
            "max_batch_size: 0\n" + _DECOUPLED + 'input [{ name: "INPUT_1" data_type: TYPE_FP16 dims: [-1] }]\n'
            'output [{ name: "OUTPUT_1" data_type: TYPE_FP16 dims: [-1] }]\n',
            _HALF,
        ),
        "Plain": (
            "max_batch_size: 0\n"
            'input [{ name: "INPUT_1" data_type: TYPE_FP32 dims: [-1] }]\n'
            'output [{ name: "OUTPUT_1" data_type: TYPE_FP32 dims: [-1] }]\n',
            _PLAIN,
        ),
    }
