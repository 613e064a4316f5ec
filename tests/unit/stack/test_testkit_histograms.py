"""testkit/histograms.py: quantiles as PromQL's histogram_quantile estimates them."""

from __future__ import annotations

import math

import pytest

from testkit.histograms import WEBHOOK_DURATION, Histogram, histogram_quantile, histograms, merged

INF = math.inf
# 10 observations: 2 under 5 ms, 6 more under 25 ms, 1 under 100 ms, 1 above every bound.
CUMULATIVE = ((0.005, 2.0), (0.025, 8.0), (0.1, 9.0), (INF, 10.0))


@pytest.mark.parametrize("q, expected", [
    (0.1, 0.0025),            # rank 1 of 2 in the first bucket, which starts at 0
    (0.5, 0.005 + 0.02 * 3 / 6),  # rank 5: 3 of the 6 between 5 and 25 ms
    (0.8, 0.025),             # rank 8 exactly at a bound
    (0.85, 0.025 + 0.075 * 0.5),
    (0.99, 0.1),              # in the +Inf bucket: the highest finite bound
])
def test_linear_interpolation_inside_the_bucket(q: float, expected: float) -> None:
    assert histogram_quantile(q, CUMULATIVE) == pytest.approx(expected)


def test_edges_as_promql_answers_them() -> None:
    assert math.isnan(histogram_quantile(0.5, ((0.005, 0.0), (INF, 0.0))))  # no observations
    assert math.isnan(histogram_quantile(0.5, ((0.005, 1.0),)))  # no +Inf bucket
    assert histogram_quantile(-0.1, CUMULATIVE) == -INF
    assert histogram_quantile(1.5, CUMULATIVE) == INF
    assert histogram_quantile(0.5, tuple(reversed(CUMULATIVE))) == histogram_quantile(0.5, CUMULATIVE)


def test_series_are_read_diffed_and_summed_by_label() -> None:
    def page(counts: dict[str, tuple[int, int, int]]) -> str:
        lines = []
        for hook, (fast, slow, total) in counts.items():
            for le, n in (("0.005", fast), ("0.025", slow), ("+Inf", total)):
                lines.append(f'{WEBHOOK_DURATION}_bucket{{name="{hook}",operation="CREATE",'
                             f'rejected="false",type="admit",le="{le}"}} {n}')
        lines.append(f'{WEBHOOK_DURATION}_count{{name="x"}} 1')
        return "\n".join(lines)

    before = histograms(page({"a": (1, 1, 1), "b": (0, 0, 0)}), WEBHOOK_DURATION)
    after = histograms(page({"a": (3, 5, 6), "b": (0, 4, 4)}), WEBHOOK_DURATION)
    diff = {k: after[k] - before.get(k, Histogram(())) for k in after}
    only_a = merged(diff, lambda labels: labels["name"] == "a")
    assert only_a.buckets == ((0.005, 2.0), (0.025, 4.0), (INF, 5.0))
    assert only_a.share_at_most(0.005) == pytest.approx(0.4)
    both = merged(diff, lambda labels: labels["type"] == "admit")
    assert both.count == 9 and both.share_at_most(0.025) == pytest.approx(8 / 9)
