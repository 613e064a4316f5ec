"""The order of things: components and steps by what they need, started in waves.

A wave is everything whose needs are met by the waves before it. `bring_up`
starts a wave's processes, runs its steps (work that is not a process, like
installing the CRDs) while they boot, then waits for all of them at once.
Stopping goes the other way: dependents before what they depend on.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .components import COMPONENTS
from .config import TIERS
from .controlplane.kubeapi import KubeError
from .controlplane.objects import apply_objects, base_objects, crds_established
from .node import kubelet as node
from .procs import StackError
from .stackview import Log

if TYPE_CHECKING:
    from .handle import Stack


@dataclass(frozen=True)
class Step:
    name: str
    tier: str
    needs: tuple[str, ...]
    run: Callable[[Stack, Log], None]


def _objects(stack: Stack, log: Log) -> None:
    t = time.monotonic()
    names = stack.install_crds()
    stack.wait_ready("kube-apiserver", lambda: crds_established(stack.api, names))
    if stack.tier not in TIERS:
        # Only on a new stack: a reused one keeps the samples it was started with
        # (and whatever tests or people changed since).
        apply_objects(stack.api, base_objects(stack.config))
    log(f"{len(names)} CRDs established, sample objects in place ({time.monotonic() - t:.1f}s)")


STEPS: dict[str, Step] = {s.name: s for s in (
    Step("objects", "api", ("kube-apiserver",), _objects),
    # The pause image and raykueue's own (scripts/build-image), into the node's containerd.
    Step("node-images", "node", ("containerd",), node.import_images),
)}


def _in_tier(item_tier: str, tier: str) -> bool:
    return TIERS.index(item_tier) <= TIERS.index(tier)


def components_for(tier: str) -> list[str]:
    return [n for n, c in COMPONENTS.items() if _in_tier(c.tier, tier)]


def waves(tier: str) -> list[list[str]]:
    """Components and steps of `tier`, grouped so each group needs only earlier ones."""
    needs = {n: c.needs for n, c in COMPONENTS.items() if _in_tier(c.tier, tier)}
    needs.update({n: s.needs for n, s in STEPS.items() if _in_tier(s.tier, tier)})
    done: set[str] = set()
    out = []
    while len(done) < len(needs):
        wave = [n for n, deps in needs.items() if n not in done and set(deps) <= done]
        if not wave:
            raise ValueError(f"dependency cycle or unknown need among {sorted(set(needs) - done)}")
        out.append(wave)
        done.update(wave)
    return out


def start_order(tier: str = TIERS[-1]) -> list[str]:
    return [n for wave in waves(tier) for n in wave if n in COMPONENTS]


def stop_order(names: list[str]) -> list[str]:
    """`names` with dependents first; names no declaration knows go first of all."""
    known = [n for n in reversed(start_order()) if n in names]
    return [n for n in names if n not in known] + known


def bring_up(stack: Stack, tier: str, log: Log) -> None:
    """Start what `tier` needs and is not running; raise StackError naming every failure.

    A fatal component's failure raises at once; the others are collected and
    what needs them is not started.
    """
    failures: dict[str, str] = {}
    for wave in waves(tier):
        t = time.monotonic()
        waiting = []
        for name in (n for n in wave if n in COMPONENTS):
            blocked = [n for n in COMPONENTS[name].needs if n in failures]
            if blocked:
                failures[name] = f"{name}: not started, it needs {', '.join(blocked)}"
                continue
            try:
                if stack.ensure_started(name, log):
                    waiting.append(name)
            except StackError as e:
                if COMPONENTS[name].fatal:
                    raise
                failures[name] = str(e)
        for name in (n for n in wave if n in STEPS):
            STEPS[name].run(stack, log)
        failures.update(_wait_all(stack, waiting, log, t))
    if not failures:
        if stack.tier not in TIERS or TIERS.index(tier) > TIERS.index(stack.tier):
            stack.record(tier=tier)
    elif stack.tier is None:
        stack.record(tier="partial")  # `up` again retries what failed
    if failures:
        raise StackError(
            f"{len(failures)} component(s) failed to start ({', '.join(failures)}); logs in "
            f"{stack.log_dir}\n\n" + "\n\n".join(failures.values())
        )


def _wait_all(stack: Stack, names: list[str], log: Log, t0: float) -> dict[str, str]:
    """Wait for `names` together; return {name: why} for those that failed."""
    failures: dict[str, str] = {}
    with cf.ThreadPoolExecutor(max_workers=len(names) or 1) as pool:
        futures = {pool.submit(stack.wait_ready, n, lambda n=n: COMPONENTS[n].ready(stack)): n
                   for n in names}
        for fut in cf.as_completed(futures):
            name = futures[fut]
            try:
                fut.result()
                log(f"{name} ready ({time.monotonic() - t0:.1f}s)")
            except StackError as e:
                if COMPONENTS[name].fatal:
                    raise
                failures[name] = str(e)
            except KubeError as e:
                failures[name] = f"{name}: {e}"
    return failures
