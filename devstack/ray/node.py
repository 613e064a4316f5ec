"""The `ray start` command lines that stand in for a head pod and a worker pod.

A pod's Ray container carries the command KubeRay generated for it in the env
`KUBERAY_GEN_RAY_START_CMD`; its resource flags (CPUs, memory, ...) are kept,
its fixed ports and cluster address are not: every node here runs on one
machine, on 127.0.0.1, with ports Ray picks or we hand out.

The autoscaler (v2) maps a Ray node to a pod through the raylet's env
`RAY_CLOUD_INSTANCE_ID` (the pod's name) and `RAY_NODE_TYPE_NAME` (its group;
`headgroup` for the head). The label `raykueue.io/pod` says the same to a test
reading `ray.nodes()`.
"""

from __future__ import annotations

import shlex

from .procs import python

POD_LABEL = "raykueue.io/pod"
HEAD_GROUP = "headgroup"
# Ray's default object store is 30% of RAM per node; a handful of nodes fits
# on a small machine only with a small one.
OBJECT_STORE_BYTES = 78643200
# Flags of KubeRay's generated command that describe the node's resources.
_RESOURCE_FLAGS = ("--num-cpus", "--num-gpus", "--memory", "--resources")

# `ray start --address` refuses to start a worker when Ray believes it runs on a
# laptop, which is the belief that keeps its addresses on loopback
# (ray_procs.RAY_ENV). The CLI module alone gets a copy of the constants
# with clusters allowed; the services keep the loopback view.
WORKER_SHIM = """\
import sys, types
from ray._private import ray_constants
import ray.scripts.scripts as scripts
view = types.ModuleType("ray_constants_for_cli")
view.__dict__.update(vars(ray_constants))
view.ENABLE_RAY_CLUSTER = True
scripts.ray_constants = view
sys.argv[0] = "ray"
sys.exit(scripts.main())
"""


def resource_flags(generated_cmd: str) -> list[str]:
    """The resource flags of a KubeRay-generated `ray start` command, as `--flag=value`."""
    out = []
    words = shlex.split(generated_cmd)
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag not in _RESOURCE_FLAGS:
            continue
        if not eq:
            value = words[i + 1] if i + 1 < len(words) else ""
        out.append(f"{flag}={value}")
    return out


def node_env(pod_name: str, group: str) -> dict[str, str]:
    return {"RAY_CLOUD_INSTANCE_ID": pod_name, "RAY_NODE_TYPE_NAME": group,
            "RAY_enable_autoscaler_v2": "1"}


AGENT_PORT_FLAGS = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
                    "--metrics-export-port", "--runtime-env-agent-port")


def _common(temp_dir: str, pod_name: str, agent_ports: list[int], generated_cmd: str) -> list[str]:
    # The agents' ports, chosen here: the listen port is 52365 by default (one per
    # machine, and every node here shares one), and for a port Ray picks itself the
    # raylet waits at most 15 s for the agent to write it to a file, then aborts:
    # too short for a busy small machine.
    return ["--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            # one Python process less per node: it only forwards logs to drivers
            "--include-log-monitor=false",
            *(f"{flag}={port}" for flag, port in zip(AGENT_PORT_FLAGS, agent_ports, strict=True)),
            f"--labels={POD_LABEL}={pod_name}",
            *resource_flags(generated_cmd), "--block"]


def head_argv(gcs_port: int, dashboard_port: int, agent_ports: list[int], temp_dir: str, pod_name: str,
              generated_cmd: str) -> list[str]:
    # --no-monitor: the autoscaler runs as its own process, as in KubeRay's sidecar.
    return [python(), "-m", "ray.scripts.scripts", "start", "--head", f"--port={gcs_port}",
            "--no-monitor", f"--dashboard-port={dashboard_port}", "--dashboard-host=127.0.0.1",
            *_common(temp_dir, pod_name, agent_ports, generated_cmd)]


def worker_argv(gcs_address: str, agent_ports: list[int], temp_dir: str, pod_name: str,
                generated_cmd: str) -> list[str]:
    return [python(), "-c", WORKER_SHIM, "start", f"--address={gcs_address}",
            *_common(temp_dir, pod_name, agent_ports, generated_cmd)]
