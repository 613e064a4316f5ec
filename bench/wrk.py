"""wrk as bench/admission.py drives it: the Lua script (a review body per request, and a
done() hook that prints the latency percentiles) and what is read from its output.

A library module (no `_repo` import): the unit tests import it as `bench.wrk`.
"""

from __future__ import annotations

import re

LUA = """
local bodies = {}
local i = 0
init = function(args)
  for _, path in ipairs(args) do
    local f = assert(io.open(path, "rb")); table.insert(bodies, f:read("*all")); f:close()
  end
end
request = function()
  i = i % #bodies + 1
  return wrk.format("POST", "/mutate-pods", {["Content-Type"] = "application/json"}, bodies[i])
end
done = function(summary, latency, requests)
  io.write("latency-us")
  for _, p in ipairs({50, 90, 99, 99.9}) do
    io.write(string.format(" p%g=%d", p, latency:percentile(p)))
  end
  io.write(string.format(" max=%d\\n", latency.max))
end
"""

PERCENTILES = ("p50", "p90", "p99", "p99.9", "max")


def parse_wrk(out: str) -> dict:
    """reviews/s, the request count and the latency percentiles (ms) of one wrk run
    with LUA's done() hook; a run with errors is refused, not measured."""
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    line = re.search(r"^latency-us (.*)$", out, re.M).group(1)
    micros = dict(pair.split("=") for pair in line.split())
    return {"rps": rps, "requests": total, **{k: int(micros[k]) / 1000 for k in PERCENTILES}}
