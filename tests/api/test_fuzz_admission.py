"""10,000 malformed or hostile AdmissionReviews against a running `raykueue serve`.

Both admission paths get generated cases (testkit/fuzz_reviews.py: wrong types,
missing fields, multi-MB strings, nesting past the parser's limit, odd
unicode, bytes that are not JSON). Every answer must be a 4xx with a reason
or a 200 AdmissionReview for the request's uid (a denial with a message where
one is due), never a 5xx, never a dropped connection, never the server's
"failed to decide" fallback; the server must still be up afterwards, and its
resident memory after the run must stay within a bound of what it used after
a warm-up. The seed and the figures are printed (run with -s to see them).
"""

from __future__ import annotations

import collections
import os
import ssl
import time
from pathlib import Path

import httpx
import orjson
import pytest

from testkit.fuzz_reviews import Case, cases
from testkit.servers import RaykueueServer

CASES = int(os.environ.get("RAYKUEUE_FUZZ_CASES", "10000"))
SEED = int(os.environ.get("RAYKUEUE_FUZZ_SEED", str(int(time.time()) % 100_000)))
WARMUP = 1000
# Python and glibc keep freed memory for reuse, so the first multi-MB bodies of
# new shapes raise the heap's high-water mark in steps (measured: +10 to +24 MiB
# over 10,000 cases; +53 MiB over 30,000, reached by 12,000 and flat after);
# never in proportion to what was sent (about 400 MiB per 10,000 here).
RSS_SLACK_BYTES = 48 * 1024 * 1024
RSS_SLACK_RATIO = 0.5
# A leak grows with the number of requests, whatever they hold: replaying
# cases the server has already seen must leave its memory where it was
# (2,000 replays leaking even 2 KiB each would show 4 MiB). The first replay
# may still raise the high-water mark a little (+1 to +4 MiB seen); the second
# is the one held to the bound.
REPLAY = 2000
REPLAY_SLACK_BYTES = 4 * 1024 * 1024


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def check(case: Case, response: httpx.Response) -> str:
    """What kind of answer it was; raises on a wrong one."""
    status = response.status_code
    assert status < 500, (case.kind, status, response.text[:300])
    if status != 200:
        assert 400 <= status < 500, (case.kind, status)
        reason = response.json().get("reason")
        assert isinstance(reason, str) and reason, (case.kind, response.text[:300])
        return f"{status}"
    doc = orjson.loads(response.content)
    assert doc["kind"] == "AdmissionReview" and doc["apiVersion"] == "admission.k8s.io/v1"
    answer = doc["response"]
    sent = orjson.loads(case.body)["request"]["uid"]
    assert answer["uid"] == sent, (case.kind, answer)
    if case.must_deny:
        assert answer["allowed"] is False, (case.kind, answer)
    if answer["allowed"]:
        return "allowed"
    result = answer["status"]
    assert result["message"], (case.kind, answer)
    # 500 inside a 200 is the server catching an exception in a decision.
    assert result["code"] != 500, (case.kind, result["message"])
    return "denied"


@pytest.fixture
def server(api_stack, tmp_path) -> RaykueueServer:
    # Admission against a real cluster view (its caches), no controller, and not
    # registered: only this test sends it anything.
    replica = RaykueueServer(api_stack, tmp_path, register=False,
                             args=["--no-controller"], env={"RAYKUEUE_LOG_LEVEL": "WARNING"})
    replica.start()
    yield replica
    replica.stop()


def test_ten_thousand_bad_reviews(server: RaykueueServer) -> None:
    print(f"\n[fuzz] seed {SEED}, {CASES} cases (+{WARMUP} warm-up); "
          f"reproduce with RAYKUEUE_FUZZ_SEED={SEED}")
    assert server.proc is not None
    pid = server.proc.pid
    answers: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    sent = 0
    tls = ssl.create_default_context(cafile=str(server.ca_file))
    with httpx.Client(base_url=server.url, verify=tls, timeout=60) as http:
        def post(case: Case) -> str:
            response = http.post(case.path, content=case.body,
                                 headers={"content-type": "application/json"})
            return check(case, response)

        for case in cases(WARMUP, SEED + 1):
            post(case)
        warm = rss_bytes(pid)
        series = [warm]  # every 2,000 cases: a leak grows with the count, a heap settles
        t0 = time.monotonic()
        peak = warm
        tail: collections.deque[Case] = collections.deque(maxlen=REPLAY)
        for i, case in enumerate(cases(CASES, SEED)):
            tail.append(case)
            kinds[case.kind] += 1
            answers[post(case)] += 1
            sent += len(case.body)
            if i % 500 == 0:
                peak = max(peak, rss_bytes(pid))
            if (i + 1) % 2000 == 0:
                series.append(rss_bytes(pid))
        elapsed = time.monotonic() - t0
        after = rss_bytes(pid)
        for case in tail:  # the first replay may still settle the heap a little
            post(case)
        settled = rss_bytes(pid)
        for case in tail:
            post(case)
        replayed = rss_bytes(pid)
        health = http.get("/healthz")
    assert server.running, server.logs()
    assert health.status_code == 200
    bound = warm + max(RSS_SLACK_BYTES, int(warm * RSS_SLACK_RATIO))
    mib = 1024 * 1024
    print(f"[fuzz] {sum(answers.values())} answers in {elapsed:.1f}s "
          f"({sum(answers.values()) / elapsed:.0f}/s, {sent / mib:.0f} MiB sent): "
          f"{dict(sorted(answers.items()))}")
    print(f"[fuzz] cases by kind: {dict(sorted(kinds.items()))}")
    print(f"[fuzz] RSS after warm-up {warm / mib:.1f} MiB, peak {peak / mib:.1f} MiB, "
          f"after {after / mib:.1f} MiB (bound {bound / mib:.1f} MiB); every 2,000 cases: "
          f"{', '.join(f'{x / mib:.1f}' for x in series)} MiB")
    assert sum(answers.values()) == CASES
    assert {"400", "allowed", "denied"} <= answers.keys()
    print(f"[fuzz] replaying the last {len(tail)} cases twice: RSS {after / mib:.1f} -> "
          f"{settled / mib:.1f} -> {replayed / mib:.1f} MiB (bound on the second: "
          f"+{REPLAY_SLACK_BYTES / mib:.0f} MiB)")
    assert after <= bound, f"RSS grew from {warm} to {after} bytes"
    assert replayed <= settled + REPLAY_SLACK_BYTES, \
        f"RSS grew from {settled} to {replayed} replaying cases it had answered twice"
