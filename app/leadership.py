"""Run the controller on one replica at a time; every replica keeps serving webhooks."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

from app.settings import Settings
from controller.config import ControllerConfig
from kube.events import EventRecorder
from kube.leader import LeaderElector
from kube.rest import Rest

log = logging.getLogger("raykueue.leadership")

# Shown in Events' reportingController; a qualified name, as the API requires.
COMPONENT = "raykueue.io/controller"


def controller_config(settings: Settings) -> ControllerConfig:
    return ControllerConfig(head_first=settings.head_first)


def run_controller(rest: Rest, settings: Settings, stop: threading.Event) -> None:
    from controller.loop import Controller

    recorder = EventRecorder(rest, COMPONENT)
    config = controller_config(settings)

    def lead(lost: threading.Event) -> None:
        Controller(rest, config, recorder).run(lost)

    if not settings.leader_election:
        lead(stop)
        return
    # Hostname alone repeats across restarts of one pod; the suffix makes a
    # restarted process a new candidate rather than the old holder.
    identity = f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    elector = LeaderElector(rest, settings.lease_namespace, settings.lease_name, identity)
    log.info("campaigning for lease %s/%s as %s", settings.lease_namespace, settings.lease_name,
             identity)
    elector.run(lead, stop)
