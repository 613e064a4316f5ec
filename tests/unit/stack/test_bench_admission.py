"""bench/wrk.py: what bench/admission.py reads from a wrk run (its done() hook's percentiles)."""

from __future__ import annotations

import pytest

from bench.wrk import parse_wrk

WRK = """\
Running 5s test @ https://127.0.0.1:40000
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     4.11ms    1.20ms  21.73ms   80.12%
    Req/Sec     7.86k   310.22     8.21k    88.00%
  39103 requests in 5.00s, 19.71MB read
Requests/sec:   7820.41
Transfer/sec:      3.94MB
latency-us p50=3902 p90=5210 p99=7713 p99.9=12004 max=21730
"""


def test_a_run_gives_throughput_requests_and_percentiles_in_ms() -> None:
    assert parse_wrk(WRK) == {"rps": 7820.41, "requests": 39103, "p50": 3.902, "p90": 5.21,
                              "p99": 7.713, "p99.9": 12.004, "max": 21.73}


@pytest.mark.parametrize("error", ["  Non-2xx or 3xx responses: 12\n",
                                   "  Socket errors: connect 0, read 3, write 0, timeout 0\n"])
def test_a_run_with_errors_is_refused(error: str) -> None:
    with pytest.raises(RuntimeError, match="wrk saw errors"):
        parse_wrk(WRK + error)
