"""Gateway counters and latency samples (bounded), summarised for `GET /stats`.

Latencies per answered call: `prompt_count` (from the request's arrival to its exact prompt
length: body, parse, render or count), `upstream` (the model call), `gateway_overhead` (the
whole handler less the model call) and, within it, `trace_write` (the awaited trace write,
on the loop or in the disk thread with its hand-offs: the answer waits for it). `/stats` adds
`disk_calls`: how many file calls (trace writes, a session's traces read after a restart) ran
inline on the loop and in the disk thread, and how many inline ones stalled.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

SAMPLES = 4096


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]) of `values`; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def _latency(samples: deque[float]) -> dict[str, Any]:
    values = list(samples)
    p50, p99 = percentile(values, 50), percentile(values, 99)
    return {
        "n": len(values),
        "p50_ms": None if p50 is None else round(p50, 3),
        "p99_ms": None if p99 is None else round(p99, 3),
    }


@dataclass
class GatewayStats:
    """What the gateway did since it started; latencies keep the last 4096 samples."""

    requests: int = 0
    guard_refused: int = 0
    upstream_errors: int = 0
    upstream_timeouts: int = 0
    client_disconnects: int = 0
    traces_written: int = 0
    untraced_choices: int = 0
    last_untraced: str | None = None
    trace_write_failures: int = 0
    last_trace_error: str | None = None
    tito_calls: int = 0
    spliced_turns: int = 0
    breaks: Counter[str] = field(default_factory=Counter)
    count_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    upstream_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    overhead_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    trace_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))  # awaited

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "guard_refused": self.guard_refused,
            "upstream_errors": self.upstream_errors,
            "upstream_timeouts": self.upstream_timeouts,
            "client_disconnects": self.client_disconnects,
            "traces_written": self.traces_written,
            "untraced_choices": self.untraced_choices,
            "last_untraced": self.last_untraced,
            "trace_write_failures": self.trace_write_failures,
            "last_trace_error": self.last_trace_error,
            "token_in_token_out": {
                "calls": self.tito_calls,
                "spliced_turns": self.spliced_turns,
                "breaks": dict(sorted(self.breaks.items())),
            },
            "prompt_count": _latency(self.count_ms),
            "upstream": _latency(self.upstream_ms),
            "gateway_overhead": _latency(self.overhead_ms),
            "trace_write": _latency(self.trace_ms),
        }
