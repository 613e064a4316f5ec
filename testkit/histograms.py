"""Prometheus histograms off a /metrics page: scrape, diff two scrapes, estimate quantiles.

The API server's own view of a webhook is its histogram
apiserver_admission_webhook_admission_duration_seconds, labels name, type,
operation, rejected, buckets 5 ms .. 25 s (k8s.io/apiserver v0.36.3
pkg/admission/metrics/metrics.go:179-189); a whole request is
apiserver_request_duration_seconds (pkg/endpoints/metrics/metrics.go:97-103).
Quantiles are estimated as PromQL's histogram_quantile does (Prometheus v0.316.0
promql/quantile.go:105-175, BucketQuantile): linear interpolation inside the
bucket the rank falls in, the lowest bucket starting at 0, a rank in the +Inf
bucket answered with the highest finite bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

Labels = frozenset[tuple[str, str]]
_BUCKET = re.compile(r'^(?P<name>[a-zA-Z_:][\w:]*)_bucket\{(?P<labels>[^}]*)\} (?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

WEBHOOK_DURATION = "apiserver_admission_webhook_admission_duration_seconds"
REQUEST_DURATION = "apiserver_request_duration_seconds"


@dataclass(frozen=True)
class Histogram:
    """Cumulative counts by upper bound (+Inf included), as Prometheus exposes them."""

    buckets: tuple[tuple[float, float], ...]

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0

    def quantile(self, q: float) -> float:
        return histogram_quantile(q, self.buckets)

    def share_at_most(self, bound: float) -> float:
        """Share of observations at or below `bound`, which must be a bucket bound."""
        if not self.count:
            return math.nan
        for le, cumulative in self.buckets:
            if le == bound:
                return cumulative / self.count
        raise ValueError(f"{bound} is not a bucket bound of {[le for le, _ in self.buckets]}")

    def __sub__(self, earlier: Histogram) -> Histogram:
        before = dict(earlier.buckets)
        return Histogram(tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets))

    def __add__(self, other: Histogram) -> Histogram:
        if not other.buckets:
            return self
        if not self.buckets:
            return other
        more = dict(other.buckets)
        return Histogram(tuple((le, n + more.get(le, 0.0)) for le, n in self.buckets))


EMPTY = Histogram(())


def histogram_quantile(q: float, buckets: tuple[tuple[float, float], ...]) -> float:
    """PromQL's histogram_quantile over (upper bound, cumulative count) pairs."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return math.nan
    observations = ordered[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = next((i for i, (_, n) in enumerate(ordered[:-1]) if n >= rank), len(ordered) - 1)
    if b == len(ordered) - 1:
        return ordered[-2][0]
    if b == 0 and ordered[0][0] <= 0:
        return ordered[0][0]
    start, end, count = 0.0, ordered[b][0], ordered[b][1]
    if b > 0:
        start = ordered[b - 1][0]
        count -= ordered[b - 1][1]
        rank -= ordered[b - 1][1]
    return start + (end - start) * (rank / count)


def histograms(text: str, name: str) -> dict[Labels, Histogram]:
    """Every series of histogram `name` on a /metrics page, by its labels (le taken out)."""
    found: dict[Labels, dict[float, float]] = {}
    for line in text.splitlines():
        match = _BUCKET.match(line)
        if not match or match["name"] != name:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        le = float(labels.pop("le"))
        found.setdefault(frozenset(labels.items()), {})[le] = float(match["value"])
    return {k: Histogram(tuple(sorted(v.items()))) for k, v in found.items()}


def merged(series: Mapping[Labels, Histogram], where: Callable[[dict[str, str]], bool]) -> Histogram:
    """The sum of the series whose labels satisfy `where` (like PromQL's sum by (le))."""
    total = EMPTY
    for labels, histogram in series.items():
        if where(dict(labels)):
            total = total + histogram
    return total
