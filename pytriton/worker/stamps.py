"""Per-batch timing stamps of the hop, for the benchmark's breakdown (``bench/run.py --breakdown``).

Off unless the serving process has ``PYTRITON_HOP_STAMPS`` set to a folder. Then every model of
plain callables records, for each batch, the eight `time.monotonic_ns` stamps of
`pytriton.ipc.protocol.Stamp`: the proxy takes two before sending and two after the answer, the
worker four in between (one host, one monotonic clock, so the differences are the stages'
durations). The proxy sends each batch's complete record with its next batch, and the worker
keeps the records in memory (a bounded number) until its handler stops, when it writes them
as one JSON file per handler: ``<folder>/<model>-<instance>-<pid>.json``.
"""

from __future__ import annotations

import collections
import json
import os
import re
from typing import Deque, Optional, Sequence, Tuple

from pytriton.ipc.protocol import Stamp

STAMPS_ENV = "PYTRITON_HOP_STAMPS"
MAX_RECORDS = 200_000


def stamps_folder() -> Optional[str]:
    """The folder of the stamp files, when recording is on."""
    return os.environ.get(STAMPS_ENV) or None


class StampLog:
    """The stamp records of one handler, written to its file by `write`."""

    def __init__(self, folder: str, model_name: str, instance: int) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", model_name)
        self.path = os.path.join(folder, f"{safe}-{instance}-{os.getpid()}.json")
        self._model_name = model_name
        self._records: Deque[Tuple[int, ...]] = collections.deque(maxlen=MAX_RECORDS)

    def add_previous(self, stamps: Sequence[int]) -> Tuple[int, ...]:
        """Keep the previous batch's record carried by an `InferBatch`; this batch's first stamps."""
        if len(stamps) == Stamp.COUNT + 2:
            self._records.append(tuple(stamps[: Stamp.COUNT]))
        return tuple(stamps[-2:])

    def write(self) -> None:
        if not self._records:
            return
        with open(self.path, "w", encoding="utf-8") as handle:
            json.dump({"model": self._model_name, "records": list(self._records)}, handle)
