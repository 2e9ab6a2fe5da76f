"""Run a command as PID 1 of a new PID namespace, with its own /proc, and record how it ended.

``python harness/faults_pid1.py STATUS_FILE COMMAND...`` does what ``unshare -p -f
--mount-proc COMMAND...`` does (new PID and mount namespaces; the forked child mounts a fresh
/proc and execs COMMAND, which is then PID 1, as a container's process is), then waits for
COMMAND and writes its end to STATUS_FILE as JSON: ``{"returncode": N}``, N negative for the
signal that killed it (as `subprocess` reports it). Its own exit code is COMMAND's, or 128 + the
signal.

Why not ``unshare`` itself: util-linux's unshare (2.38.1 here) turns a child killed by a signal
into exit code 1 ("sigprocmask unblock failed"), so a SIGKILL could not be told from an error.

The child gets ``PR_SET_PDEATHSIG`` = SIGKILL: if this launcher dies, so does the namespace's
PID 1, and with it every process of the namespace. Exit code 125: the namespaces could not be
made (not root, or not permitted here).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
PR_SET_PDEATHSIG = 1
CANNOT_UNSHARE = 125


def main() -> int:
    status_file, command = sys.argv[1], sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID | CLONE_NEWNS) != 0:
        print(f"faults_pid1: unshare failed: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return CANNOT_UNSHARE
    child = os.fork()
    if child == 0:
        try:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            # Private mounts first, so that the new /proc does not show through to the host.
            if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0 or \
                    libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
                raise OSError(ctypes.get_errno(), f"mounting /proc: {os.strerror(ctypes.get_errno())}")
            os.execv(command[0], command)
        except BaseException as error:  # noqa: BLE001 - the child must never return into this program
            print(f"faults_pid1: {error}", file=sys.stderr, flush=True)
            os._exit(CANNOT_UNSHARE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for PID 1 to handle, not for this wait
    _, status = os.waitpid(child, 0)
    returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    with open(status_file, "w", encoding="utf-8") as out:
        json.dump({"returncode": returncode}, out)
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main())
