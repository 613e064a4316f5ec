"""What tests/api/test_admission_api.py shares with other tests (so that no test module imports another).
That module: The admission webhooks as the real kube-apiserver calls them.
"""

from __future__ import annotations

import json
from typing import Any

from raykueue.core import contract as c
from testkit import reviews as rv
from testkit.servers import RaykueueServer


def ray_pod(namespace: str, role: str = "worker", **meta: Any) -> dict[str, Any]:
    """A pod as KubeRay builds it (from the fixture review), minus what the server fills in."""
    pod = rv.creatable_pod(role)
    metadata = pod["metadata"]
    metadata["namespace"] = namespace
    metadata["generateName"] = f"rc-{role}-"
    for key, value in meta.get("labels", {}).items():
        metadata["labels"][key] = value
    metadata.setdefault("annotations", {}).update(meta.get("annotations", {}))
    if "owner" in meta:
        metadata["ownerReferences"] = [meta["owner"]]
    return pod


def opted_in_pod(namespace: str, role: str = "worker", queue: str = "team-a") -> dict[str, Any]:
    return ray_pod(namespace, role, labels={c.QUEUE_LABEL: queue},
                   annotations={c.STANDALONE_ANNOTATION: "true"})


def create(kubectl, pod: dict[str, Any], *extra: str):
    return kubectl("create", "-o", "json", *extra, "-f", "-", input=json.dumps(pod))


def start_server(stack, tmp_path_factory, **options) -> RaykueueServer:
    """One server per module: re-registering per test races the API server's webhook cache."""
    workdir = tmp_path_factory.mktemp("raykueue-server")
    # Admission alone: the controller has tests of its own.
    return RaykueueServer(stack, workdir, args=["--no-controller"], **options).start()
