"""bench/scrape.py: the Prometheus text the cohort bench reads from Kueue, etcd and the
API server, and what it makes of histograms."""

from __future__ import annotations

import os

import pytest

from bench import scrape

TEXT = """\
# HELP kueue_admission_attempts_total Total number of attempts to admit workloads.
# TYPE kueue_admission_attempts_total counter
kueue_admission_attempts_total{result="inadmissible"} 7
kueue_admission_attempts_total{result="success"} 3
kueue_admission_attempt_duration_seconds_bucket{result="success",le="0.1"} 1
kueue_admission_attempt_duration_seconds_bucket{result="success",le="1"} 3
kueue_admission_attempt_duration_seconds_bucket{result="success",le="+Inf"} 4
kueue_admission_attempt_duration_seconds_sum{result="success"} 2.5
kueue_admission_attempt_duration_seconds_count{result="success"} 4
apiserver_storage_objects{resource="pods"} 12
apiserver_storage_objects{resource="events"} 30
etcd_mvcc_db_total_size_in_use_in_bytes 1.048576e+06
"""


def test_parse_sums_by_labels_and_skips_comments() -> None:
    s = scrape.parse(TEXT)
    assert scrape.total(s, "kueue_admission_attempts_total") == 10
    assert scrape.total(s, "kueue_admission_attempts_total", result="success") == 3
    assert scrape.by_label(s, "apiserver_storage_objects", "resource") == {"pods": 12, "events": 30}
    assert scrape.total(s, "etcd_mvcc_db_total_size_in_use_in_bytes") == 2 ** 20


def test_parse_keeps_only_prefixes_when_given() -> None:
    s = scrape.parse(TEXT, ("apiserver_",))
    assert set(s) == {"apiserver_storage_objects"}


def test_diff_is_per_series() -> None:
    before = scrape.parse('kueue_admission_attempts_total{result="success"} 3\n')
    after = scrape.parse('kueue_admission_attempts_total{result="success"} 8\n'
                         'kueue_admission_attempts_total{result="inadmissible"} 2\n')
    d = scrape.diff(after, before)
    assert scrape.total(d, "kueue_admission_attempts_total", result="success") == 5
    assert scrape.total(d, "kueue_admission_attempts_total", result="inadmissible") == 2


def test_quantile_interpolates_within_a_bucket_as_prometheus_does() -> None:
    s = scrape.parse(TEXT)
    h = "kueue_admission_attempt_duration_seconds"
    # 4 observations: rank 2 falls halfway through the (0.1, 1] bucket (counts 1 -> 3).
    assert scrape.quantile(s, h, 0.5) == pytest.approx(0.55)
    # Past the last finite bound: that bound, as histogram_quantile answers.
    assert scrape.quantile(s, h, 0.99) == 1.0
    assert scrape.mean(s, h) == pytest.approx(0.625)
    assert scrape.quantile(s, "no_such_histogram", 0.5) is None
    assert scrape.mean(s, "no_such_histogram") is None


def test_proc_use_of_this_process_and_of_none() -> None:
    use = scrape.proc_use(os.getpid())
    assert use.cpu_s > 0 and use.hwm_mib >= use.rss_mib > 0
    assert scrape.proc_use(2 ** 22 + 1) == scrape.ProcUse(0.0, 0.0)  # above pid_max's default
