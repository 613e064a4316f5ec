"""Latency as the API server sees it, for bench/compare.py, beside a ceiling webhook.

The ceiling (bench/ceiling.py: raykueue's decision behind a bare ASGI handler,
same uvicorn settings, same TLS context) is registered exactly as raykueue's
pod webhook is: the shipped declaration (manifests/webhooks.yaml, through
devstack.webhook_configurations with the bench's namespace selector), renamed
and pointed at the ceiling (bench/ceiling_hook.py). What the API server measures per webhook
(testkit/histograms.py) is then split into what is ours and what is its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import devstack
from bench.ceiling_hook import ceiling_configuration
from devstack.controlplane.kubeapi import KubeError, object_path
from raykueue.kube.rest import Rest
from testkit.histograms import (
    REQUEST_DURATION,
    WEBHOOK_DURATION,
    Histogram,
    Labels,
    histograms,
    merged,
)
from testkit.servers import LoopbackTLSServer, RaykueueServer, metric_total, metrics_page
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent
KUEUE_POD_HOOK = "mpod.kb.io"
HANDSHAKES = "raykueue_tls_handshakes_total"
HANDLER_DURATION = "raykueue_admission_duration_seconds"  # raykueue's own, app/metrics.py
KEEP_ALIVE_ENV = "RAYKUEUE_KEEP_ALIVE_SECONDS"


def raykueue_hooks() -> frozenset[str]:
    """Every webhook raykueue's server answers, as the API server names them."""
    return frozenset(hook["name"] for config in devstack.webhook_configurations("https://x", b"")
                     for hook in config.get("webhooks", []))


class Ceiling(LoopbackTLSServer):
    """bench/ceiling.py as a process on a free port, registered for some namespaces."""

    def __init__(self, stack: devstack.Stack, workdir: Path, namespace_selector: dict) -> None:
        self.stack = stack
        (self.port,) = devstack.free_ports(1)
        self.cert_dir = workdir / "ceiling-certs"
        self.log_path = workdir / "ceiling.log"
        self.namespace_selector = namespace_selector
        self.proc: subprocess.Popen | None = None

    def start(self, keep_alive: int | None = None) -> Ceiling:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop(KEEP_ALIVE_ENV, None)
        if keep_alive is not None:
            env[KEEP_ALIVE_ENV] = str(keep_alive)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                # Tuned as `raykueue serve` tunes itself, as bench/admission.py runs it.
                [sys.executable, str(ROOT / "bench" / "ceiling.py"), "--port", str(self.port),
                 "--cert-dir", str(self.cert_dir), "--tune-interpreter"],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT)
        wait_for(lambda: self.handshakes() >= 0, timeout=60, interval=0.2,
                 message=lambda: f"the ceiling webhook on {self.url}: {self.log_path.read_text()}")
        config = ceiling_configuration(self.url, self.ca_file.read_bytes(), self.namespace_selector)
        self.stack.api.apply(object_path(config), config)
        return self

    def handshakes(self) -> float:
        return metric_total(self.url, self.ca_file, HANDSHAKES)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def close(self) -> None:
        try:
            config = ceiling_configuration(self.url, b"", self.namespace_selector)
            self.stack.api.delete(object_path(config))
        except KubeError:
            pass
        finally:
            self.stop()


# ---- the API server's histograms, per phase --------------------------------------------

@dataclass(frozen=True)
class Scrape:
    webhooks: dict[Labels, Histogram]
    requests: dict[Labels, Histogram]


def scrape(rest: Rest) -> Scrape:
    text = rest.request("GET", "/metrics")
    return Scrape(histograms(text, WEBHOOK_DURATION), histograms(text, REQUEST_DURATION))


def _diff(after: dict[Labels, Histogram], before: dict[Labels, Histogram]) -> dict[Labels, Histogram]:
    return {k: h - before[k] if k in before else h for k, h in after.items()}


@dataclass(frozen=True)
class View:
    """What the API server measured over one phase: one webhook's CREATE calls, pod POSTs."""

    webhook: Histogram
    create: Histogram

    def __add__(self, other: View) -> View:
        return View(self.webhook + other.webhook, self.create + other.create)


def phase_view(before: Scrape, after: Scrape, hook: str | None) -> View:
    webhook = merged(_diff(after.webhooks, before.webhooks),
                     lambda lb: lb.get("name") == hook and lb.get("operation") == "CREATE"
                     and lb.get("type") == "admit")
    create = merged(_diff(after.requests, before.requests),
                    lambda lb: lb.get("verb") == "POST" and lb.get("resource") == "pods"
                    and not lb.get("subresource") and not lb.get("dry_run"))
    return View(webhook, create)


def handler_time(server: RaykueueServer) -> Histogram:
    """raykueue's own measure of its pod webhook: body read to answer encoded."""
    series = histograms(metrics_page(server.url, server.ca_file), HANDLER_DURATION)
    return merged(series, lambda lb: lb.get("webhook") == "mutate")


def calls_to(scraped: Scrape, hooks: frozenset[str]) -> float:
    """Every call the API server made to these webhooks (any operation), so far."""
    return merged(scraped.webhooks, lambda lb: lb.get("name") in hooks).count


def _ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1e3:.1f}"  # NaN: no calls


def _share(h: Histogram, bound: float) -> str:
    share = h.share_at_most(bound)
    return "-" if share != share else f"{share:.0%}"


def view_table(views: dict[str, View], hooks: dict[str, str | None]) -> list[str]:
    rows = ["| system | webhook (API server's name) | calls | webhook p50 ms | webhook p99 ms "
            "| under 5 ms | under 25 ms | creates | create p50 ms | create p99 ms |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for system, v in views.items():
        rows.append(f"| {system} | {hooks[system] or '-'} | {v.webhook.count:.0f} | "
                    f"{_ms(v.webhook.quantile(0.5))} | {_ms(v.webhook.quantile(0.99))} | "
                    f"{_share(v.webhook, 0.005)} | {_share(v.webhook, 0.025)} | {v.create.count:.0f} | "
                    f"{_ms(v.create.quantile(0.5))} | {_ms(v.create.quantile(0.99))} |")
    return rows


def gap(ours: float, ceiling: float) -> str:
    return f"{(ours - ceiling) * 1e3:+.1f} ms ({ours / ceiling - 1:+.0%})" if ceiling else "-"


# ---- keep-alive: handshakes per 1,000 calls --------------------------------------------

@dataclass(frozen=True)
class Target:
    """A server the API server calls: its webhook names and how to read its handshakes."""

    hooks: frozenset[str]
    handshakes: Callable[[], float]
    restart: Callable[[int | None], None]
    namespace: str


def restart_raykueue(server: RaykueueServer, keep_alive: int | None) -> None:
    env = {k: v for k, v in server.extra_env.items() if k != KEEP_ALIVE_ENV}
    server.restart(env if keep_alive is None else {**env, KEEP_ALIVE_ENV: str(keep_alive)})


def handshakes_per_1000(rest: Rest, targets: dict[str, Target], call: Callable[[str], None],
                        rounds: int, calls: int, pause: float,
                        keep_alive: int | None) -> dict[str, tuple[float, float, float]]:
    """Restart every target with `keep_alive` (None: the default), then `rounds` rounds of
    `calls` dry-run creates per target, each round after `pause` seconds of quiet.
    Per target: (handshakes, webhook calls, handshakes per 1,000 calls)."""
    for target in targets.values():
        target.restart(keep_alive)
    for name, target in targets.items():
        wait_for(lambda t=target, n=name: _called(call, t, n), timeout=60, interval=0.5,
                 message=f"the API server to call {name} again")
    before = {name: (t.handshakes(), calls_to(scrape(rest), t.hooks)) for name, t in targets.items()}
    names = list(targets)
    for r in range(rounds):
        # The quiet before each burst is what is measured: longer than uvicorn's own
        # 5 s keep-alive, shorter than the API server's 90 s.
        time.sleep(pause)
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(calls):
                call(targets[name].namespace)
    result = {}
    for name, t in targets.items():
        shakes = t.handshakes() - before[name][0] - 1  # this read's own handshake
        made = calls_to(scrape(rest), t.hooks) - before[name][1]
        result[name] = (shakes, made, shakes / made * 1000 if made else float("nan"))
    return result


def _called(call: Callable[[str], None], target: Target, name: str) -> bool:
    try:
        call(target.namespace)
        return True
    except Exception as exc:  # refused while the server comes back: try again
        print(f"  waiting for the API server to call {name}: {exc}", file=sys.stderr)
        return False
