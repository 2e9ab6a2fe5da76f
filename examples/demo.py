"""A tour of pytriton in one script: `make demo` runs it.

It binds two small models to a real Triton Inference Server, calls them over HTTP and gRPC and
with many requests in flight at once, then a chat model through the OpenAI-compatible API
(docs/openai.md), prints what goes in and what comes out, and stops the server. Every answer
is checked against the same computation done locally, so the script exits with a non-zero
status if anything is wrong.

The server listens on 8000 (HTTP), 8001 (gRPC), 8002 (metrics) and 8003 (the OpenAI-compatible
API) unless the environment says otherwise, e.g.::

    PYTRITON_TRITON_CONFIG_HTTP_PORT=9000 PYTRITON_TRITON_CONFIG_GRPC_PORT=9001 \
    PYTRITON_TRITON_CONFIG_METRICS_PORT=9002 python examples/demo.py

On a machine without a GPU, tritonserver prints a CUDA-related error line or two on stderr
(such as "CudaDriverHelper has not been initialized"); they are harmless.
"""

from __future__ import annotations

import json
import time
import urllib.request
import warnings

import numpy as np

from pytriton.client import FuturesModelClient, ModelClient
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

# Model 1: a fixed linear layer, y = x @ WEIGHTS + BIAS, 3 features in, 2 out.
WEIGHTS = np.array([[1.0, -1.0], [0.5, 2.0], [0.0, 1.0]], dtype=np.float32)
BIAS = np.array([10.0, 0.0], dtype=np.float32)
batch_sizes_seen: list[int] = []  # what Triton's dynamic batcher handed to the linear model


@batch
def linear(features: np.ndarray) -> dict[str, np.ndarray]:
    batch_sizes_seen.append(len(features))
    return {"scores": features @ WEIGHTS + BIAS}


# Model 2: text in, upper-cased text out (Triton BYTES tensors; numpy bytes arrays here).
@batch
def shout(text: np.ndarray) -> dict[str, np.ndarray]:
    return {"loud": np.char.upper(text)}


# Model 3: a chat model for the OpenAI-compatible API: it streams its answer word by word.
def echo_chat(messages: list, params: dict):
    for word in f"You said: {messages[-1]['content']}".split():
        yield word + " "


def show(label: str, value: np.ndarray) -> str:
    return f"{label:>8} {np.array2string(value, precision=2, separator=', ', prefix=' ' * 9)}"


def check(name: str, got: np.ndarray, expected: np.ndarray) -> None:
    """Stop with a non-zero exit status if the server's answer differs from the local computation."""
    same = got.shape == expected.shape and (
        np.array_equal(got, expected) if expected.dtype.kind == "S" else np.allclose(got, expected)
    )
    if not same:
        raise SystemExit(f"demo FAILED: {name} returned {got!r}, expected {expected!r}")


def main() -> None:
    started = time.monotonic()
    # The same PYTRITON_TRITON_CONFIG_* variables that configure the server tell the clients
    # where to connect. Triton() reads them again (and warns about unknown ones); stay quiet here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ports = TritonConfig.from_env()
    http_url = f"http://127.0.0.1:{ports.effective_http_port}"
    grpc_url = f"grpc://127.0.0.1:{ports.effective_grpc_port}"
    openai_url = f"http://127.0.0.1:{ports.openai_port or 8003}/v1"
    requests = 0

    with Triton(config=TritonConfig(openai_port=ports.openai_port or 8003)) as triton:
        triton.bind(
            model_name="Linear",
            infer_func=linear,
            inputs=[Tensor(name="features", dtype=np.float32, shape=(3,))],
            outputs=[Tensor(name="scores", dtype=np.float32, shape=(2,))],
            # Wait up to 20 ms for more requests, so concurrent ones are served in one call.
            config=ModelConfig(max_batch_size=16, batcher=DynamicBatcher(max_queue_delay_microseconds=20_000)),
        )
        triton.bind(
            model_name="Upper",
            infer_func=shout,
            inputs=[Tensor(name="text", dtype=np.bytes_, shape=(1,))],
            outputs=[Tensor(name="loud", dtype=np.bytes_, shape=(1,))],
            config=ModelConfig(max_batch_size=8),
        )
        triton.bind_chat(model_name="echo-chat", infer_func=echo_chat)
        triton.run()
        print(f"Triton is ready after {time.monotonic() - started:.1f} s: models Linear, Upper and echo-chat")
        print(f"  HTTP {http_url}   gRPC {grpc_url}   OpenAI-compatible API {openai_url}\n")

        print(f"1. ModelClient over HTTP, Linear.infer_batch (y = x @ W + b) at {http_url}")
        features = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32)
        with ModelClient(http_url, "Linear") as client:
            scores = client.infer_batch(features=features)["scores"]
        requests += 1
        print(show("features", features))
        print(show("scores", scores) + "\n")
        check("Linear", scores, features @ WEIGHTS + BIAS)

        print(f"2. ModelClient over gRPC, Upper.infer_sample at {grpc_url}")
        text = np.array([b"hello, triton"])
        with ModelClient(grpc_url, "Upper") as client:
            loud = client.infer_sample(text=text)["loud"]
        requests += 1
        print(show("text", text))
        print(show("loud", loud) + "\n")
        check("Upper", loud.astype(np.bytes_), np.char.upper(text))

        print("3. FuturesModelClient over HTTP, 8 Linear.infer_sample requests in flight at once")
        samples = np.arange(24, dtype=np.float32).reshape(8, 3)
        batch_sizes_seen.clear()
        with FuturesModelClient(http_url, "Linear", max_workers=8) as client:
            futures = [client.infer_sample(features=sample) for sample in samples]
            results = np.stack([future.result()["scores"] for future in futures])
        requests += len(samples)
        for sample, result in zip(samples, results):
            print(f"   {sample} -> {result}")
        print(f"   the model was called {len(batch_sizes_seen)} time(s), with batch sizes {batch_sizes_seen}\n")
        check("Linear (futures)", results, samples @ WEIGHTS + BIAS)

        print(f"4. POST {openai_url}/chat/completions, model echo-chat (any OpenAI client works the same)")
        body = {"model": "echo-chat", "messages": [{"role": "user", "content": "hello, triton"}]}
        request = urllib.request.Request(f"{openai_url}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        requests += 1
        reply = answer["choices"][0]["message"]["content"]
        print(f"    user: {body['messages'][0]['content']}\n    assistant: {reply}\n")
        check("echo-chat", np.array([reply.encode()]), np.array([b"You said: hello, triton "]))

    # Leaving the `with` block stopped the server and removed its processes, sockets and memory.
    print(
        f"demo OK: 3 models, {requests} requests over HTTP, gRPC and the OpenAI API, "
        f"{time.monotonic() - started:.1f} s, server stopped"
    )


if __name__ == "__main__":
    main()
