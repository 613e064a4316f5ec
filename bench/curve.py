"""The growth curve of bench/cohort.py: what counts as a pending pod, when the fill
crosses a checkpoint, and the per-1,000-pending arithmetic. Pure: no I/O.

A pending pod is one Kueue holds in a Workload without quota, counted from the
Workloads themselves so that both ways count the same thing: raykueue's way has one
Workload per gated pod (count 1), Kueue's elastic RayCluster one per suspended
cluster (its pod sets' counts, head and workers). A pod KubeRay has not created yet
costs Kueue nothing in raykueue's way and is not counted; a suspended cluster's pods
are, since Kueue queues them as one Workload whether or not a pod exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def parse_checkpoints(text: str) -> list[int]:
    """'1000,5000,10000' -> [1000, 5000, 10000] (sorted, unique, each > 0)."""
    found = sorted({int(x) for x in text.replace(" ", "").split(",") if x})
    if any(x <= 0 for x in found):
        raise ValueError(f"checkpoints must be positive pending-pod counts: {text!r}")
    return found


def _true(wl: Mapping[str, Any], type_: str) -> bool:
    return any(x.get("type") == type_ and x.get("status") == "True"
               for x in (wl.get("status") or {}).get("conditions") or [])


def pending_pods(wl: Mapping[str, Any]) -> int:
    """Pods this Workload holds pending: its pod sets' counts while it has no quota and
    is neither finished nor being deleted; 0 otherwise."""
    if (wl.get("metadata") or {}).get("deletionTimestamp"):
        return 0
    if _true(wl, "QuotaReserved") or _true(wl, "Finished"):
        return 0
    return sum(int(ps.get("count", 1)) for ps in (wl.get("spec") or {}).get("podSets") or [])


def crossed(checkpoints: Iterable[int], reached: Iterable[int], pending: int) -> list[int]:
    """Checkpoints `pending` has reached that were not reached before, lowest first."""
    done = set(reached)
    return [cp for cp in sorted(checkpoints) if cp not in done and pending >= cp]


def per_thousand(value: float, pending: int) -> float | None:
    """`value` per 1,000 pending pods; None when nothing is pending."""
    return value / pending * 1000 if pending > 0 else None


def creation_rate(created_at: Iterable[float], since: float) -> float | None:
    """Pods created per second from `since` (the first cluster's create) to the last
    pod seen created; None before two pods exist."""
    times = sorted(t for t in created_at if t >= since)
    if len(times) < 2 or times[-1] <= since:
        return None
    return len(times) / (times[-1] - since)


def by_method(samples: Mapping[str, Mapping[tuple[tuple[str, str], ...], float]],
              metric: str = "rest_client_requests_total") -> dict[str, float]:
    """A client-go process's requests by HTTP method (its rest_client_requests_total,
    summed over codes and hosts): who sent what, where the API server's own counter
    cannot tell one client from another."""
    found: dict[str, float] = {}
    for labels, v in samples.get(metric, {}).items():
        method = dict(labels).get("method", "")
        found[method] = found.get(method, 0.0) + v
    return found


def with_concurrency(argv: list[str], flag: str, value: int | None) -> list[str]:
    """`argv` with `flag` set to `value` (`--flag=value`), or without the flag at all for
    None, whichever way it was given before (`--flag=v` or `--flag v`)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return out + ([f"{flag}={value}"] if value is not None else [])
