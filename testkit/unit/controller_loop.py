"""What tests/unit/controller/test_loop.py shares with other tests (so that no test module imports another).
That module: The loop against an in-memory API server: writes, their order and count.
"""

from __future__ import annotations

import copy
import threading

from prometheus_client import REGISTRY

from raykueue.controller.config import ControllerConfig
from raykueue.controller.loop import Controller
from raykueue.core import contract as c
from testkit import controller_objects as o
from testkit.controller_world import World

NS = "team-a"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def record(self, obj, type, reason, message, action=None) -> None:
        self.events.append((obj["kind"], obj["metadata"]["name"], reason, message))


def seed(world: World) -> None:
    world.put("resourceflavors", o.flavor(node_labels={"pool": "a100"}))
    world.put("workloadpriorityclasses", o.priority_class("ray-head", 1000))
    world.put("workloadpriorityclasses", o.priority_class("ray-worker", 100))


def controller(world: World, **config) -> tuple[Controller, Recorder]:
    recorder = Recorder()
    config.setdefault("retry_base_seconds", 0.0)
    ctl = Controller(world, ControllerConfig(**config), recorder,  # type: ignore[arg-type]
                     cache_factory=world.cache_factory)
    assert ctl.start(world.version, threading.Event())
    return ctl, recorder


def drain(ctl: Controller, world: World, rounds: int = 10) -> None:
    """Process every queued key, deliver the store to the caches (the watch),
    and repeat until nothing is left."""
    for _ in range(rounds):
        worked = False
        while (key := ctl.queue.get(timeout=0)) is not None:
            ctl.process(key)
            worked = True
        world.deliver()
        if not worked and len(ctl.queue) == 0:
            return


def run_pod(world: World, pod: dict, *, ready: bool = True) -> None:
    """What kube-scheduler and kwok do once the gate is gone."""
    live = copy.deepcopy(world.get_obj("pods", NS, pod["metadata"]["name"]))
    assert live is not None
    assert c.GATE not in [g["name"] for g in live["spec"].get("schedulingGates", [])]
    live["spec"]["nodeName"] = "kwok-node-1"
    live["status"] = o.pod(gated=False, phase="Running", ready=ready)["status"]
    world.put("pods", live)


def counter(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0
