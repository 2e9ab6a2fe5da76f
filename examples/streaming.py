"""Stream generated text token by token: a decoupled model and a client that prints as it goes.

The "language model" is a character bigram table built at start-up from the short text below,
so the example downloads nothing and runs on any CPU. Its inference callable is a generator:
every `yield` sends one token to each request still generating, and the client prints each
token the moment it arrives, over gRPC and then over HTTP (server-sent events).

    python examples/streaming.py                 # serve, stream two prompts, stop
    python examples/streaming.py --serve         # only serve, until Ctrl-C

The ports follow PYTRITON_TRITON_CONFIG_HTTP_PORT / _GRPC_PORT / _METRICS_PORT (8000, 8001 and
8002 by default).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Iterator, List, Optional

import numpy as np

from pytriton.client import DecoupledModelClient
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

CORPUS = (
    "the server hands each batch to the model and the model answers every request in the batch. "
    "a streaming model answers in steps, one token at a time, and the client reads the tokens "
    "as they come, so the first words show long before the last ones are written. "
)


class BigramModel:
    """Next-character probabilities counted from a text: a tiny, deterministic language model."""

    def __init__(self, text: str) -> None:
        self.vocabulary = sorted(set(text))
        self.index = {char: position for position, char in enumerate(self.vocabulary)}
        counts = np.full((len(self.vocabulary), len(self.vocabulary)), 0.01)  # a little smoothing
        for current, following in zip(text, text[1:]):
            counts[self.index[current], self.index[following]] += 1
        sharpened = counts**3  # a low sampling temperature: frequent pairs dominate
        self.probabilities = sharpened / sharpened.sum(axis=1, keepdims=True)

    def next_char(self, previous: str, rng: np.random.Generator) -> str:
        row = self.probabilities[self.index.get(previous, self.index[" "])]
        return self.vocabulary[rng.choice(len(row), p=row)]


class Generate:
    """The inference callable: a generator over the batch, one token per request per step."""

    def __init__(self, model: BigramModel, seconds_per_token: float) -> None:
        self.model = model
        self.seconds_per_token = seconds_per_token

    def __call__(self, requests: List[dict]) -> Iterator[List[Optional[dict]]]:
        prompts = [request["prompt"][0, 0].decode() for request in requests]
        budgets = [int(request["max_tokens"][0, 0]) for request in requests]
        rngs = [np.random.default_rng(len(prompt)) for prompt in prompts]  # same prompt, same text
        last = [prompt[-1:] or " " for prompt in prompts]
        for step in range(max(budgets)):
            time.sleep(self.seconds_per_token)  # a real model would run a decoding step here
            responses: List[Optional[dict]] = []
            for index, budget in enumerate(budgets):
                if step >= budget:
                    responses.append(None)  # this request's stream is done; the others go on
                    continue
                last[index] = self.model.next_char(last[index], rngs[index])
                responses.append({"token": np.array([[last[index].encode()]], dtype=object)})
            yield responses


def bind(triton: Triton, seconds_per_token: float) -> None:
    triton.bind(
        model_name="Generator",
        infer_func=Generate(BigramModel(CORPUS), seconds_per_token),
        inputs=[
            Tensor(name="prompt", dtype=np.bytes_, shape=(1,)),
            Tensor(name="max_tokens", dtype=np.int32, shape=(1,)),
        ],
        outputs=[Tensor(name="token", dtype=np.bytes_, shape=(1,))],
        config=ModelConfig(max_batch_size=8, decoupled=True),
    )


def stream(url: str, prompt: str, max_tokens: int) -> str:
    """Print the prompt, then each token as it arrives; returns the generated text."""
    print(f"{url:>24} | {prompt}", end="", flush=True)
    text = []
    with DecoupledModelClient(url, "Generator") as client:
        for partial in client.infer_sample(
            prompt=np.array([prompt.encode()]), max_tokens=np.array([max_tokens], dtype=np.int32)
        ):
            token = partial["token"][0].decode()
            text.append(token)
            print(token, end="", flush=True)
    print()
    return "".join(text)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="only serve, until interrupted")
    parser.add_argument("--max-tokens", type=int, default=60)
    parser.add_argument("--seconds-per-token", type=float, default=0.02)
    args = parser.parse_args(argv)

    config = TritonConfig.from_env()
    with Triton(config=config) as triton:
        bind(triton, args.seconds_per_token)
        if args.serve:
            triton.serve()
            return 0
        triton.run()
        grpc_text = stream(f"grpc://127.0.0.1:{config.effective_grpc_port}", "the model ", args.max_tokens)
        http_text = stream(f"http://127.0.0.1:{config.effective_http_port}", "the model ", args.max_tokens)
    if len(grpc_text) != args.max_tokens or grpc_text != http_text:
        print(f"unexpected: {len(grpc_text)} tokens over gRPC, texts equal: {grpc_text == http_text}")
        return 1
    print(f"streaming OK: {args.max_tokens} tokens over gRPC and over HTTP")
    return 0


if __name__ == "__main__":
    sys.exit(main())
