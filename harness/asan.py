"""`make asan`: pytriton's backend built with AddressSanitizer, under its functional tests.

1. Compiles ``pytriton/backend/*.c`` with ``-fsanitize=address`` into ``build/asan/`` (the
   installed library is left alone).
2. Runs the functional tests that serve through the backend with that library
   (``PYTRITON_BACKEND_LIBRARY``) and the compiler's ASan runtime preloaded into tritonserver
   alone (``PYTRITON_SERVER_LD_PRELOAD``; tritonserver itself is not instrumented, so the runtime
   must come first). Every server writes its reports to ``build/asan/reports/asan.<pid>``.
3. Reads the reports. An error report (a bad read or write, a double free, ...) fails the run
   wherever it points; a leak fails it when one of its frames is in our library. Leaks of
   Triton's own, which it leaves to the process's end, are listed in
   ``harness/asan_suppressions.txt`` and suppressed.

Usage: ``python harness/asan.py [pytest arguments]`` (default: `TESTS`). Exit status 1 when a
report names our library or the tests fail.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import List, Sequence

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "build" / "asan"
LIBRARY = OUT / "libtriton_pytriton.so"
REPORTS = OUT / "reports"
SUPPRESSIONS = REPO / "harness" / "asan_suppressions.txt"
OURS = "libtriton_pytriton.so"
TESTS = (
    "tests/functional/test_serving.py",
    "tests/functional/test_request_features.py",
    "tests/functional/test_process_instances.py",
    "tests/functional/test_sequences.py",
    "tests/functional/test_metrics.py",
    "tests/functional/test_native_backend.py",
    "tests/functional/streaming",
    "tests/functional/options/test_opt_model.py",
)


def build() -> None:
    env = dict(os.environ, PYTRITON_BACKEND_CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g -O1")
    subprocess.run([sys.executable, str(REPO / "build_backend" / "native.py"), str(LIBRARY)], env=env, check=True)


def runtime() -> str:
    """The compiler's shared ASan runtime (the one the library was linked against)."""
    found = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True)
    path = os.path.realpath(found.stdout.strip())
    if not os.path.isfile(path):
        raise SystemExit(f"asan: no ASan runtime found (cc -print-file-name=libasan.so gave {path!r})")
    return path


def run_tests(arguments: Sequence[str]) -> int:
    shutil.rmtree(REPORTS, ignore_errors=True)
    REPORTS.mkdir(parents=True)
    env = dict(
        os.environ,
        PYTRITON_BACKEND_LIBRARY=str(LIBRARY),
        PYTRITON_SERVER_LD_PRELOAD=runtime(),
        ASAN_OPTIONS=f"log_path={REPORTS / 'asan'}:detect_leaks=1:abort_on_error=0:halt_on_error=1",
        LSAN_OPTIONS=f"suppressions={SUPPRESSIONS}:print_suppressions=0",
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *arguments]
    return subprocess.run(command, env=env, cwd=REPO, check=False).returncode


def findings() -> List[str]:
    """The reports that fail the run: every error report, and leaks with a frame of ours."""
    failing = []
    for report in sorted(REPORTS.glob("asan.*")):
        text = report.read_text(errors="replace")
        if not text.strip():
            continue
        errors = "ERROR: AddressSanitizer" in text
        leaks = [block for block in text.split("\n\n") if ("Direct leak" in block or "Indirect leak" in block)
                 and OURS in block]
        if errors or leaks:
            failing.append(f"{report.name}:\n{text[:4000]}")
    return failing


def main(argv: Sequence[str]) -> int:
    started = time.monotonic()
    build()
    status = run_tests(argv or TESTS)
    failing = findings()
    minutes = (time.monotonic() - started) / 60
    reports = len(list(REPORTS.glob("asan.*")))
    for text in failing:
        print(text, file=sys.stderr)
    print(f"asan: tests exited {status}; {reports} report file(s), {len(failing)} naming our library or an error; "
          f"{minutes:.1f} min", file=sys.stderr)
    return 0 if status == 0 and not failing else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
