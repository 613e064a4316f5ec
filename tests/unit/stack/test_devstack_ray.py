"""The Ray tier's pure parts: command lines, the autoscaler's env, the loopback check."""

from __future__ import annotations

import subprocess
import sys

import pytest

from devstack.ray import autoscaler as ray_autoscaler
from devstack.ray import node as ray_node
from devstack.ray.procs import off_loopback, session_members

GENERATED = ("ray start  --address=rc-head-svc.ns.svc.cluster.local:6379  --block  "
             "--dashboard-agent-listen-port=52365  --memory=1073741824  --metrics-export-port=8080  "
             "--num-cpus=1 --resources '{\"x\": 1}'")


def test_only_resource_flags_survive_from_kuberays_command():
    assert ray_node.resource_flags(GENERATED) == [
        "--memory=1073741824", "--num-cpus=1", '--resources={"x": 1}']


def test_a_worker_maps_to_its_pod_and_group():
    argv = ray_node.worker_argv("127.0.0.1:1234", [1, 2, 3, 4], "/tmp/n1", "rc-cpu-worker-abc", GENERATED)
    assert "--address=127.0.0.1:1234" in argv and "--node-ip-address=127.0.0.1" in argv
    assert f"--labels={ray_node.POD_LABEL}=rc-cpu-worker-abc" in argv
    assert not any("52365" in a or "8080" in a or "svc.cluster.local" in a for a in argv)
    assert ray_node.node_env("rc-cpu-worker-abc", "cpu")["RAY_CLOUD_INSTANCE_ID"] == "rc-cpu-worker-abc"


def test_the_autoscaler_env_resolves_the_pods_own_fields():
    pod = {"metadata": {"name": "rc-head-x", "namespace": "ns", "labels": {"ray.io/cluster": "rc"}},
           "spec": {"containers": [{"name": "ray-head"}, {"name": "autoscaler", "env": [
               {"name": "RAY_CLUSTER_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ray.io/cluster']"}}},
               {"name": "RAY_CLUSTER_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
               {"name": "RAY_HEAD_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
               {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
               {"name": "RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S", "value": "60"}]}]}}
    assert ray_autoscaler.container_env(pod) == {
        "RAY_CLUSTER_NAME": "rc", "RAY_CLUSTER_NAMESPACE": "ns", "RAY_HEAD_POD_NAME": "rc-head-x",
        "RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S": "60"}
    assert ray_autoscaler.service_account_user("ns", "rc") == "system:serviceaccount:ns:rc"


@pytest.mark.parametrize("address,offending", [("127.0.0.1", False), ("0.0.0.0", True)])
def test_the_loopback_check_sees_a_socket_bound_elsewhere(address, offending):
    code = (f"import socket, sys; s = socket.socket(); s.bind(({address!r}, 0)); s.listen(); "
            "print('up', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        assert session_members([proc.pid]) == [proc.pid]
        assert bool(off_loopback([proc.pid])) is offending
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert session_members([proc.pid]) == []
