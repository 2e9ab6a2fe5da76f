"""The soak's verdict (harness/soak.py `judge`) on samples written by hand, without a server.

The case that made `make soak` fail although nothing leaked (issue 43): pytriton's arenas held
4.0 MiB at the 50 % mark and 8.0 MiB at the 100 % mark (an arena's size follows the payloads of
its last messages), and 0 after close. Judged by their growth between two moments, that was
"+100 %"; judged by their stated bound (`pytriton.ipc.shm.arena_bound`), one segment per arena
and the return to baseline, it passes, while a leak still fails.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Dict, List

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "harness"))

import soak  # noqa: E402

MIB = 1 << 20
FLAT = {"rss_user": 40 * MIB, "rss_server": 260 * MIB, "rss_stubs": 0, "stubs": 0, "shm_pool": 0, "fds": 31,
        "threads": 11, "arena_extra_segments": 0, "arena_over_bound": 0, "shm_user_mapped": 0,
        "info_user_anon": 30 * MIB}


def samples(arenas_at, **overrides) -> List[Dict[str, float]]:
    """One sample a second from t=0 to t=100 (the load), arenas as `arenas_at(t)` bytes."""
    return [{"t": float(t), **FLAT, "shm_arenas": arenas_at(t), **{k: f(t) for k, f in overrides.items()}}
            for t in range(0, 101)]


def verdict(rows_samples, after=None):
    baseline = {metric: 0 if metric.startswith(("shm_arenas", "shm_user", "arena_")) else value
                for metric, value in rows_samples[0].items() if metric != "t"}
    after = {**baseline, **(after or {})}
    _, checks, failures = soak.judge(rows_samples, 0.0, 50.0, 100.0, baseline, after, 0.05, {"rss": 0.10})
    return checks, failures


def test_arenas_that_follow_the_payload_mix_within_their_bound_pass():
    mix = samples(lambda t: 4 * MIB if t <= 50 else 8 * MIB,  # the figures of the failed run
                  shm_user_mapped=lambda t: 2 * MIB if t <= 50 else 8 * MIB)
    checks, failures = verdict(mix)
    assert checks["shm_arenas"]["half"] == 4 * MIB and checks["shm_arenas"]["full"] == 8 * MIB
    assert failures == []


def test_an_arena_that_keeps_an_old_segment_fails():
    leak = samples(lambda t: 4 * MIB, arena_extra_segments=lambda t: 1 if t > 70 else 0)
    _, failures = verdict(leak, after={"arena_extra_segments": 1, "shm_arenas": 4 * MIB})
    assert any(failure.startswith("arena_extra_segments") for failure in failures), failures
    assert any("shm_arenas did not return to its baseline" in failure for failure in failures), failures


def test_an_arena_over_its_bound_fails_even_when_it_returns_after_close():
    over = samples(lambda t: 300 * MIB if t > 90 else 4 * MIB, arena_over_bound=lambda t: MIB if t > 90 else 0)
    _, failures = verdict(over)
    assert any(failure.startswith("arena_over_bound") for failure in failures), failures
    assert any(failure.startswith("shm_arenas reached 300.0 MiB") for failure in failures), failures


def test_the_process_s_own_memory_is_still_judged_by_its_growth():
    heap = samples(lambda t: 4 * MIB, rss_user=lambda t: 40 * MIB if t <= 50 else 44 * MIB)
    _, failures = verdict(heap)
    assert failures == ["rss_user grew +10.0% from the 50 % to the 100 % mark"]
