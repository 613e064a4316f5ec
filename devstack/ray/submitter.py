"""A RayJob's submitter as the Ray tier runs it: the command KubeRay wrote, on this machine.

In SidecarMode KubeRay adds a container `ray-job-submitter` to the head pod
(ray-operator v1.6.0 rayjob_controller.go getSubmitterContainer): `bash -ce`
with one script that waits for the head's dashboard (`localhost:<dashboard
port>`), then `ray job submit --address http://127.0.0.1:<port> ... -- <the
entrypoint>`, following the job to its end. kwok only pretends to run that
container; the Ray tier runs the script itself once the Ray head standing in
for the pod is up, with every loopback address in it pointed at that head's
dashboard port (the pod's port is the container's; here each head has a
port of its own). Pure functions; the runner spawns the process.
"""

from __future__ import annotations

import re
from typing import Any

SUBMITTER_CONTAINER = "ray-job-submitter"  # KubeRay's utils.SubmitterContainerName
_LOOPBACK = re.compile(r"\b(?:127\.0\.0\.1|localhost):\d+\b")


def sidecar_script(pod: dict[str, Any]) -> str | None:
    """The script of the head pod's submitter container, or None when it has none."""
    for container in pod["spec"].get("containers") or []:
        if container.get("name") == SUBMITTER_CONTAINER:
            # command is `/bin/bash -ce --`; the script is the one argument
            return " ".join(container.get("args") or [])
    return None


def argv(script: str, dashboard_port: int) -> list[str]:
    """`bash -ce` as KubeRay runs it (utils.GetContainerCommand), aimed at the local dashboard."""
    return ["bash", "-ce", "--", _LOOPBACK.sub(f"127.0.0.1:{dashboard_port}", script)]


def ended_statuses(pod: dict[str, Any], exit_code: int, started: str, finished: str) -> list[dict[str, Any]]:
    """The head pod's containerStatuses with the submitter container terminated, as a kubelet
    would write them: KubeRay marks a SidecarMode RayJob Complete only once it reads that
    (rayjob_controller.go getSubmitterContainerFinishedTime), else after a 300 s grace."""
    ended = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                            "startedAt": started, "finishedAt": finished}}
    out = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == SUBMITTER_CONTAINER:
            status = {**status, "ready": False, "started": False, "state": ended}
        out.append(status)
    return out
