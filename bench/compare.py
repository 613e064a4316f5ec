"""raykueue vs Kueue's own pod integration, side by side on one real control plane.

One e2e stack (devstack) with the real Kueue manager as shipped (its webhooks and pod
integration on in every namespace; with RAYKUEUE_KUEUE=minimal, limited to namespaces
labelled bench.raykueue.io/system=kueue); raykueue (`raykueue serve`,
webhooks + controller) serves namespaces labelled ...=raykueue; the ceiling
webhook (bench/ceiling.py: raykueue's decision, no framework, registered as
raykueue's pod webhook is) serves ...=ceiling; a fourth namespace has no webhook
of ours. Every system gets the same pod: the KubeRay worker pod recorded in
testkit/fixtures (no owner reference, requests shrunk to 100m/128Mi, queue label
`bench`); raykueue's and the ceiling's also carry `kueue.x-k8s.io/standalone: "true"`
and raykueue's controller runs with RAYKUEUE_HEAD_FIRST=false (there is no head pod).

1. Pod-create latency: rounds in which each system in turn (the order rotates)
   gets its creates, timed around the POST, and what the API server measured over
   that turn (bench/apiview.py): its webhook's calls and the whole pod POST. With
   --variant RAYKUEUE_X=V raykueue takes a second turn per round, restarted with that
   setting, so a setting's effect is measured side by side in one run.
2. Keep-alive: TLS handshakes per 1,000 webhook calls for raykueue and the
   ceiling, with quiet pauses between bursts, under uvicorn's old 5 s keep-alive
   and under the default (RAYKUEUE_KEEP_ALIVE_SECONDS).
3. API writes per pod lifecycle (create, admit, run on a kwok node, delete, until
   the Workload is gone), from apiserver_request_total by verb and resource. The
   counters are cluster-wide, so systems take turns, never overlap, rotate order.
   With --lifecycle-variant RAYKUEUE_X=V raykueue takes a second turn per round,
   restarted with that setting, and both are set beside Kueue's in the same run.

    python bench/compare.py [--creates 40] [--rounds 5] [--keep-alive-rounds 4]
                            [--keep-alive-calls 25] [--pause 7] [--lifecycle-pods 50]
                            [--lifecycle-rounds 3] [--no-pods-ready]
                            [--raykueue-env RAYKUEUE_X=V] [--variant RAYKUEUE_X=V]
                            [--lifecycle-variant RAYKUEUE_X=V]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import _repo  # noqa: F401 - the checkout on sys.path

import devstack
from bench import apiview
from bench.ceiling_hook import CEILING_HOOK, POD_HOOK
from bench.common import (
    KUEUE_NAMESPACES,
    SYSTEM_LABEL,
    WORKLOADS,
    Key,
    add_namespace,
    bench_config,
    dry_run_gates,
    dry_run_pod,
    events_by_source,
    gates,
    label,
    lifecycle_writes,
    make_queue,
    percentile,
    raykueue_writes,
    request_totals,
    spread,
    start_raykueue,
    worker_pod,
)
from bench.kueue_pods import (
    register_kueue_pod_webhooks,
    unregister_kueue_pod_webhooks,
)
from raykueue.app.settings import Settings
from raykueue.core import contract as c
from raykueue.kube.client import load_api_client
from raykueue.kube.resources import PODS
from raykueue.kube.rest import ApiError, Rest
from testkit.histograms import EMPTY
from testkit.interrupt import interruptible
from testkit.servers import RaykueueServer
from testkit.waiting import wait_for

SYSTEMS = ("none", "raykueue", "kueue", "ceiling")
WRITE_SYSTEMS = ("none", "raykueue", "kueue")  # the ceiling decides, nothing runs its pods
# raykueue again, restarted with the --variant settings for its turns (same namespace).
VARIANT = "raykueue-variant"
EXPECTED_GATE = {"none": None, "raykueue": c.GATE, "kueue": c.KUEUE_POD_GATE, "ceiling": c.GATE,
                 VARIANT: c.GATE}
OPTED_IN = ("raykueue", "ceiling", VARIANT)
RAYKUEUE_TURNS = ("raykueue", VARIANT)
CEILING_NAMESPACES = {"matchLabels": {SYSTEM_LABEL: "ceiling"}}


def create(rest: Rest, ns: str, system: str) -> tuple[str, float]:
    """Create one pod; (name, seconds the POST took). Checks the webhook did its part."""
    pod = worker_pod(ns, opt_in=system in OPTED_IN)
    if system == "none":
        # The baseline no system takes: Kueue as shipped would take a pod with a queue
        # label in any namespace its webhooks serve (the webhook is still called).
        del pod["metadata"]["labels"][c.QUEUE_LABEL]
    t = time.perf_counter()
    created = rest.create(PODS.path(ns), pod)
    took = time.perf_counter() - t
    want = EXPECTED_GATE[system]
    if (want is None and gates(created)) or (want and want not in gates(created)):
        raise RuntimeError(f"{system}: pod created with gates {gates(created)}, expected {want}")
    return created["metadata"]["name"], took


def pods_in(rest: Rest, ns: str) -> list[dict]:
    return rest.get(PODS.path(ns))["items"]


def workloads_in(rest: Rest, ns: str) -> list[dict]:
    return rest.get(WORKLOADS.path(ns))["items"]


def delete_all(rest: Rest, ns: str, names: list[str], timeout: float) -> None:
    for name in names:
        try:
            rest.delete(PODS.path(ns, name))
        except ApiError as e:
            if not e.is_not_found:
                raise
    wait_for(lambda: not pods_in(rest, ns) and not workloads_in(rest, ns), timeout=timeout,
             interval=0.5, message=lambda: f"pods and Workloads in {ns} to be gone "
             f"({len(pods_in(rest, ns))} pods, {len(workloads_in(rest, ns))} Workloads left)")


def switch_to(stack: devstack.Stack, server: RaykueueServer, env: dict[str, str], ns: str) -> None:
    """Restart raykueue's server with `env` unless it already runs with it."""
    if server.extra_env == env:
        return
    server.restart(env)
    wait_for(lambda: c.GATE in dry_run_gates(stack, ns, opt_in=True), timeout=60,
             message="the API server to call the restarted raykueue")


def latency(stack: devstack.Stack, rest: Rest, ns: dict[str, str], creates: int, rounds: int,
            shipped: bool, server: RaykueueServer, variant: dict[str, str]) -> None:
    """With `variant`, raykueue takes a second turn per round restarted with those settings
    (and the first one restarted without them): the two are measured side by side."""
    systems = SYSTEMS + ((VARIANT,) if variant else ())
    print(f"\n## 1. pod-create latency: {creates} creates per system per round, {rounds} rounds, "
          f"each system's creates in one turn (order rotates), the API server's histograms "
          f"diffed around each turn")
    if variant:
        print(f"{VARIANT}: raykueue's server restarted with {variant} for its turn")
    hooks = {"none": apiview.KUEUE_POD_HOOK if shipped else None, "raykueue": POD_HOOK,
             "kueue": apiview.KUEUE_POD_HOOK, "ceiling": CEILING_HOOK,
             VARIANT: POD_HOOK}
    namespace = {**ns, VARIANT: ns["raykueue"]}
    envs = {"raykueue": dict(server.extra_env), VARIANT: {**server.extra_env, **variant}}
    took: dict[str, list[float]] = {s: [] for s in systems}
    medians: dict[str, list[float]] = {s: [] for s in systems}
    views: dict[str, list[apiview.View]] = {s: [] for s in systems}
    handler = {s: EMPTY for s in RAYKUEUE_TURNS}
    for r in range(rounds):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        for system in order:
            if system in RAYKUEUE_TURNS:
                switch_to(stack, server, envs[system], ns["raykueue"])
            made, this = [], []
            before = apiview.scrape(rest)
            handler_before = apiview.handler_time(server) if system in RAYKUEUE_TURNS else None
            for _ in range(creates):
                name, seconds = create(rest, namespace[system], system)
                made.append(name)
                this.append(seconds * 1e3)
            views[system].append(apiview.phase_view(before, apiview.scrape(rest), hooks[system]))
            if handler_before is not None:
                handler[system] = handler[system] + (apiview.handler_time(server) - handler_before)
            took[system] += this
            medians[system].append(statistics.median(this))
            delete_all(rest, namespace[system], made, timeout=120 + creates * 2)
        print(f"  round {r + 1} (order {', '.join(order)}): " + ", ".join(
            f"{s} p50 {medians[s][-1]:.1f} ms, webhook p50 "
            f"{views[s][-1].webhook.quantile(0.5) * 1e3:.1f} ms" for s in systems))
    switch_to(stack, server, envs["raykueue"], ns["raykueue"])
    print("As the bench client timed the POST:")
    print("| system | creates | p50 ms | p99 ms | added over no webhook, p50 | round p50s (spread) |")
    print("|---|---|---|---|---|---|")
    base = statistics.median(took["none"])
    for system in systems:
        p50 = statistics.median(took[system])
        print(f"| {system} | {len(took[system])} | {p50:.1f} | {percentile(took[system], 0.99):.1f} | "
              f"{p50 - base:+.1f} ms | {spread(medians[system])} |")
    added = {s: [m - b for m, b in zip(medians[s], medians["none"], strict=True)]
             for s in ("raykueue", "kueue")}
    ratios = [rk / kq for rk, kq in zip(added["raykueue"], added["kueue"], strict=True) if kq > 0]
    if ratios:
        print(f"raykueue's added p50 / Kueue's added p50, per round: "
              f"{', '.join(f'{x:.2f}' for x in ratios)}; median {statistics.median(ratios):.2f}")
    total = {s: sum(views[s][1:], views[s][0]) for s in systems}
    print("As the API server measured it (apiserver_admission_webhook_admission_duration_seconds "
          "for the system's webhook, CREATE; apiserver_request_duration_seconds for POST pods; "
          "quantiles interpolated in buckets as histogram_quantile does):")
    for row in apiview.view_table(total, hooks):
        print(row)
    cl = total["ceiling"]
    for ours in (s for s in systems if s in RAYKUEUE_TURNS):
        rk = total[ours]
        for what, a, b in (("webhook", rk.webhook, cl.webhook), ("create", rk.create, cl.create)):
            print(f"{ours} - ceiling, {what}: p50 {apiview.gap(a.quantile(0.5), b.quantile(0.5))}, "
                  f"p99 {apiview.gap(a.quantile(0.99), b.quantile(0.99))} (goal: within 10%)")
        h = handler[ours]
        print(f"{ours}'s own handler time for the same calls ({apiview.HANDLER_DURATION}, "
              f"{h.count:.0f} reviews): p50 {h.quantile(0.5) * 1e3:.2f} ms, "
              f"p99 {h.quantile(0.99) * 1e3:.2f} ms; the rest of the API server's figure is "
              f"connection, TLS, HTTP and the wait for a busy CPU")
        per_round = [a.webhook.quantile(0.5) / b.webhook.quantile(0.5)
                     for a, b in zip(views[ours], views["ceiling"], strict=True)]
        print(f"{ours} / ceiling webhook p50, per round: " + ", ".join(f"{x:.2f}" for x in per_round))


def keep_alive(stack: devstack.Stack, rest: Rest, ns: dict[str, str], server: RaykueueServer,
               ceiling: apiview.Ceiling, rounds: int, calls: int, pause: float) -> None:
    default = Settings().keep_alive_seconds
    print(f"\n## 2. keep-alive: TLS handshakes per 1,000 webhook calls, {rounds} rounds of "
          f"{calls} dry-run creates per server each after {pause:.0f} s of quiet")

    def call(namespace: str) -> None:
        got = dry_run_gates(stack, namespace, opt_in=True)
        if c.GATE not in got:
            raise RuntimeError(f"dry-run create in {namespace} not gated by the webhook: {got}")

    targets = {
        "raykueue": apiview.Target(apiview.raykueue_hooks(),
                                   lambda: server.metric_total(apiview.HANDSHAKES),
                                   lambda k: apiview.restart_raykueue(server, k), ns["raykueue"]),
        "ceiling": apiview.Target(frozenset({CEILING_HOOK}), ceiling.handshakes,
                                  lambda k: (ceiling.stop(), ceiling.start(k)), ns["ceiling"]),
    }
    print("| keep-alive | " + " | ".join(f"{n} handshakes / calls | {n} per 1,000" for n in targets)
          + " |")
    print("|---|" + "---|---|" * len(targets))
    for title, setting in (("5 s (uvicorn's own default, as before)", 5),
                           (f"{default} s (RAYKUEUE_KEEP_ALIVE_SECONDS default)", None)):
        got = apiview.handshakes_per_1000(rest, targets, call, rounds, calls, pause, setting)
        print(f"| {title} | " + " | ".join(f"{h:.0f} / {n:.0f} | {k:.1f}" for h, n, k in got.values())
              + " |")


class Phase:
    """What one lifecycle phase measured."""

    def __init__(self, writes: Counter[Key], to_running: float, events: Counter[tuple[str, str]],
                 own: Counter[str]) -> None:
        self.writes, self.to_running, self.events, self.own = writes, to_running, events, own


def lifecycle(rest: Rest, ns: str, system: str, n: int, server: RaykueueServer,
              pods_ready: bool = True) -> Phase:
    """n pods through create, admission, Running, deletion, until their Workloads are gone."""
    events_before = events_by_source(rest, ns)
    own_before = raykueue_writes(server)
    before = request_totals(rest)
    t0 = time.monotonic()
    names = [create(rest, ns, system)[0] for _ in range(n)]

    def running() -> bool:
        pods = pods_in(rest, ns)
        return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)

    wait_for(running, timeout=120 + n * 3, interval=0.5,
             message=lambda: f"{n} {system} pods Running in {ns}")
    to_running = time.monotonic() - t0
    # Running already implies admitted; PodsReady is the integration's last write.
    if system == "kueue" or (system in RAYKUEUE_TURNS and pods_ready):
        wait_for(lambda: sum(1 for wl in workloads_in(rest, ns) if any(
            cd["type"] == "PodsReady" and cd["status"] == "True"
            for cd in (wl.get("status") or {}).get("conditions", []))) == n,
            timeout=120 + n * 3, interval=0.5, message=f"PodsReady on {n} {system} Workloads")
    delete_all(rest, ns, names, timeout=120 + n * 3)
    # Wait until the trailing writes (events, queue status) have landed: no change for 3s.
    last = {"writes": Counter(), "since": time.monotonic()}

    def quiet() -> bool:
        now = lifecycle_writes(before, request_totals(rest))
        if now != last["writes"]:
            last.update(writes=now, since=time.monotonic())
        return time.monotonic() - last["since"] >= 3

    wait_for(quiet, timeout=90, interval=1, message="the write counters to settle")
    writes = lifecycle_writes(before, request_totals(rest))
    # The bench's own writes are the same for every system.
    writes[("POST", "pods", "")] -= n
    writes[("DELETE", "pods", "")] -= n
    events = events_by_source(rest, ns)
    events.subtract(events_before)
    own = raykueue_writes(server)
    own.subtract(own_before)
    return Phase(+writes, to_running, +events, +own)


def writes_table(stack: devstack.Stack, rest: Rest, ns: dict[str, str], n: int, rounds: int,
                 server: RaykueueServer, pods_ready: bool = True,
                 variant: dict[str, str] | None = None) -> None:
    """With `variant`, raykueue takes a second turn per round restarted with those settings
    (and the first one restarted without them), in the same namespace."""
    systems = WRITE_SYSTEMS + ((VARIANT,) if variant else ())
    ours = [s for s in systems if s in RAYKUEUE_TURNS]
    namespace = {**ns, VARIANT: ns["raykueue"]}
    envs = {"raykueue": dict(server.extra_env), VARIANT: {**server.extra_env, **(variant or {})}}
    print(f"\n## 3. API writes per pod lifecycle: {n} pods per system per round, {rounds} rounds, "
          f"systems one after another (order rotates)")
    if variant:
        print(f"{VARIANT}: raykueue's server restarted with {variant} for its turn")
    per_round: dict[str, list[Counter[Key]]] = {s: [] for s in systems}
    phases: dict[str, list[Phase]] = {s: [] for s in systems}
    for r in range(rounds):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        for system in order:
            if system in RAYKUEUE_TURNS:
                switch_to(stack, server, envs[system], ns["raykueue"])
            phase = lifecycle(rest, namespace[system], system, n, server, pods_ready)
            per_round[system].append(phase.writes)
            phases[system].append(phase)
            print(f"  round {r + 1} {system:8s}: {sum(phase.writes.values()) / n:5.2f} writes/pod, "
                  f"{n} pods Running {phase.to_running:.1f}s after the first create")
    if variant:
        switch_to(stack, server, envs["raykueue"], ns["raykueue"])
    keys = sorted({k for rounds_ in per_round.values() for w in rounds_ for k in w})
    print("| verb resource | " + " | ".join(systems) + " |")
    print("|---|" + "---|" * len(systems))
    for key in keys:
        cells = [statistics.median(w.get(key, 0) for w in per_round[s]) / n for s in systems]
        print(f"| {label(key)} | " + " | ".join(f"{x:.2f}" for x in cells) + " |")
    totals = {s: [sum(w.values()) / n for w in per_round[s]] for s in systems}
    print("| **total per pod** | " + " | ".join(
        f"**{statistics.median(totals[s]):.2f}**" for s in systems) + " |")
    print("(the bench's own create and delete are left out; writes every system shares, such as "
          "the scheduler's binding and kwok's status, are in)")
    print("Events per pod by reporting component and reason (median over rounds):")
    for system in systems:
        keys_ = sorted({k for p in phases[system] for k in p.events})
        medians = {k: statistics.median(p.events.get(k, 0) for p in phases[system]) / n for k in keys_}
        print(f"  {system}: " + ", ".join(f"{src} {reason} {x:.2f}" for (src, reason), x in medians.items()))
    for system in ours:
        own = sorted({k for p in phases[system] for k in p.own})
        print(f"{system}'s own writes per pod (its raykueue_api_writes_total): " + ", ".join(
            f"{k} {statistics.median(p.own.get(k, 0) for p in phases[system]) / n:.2f}"
            for k in own))
    added = {s: [t - b for t, b in zip(totals[s], totals["none"], strict=True)]
             for s in (*ours, "kueue")}
    for system in systems:
        print(f"{system} total per round: {', '.join(f'{x:.2f}' for x in totals[system])}")
    for system in ours:
        ratios = [rk / kq for rk, kq in zip(added[system], added["kueue"], strict=True) if kq > 0]
        print(f"writes added over no webhook: {system} {statistics.median(added[system]):.2f}, "
              f"kueue {statistics.median(added['kueue']):.2f} per pod; {system} / kueue per round "
              f"{', '.join(f'{x:.2f}' for x in ratios)}, median "
              f"{statistics.median(ratios) if ratios else float('nan'):.2f} (goal: at most 0.50)")


def same_decision(stack: devstack.Stack, ns: dict[str, str]) -> None:
    """The ceiling must change the bench pod as raykueue does (dry-run in both namespaces)."""
    def changed(system: str) -> tuple:
        pod = dry_run_pod(stack, ns[system], opt_in=True)
        meta = pod["metadata"]
        return (gates(pod), meta.get("labels"), meta.get("annotations"),
                pod["spec"].get("priorityClassName"))

    ours, ceiling = changed("raykueue"), changed("ceiling")
    if ours != ceiling:
        raise RuntimeError(f"the ceiling decides differently from raykueue:\n{ours}\n{ceiling}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep-alive-rounds", type=int, default=4,
                        help="0 leaves the keep-alive section out")
    parser.add_argument("--keep-alive-calls", type=int, default=25)
    parser.add_argument("--pause", type=float, default=7.0,
                        help="seconds of quiet between keep-alive rounds (uvicorn's own keep-alive is 5)")
    parser.add_argument("--no-controller", action="store_true",
                        help="raykueue serves its webhooks only (RAYKUEUE_CONTROLLER=false), to "
                             "split the webhook's latency from the controller's load; latency "
                             "and keep-alive only")
    parser.add_argument("--raykueue-env", action="append", default=[], metavar="RAYKUEUE_X=V",
                        help="a setting for raykueue's server in this run (repeatable), e.g. "
                             "RAYKUEUE_SWITCH_INTERVAL_MS=1")
    parser.add_argument("--variant", action="append", default=[], metavar="RAYKUEUE_X=V",
                        help="latency only: raykueue also takes a turn per round restarted with "
                             "this setting (repeatable), measured beside the one without")
    parser.add_argument("--lifecycle-variant", action="append", default=[], metavar="RAYKUEUE_X=V",
                        help="writes only: raykueue also takes a lifecycle turn per round "
                             "restarted with this setting (repeatable), measured beside the "
                             "one without, e.g. RAYKUEUE_COLLECTOR_GRACE_SECONDS=0")
    parser.add_argument("--lifecycle-pods", type=int, default=50)
    parser.add_argument("--lifecycle-rounds", type=int, default=3,
                        help="0 leaves the writes section out")
    parser.add_argument("--keep-stack", action="store_true", help="leave a stack this run started")
    parser.add_argument("--no-pods-ready", action="store_true",
                        help="run raykueue with RAYKUEUE_PODS_READY=false (valid only where "
                             "Kueue's waitForPodsReady is off; as shipped it is on)")
    args = parser.parse_args()

    config = bench_config()
    # A user of the stack (our pid) until the release below: a stack of a test session
    # stays the session's; one this run starts goes with the release (kept with --keep-stack).
    stack, started = devstack.up("e2e", config, user_pid=os.getpid(), by_hand=args.keep_stack)
    api = load_api_client(str(stack.kubeconfig))
    assert api is not None
    rest = Rest(api)
    make_queue(rest, "bench", cpu="2000", memory="4000Gi")
    shipped = config.kueue_mode == "shipped"
    if not shipped:  # minimal: Kueue's pod webhooks registered for "kueue" namespaces only
        register_kueue_pod_webhooks(stack, KUEUE_NAMESPACES)
    ns = {s: add_namespace(rest, f"bench-{s}", None if s == "none" else s, "bench") for s in SYSTEMS}
    # The bench pods have no head: raykueue's head-first rule would hold every worker.
    env = {"RAYKUEUE_HEAD_FIRST": "false"}
    if args.no_pods_ready:
        env["RAYKUEUE_PODS_READY"] = "false"
    if args.no_controller:
        if args.lifecycle_rounds:
            parser.error("--no-controller needs --lifecycle-rounds 0 (nothing would admit the pods)")
        env["RAYKUEUE_CONTROLLER"] = "false"
    def settings(given: list[str]) -> dict[str, str]:
        out = {}
        for setting in given:
            name, sep, value = setting.partition("=")
            if not sep or not name.startswith("RAYKUEUE_"):
                parser.error(f"settings take RAYKUEUE_<NAME>=<value>, not {setting!r}")
            out[name] = value
        return out

    env.update(settings(args.raykueue_env))
    variant = settings(args.variant)
    lifecycle_variant = settings(args.lifecycle_variant)
    workdir = Path(tempfile.mkdtemp(prefix="raykueue-bench-"))
    server = start_raykueue(stack, workdir, ns["raykueue"], env=env)
    ceiling = apiview.Ceiling(stack, workdir, CEILING_NAMESPACES)
    try:
        ceiling.start()
        wait_for(lambda: c.GATE in dry_run_gates(stack, ns["ceiling"], opt_in=True), timeout=60,
                 message=f"the API server to call the ceiling at {ceiling.url}")
        same_decision(stack, ns)
        wait_for(lambda: c.KUEUE_POD_GATE in dry_run_gates(stack, ns["kueue"], opt_in=False),
                 timeout=60, message="the API server to call Kueue's pod webhook")
        # raykueue serves only its namespace; as shipped Kueue serves every one (its pods
        # there carry no queue label, see `create`), minimal not even that.
        none_gates = dry_run_gates(stack, ns["none"], opt_in=True)
        assert c.GATE not in none_gates and (shipped or not none_gates), "raykueue in the plain namespace"
        print(f"stack {'started' if started else 'reused'} at {stack.dir} (Kueue {config.kueue_mode}); "
              f"namespaces {ns}; "
              f"raykueue at {server.url} with {env}, Kueue's pod webhook on port "
              f"{stack.procs['kueue'].ports['webhook']}")
        print(f"the ceiling webhook at {ceiling.url} (bench/ceiling.py), registered as "
              f"{CEILING_HOOK} for namespace {ns['ceiling']}")
        latency(stack, rest, ns, args.creates, args.rounds, shipped, server, variant)
        if args.keep_alive_rounds:
            keep_alive(stack, rest, ns, server, ceiling, args.keep_alive_rounds,
                       args.keep_alive_calls, args.pause)
        if args.lifecycle_rounds:
            writes_table(stack, rest, ns, args.lifecycle_pods, args.lifecycle_rounds, server,
                         pods_ready=not args.no_pods_ready, variant=lifecycle_variant)
    finally:
        ceiling.close()
        server.close()
        if not shipped:
            unregister_kueue_pod_webhooks(stack)
        for name in ns.values():
            rest.delete(f"/api/v1/namespaces/{name}")
        devstack.release(config, os.getpid())
    return 0


if __name__ == "__main__":
    interruptible()
    sys.exit(main())
