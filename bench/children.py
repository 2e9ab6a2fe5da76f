"""Every process the benchmark starts, and how each one is stopped.

Children run in their own session, so a Ctrl-C in the terminal reaches only the harness, which
then stops them in order; and they get SIGTERM from the kernel if the harness dies without
cleaning up (``PR_SET_PDEATHSIG``). Stopping is polite signal -> bounded wait -> SIGKILL, and
takes the whole process tree (Triton's Python-backend stubs included).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import time
from typing import IO, List, Mapping, Optional, Sequence, Union

import psutil

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Child:
    """One started process, its output sent to `output` (a file: never an ever-growing pipe, unless
    the harness reads it as it comes: ``subprocess.PIPE``, then `stdout`)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], output: Union[IO[str], int]) -> None:
        self.argv = list(argv)
        self.started = time.monotonic()
        self._process = subprocess.Popen(
            self.argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def stdout(self) -> Optional[IO[str]]:
        """Its output, when `output` was ``subprocess.PIPE``."""
        return self._process.stdout

    def is_running(self) -> bool:
        return self._process.poll() is None

    @property
    def returncode(self) -> Optional[int]:
        return self._process.poll()

    def wait(self, timeout_s: float) -> Optional[int]:
        """The exit code, or None if it still runs after `timeout_s`."""
        try:
            return self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def descendants(self) -> List[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, polite: int = signal.SIGTERM, timeout_s: float = 30.0) -> None:
        """Send `polite`, wait up to `timeout_s`, then SIGKILL it and whatever it started."""
        descendants = self.descendants()
        if self.is_running():
            try:
                self._process.send_signal(polite)
            except ProcessLookupError:
                pass
            if self.wait(timeout_s) is None:
                self._process.kill()
                self._process.wait()
        # Whatever it started and left behind (e.g. stubs of a killed server) goes too.
        alive = [p for p in descendants if p.is_running()]
        if alive:
            _, alive = psutil.wait_procs(alive, timeout=5)
        for process in alive:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=5)
