"""The admission counts and latencies kept as plain numbers read as prometheus_client's own would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from raykueue.app.metrics import ADMISSION_BUCKETS, AdmissionStats

# On the bounds, between them, below the first and past the last.
SECONDS = [0.00005, 0.0001, 0.0003, 0.001, 0.0011, 0.02, 0.7, 1.0, 3.0, 0.0001]


def page(registry: CollectorRegistry) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines()
                  if "_created" not in line)


def test_the_page_is_what_counter_and_histogram_would_give() -> None:
    ours = CollectorRegistry()
    stats = AdmissionStats()
    ours.register(stats)
    theirs = CollectorRegistry()
    requests = Counter("raykueue_admission_requests",
                       "Admission requests answered, by webhook, decision and Ray role.",
                       ["webhook", "decision", "role"], registry=theirs)
    latency = Histogram("raykueue_admission_duration_seconds",
                        "Time from a request's body being read to its answer being encoded.",
                        ["webhook"], buckets=ADMISSION_BUCKETS, registry=theirs)
    bad = Counter("raykueue_admission_bad_requests",
                  "Requests answered 400 because the body was not a usable AdmissionReview.",
                  ["webhook"], registry=theirs)
    for i, seconds in enumerate(SECONDS):
        webhook = ("mutate", "validate")[i % 2]
        decision, role = ("gated", "worker") if i % 3 else ("skipped", "none")
        stats.record(webhook, decision, role, seconds)
        requests.labels(webhook, decision, role).inc()
        latency.labels(webhook).observe(seconds)
    stats.count_bad("mutate")
    bad.labels("mutate").inc()
    assert page(ours) == page(theirs)
    assert any(line.startswith('raykueue_admission_duration_seconds_bucket{le="+Inf",webhook="mutate"} 5')
               for line in page(ours))
