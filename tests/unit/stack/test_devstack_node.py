"""devstack's real node: the pure parts (addresses, configurations) and the guards
that keep its clean-up to the node's own processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devstack.node import ns as node_ns


def test_listing_the_node_s_processes_refuses_the_machine_s_namespace() -> None:
    # Outside the node, "every process in this mount namespace" is every process on
    # the machine: the clean-up must never get that list.
    here = os.readlink("/proc/self/ns/mnt")
    with pytest.raises(RuntimeError, match="refusing"):
        node_ns.namespace_members(here, here)
    with pytest.raises(RuntimeError, match="refusing"):
        node_ns.namespace_members("mnt:[1]", here)  # a namespace this process is not in


@pytest.mark.parametrize("name", ["/", "", "raykueue-node-1", "/kubepods", "/raykueue-node-1/x",
                                  "/raykueue-node-1/../.."])
def test_the_cgroup_root_is_never_a_hierarchy_s_own_root(name: str) -> None:
    with pytest.raises(ValueError):
        node_ns.own_cgroup(Path("/sys/fs/cgroup/memory"), name)


def test_the_cgroup_root_is_one_level_below_the_hierarchy() -> None:
    assert node_ns.own_cgroup(Path("/sys/fs/cgroup/memory"), "/raykueue-node-42") == \
        Path("/sys/fs/cgroup/memory/raykueue-node-42")


class _Stack:
    """The little of devstack.Stack that the node's configuration reads."""

    def __init__(self, root: Path) -> None:
        from devstack.config import StackConfig

        self.dir = root
        self.config = StackConfig(stack_dir=root)
        self.ports = {"kube-apiserver": 6443, "node-apiserver-proxy": 7443}


def test_addresses_are_the_stack_s_own_and_stable(tmp_path: Path) -> None:
    from devstack.node.kubelet import NodeNet

    a, b = NodeNet.of(_Stack(tmp_path / "a")), NodeNet.of(_Stack(tmp_path / "a"))
    assert a == b and 20 <= a.index < 220
    assert (a.host_ip, a.node_ip) == (f"10.213.{a.index}.1", f"10.213.{a.index}.2")
    assert a.pod_cidr == f"10.214.{a.index}.0/24"
    assert len(a.host_if) <= 15 and len(a.node_if) <= 15  # Linux interface names


def test_kubelet_config_allows_cgroup_v1_and_taints_the_node(tmp_path: Path) -> None:
    from devstack.node import kubelet as node

    cfg = node.kubelet_config(_Stack(tmp_path), {"kubelet": 1, "healthz": 2})
    # kubelet 1.36's v1beta1 default is failCgroupV1: true; this machine has cgroup v1.
    assert cfg["failCgroupV1"] is False
    assert "singleProcessOOMKill" not in cfg  # false is rejected on cgroup v1
    assert cfg["registerWithTaints"] == [node.NODE_TAINT]
    assert cfg["cgroupRoot"].startswith("/raykueue-node-")
    assert cfg["oomScoreAdj"] == 0


def test_containerd_and_cni_keep_to_the_node(tmp_path: Path) -> None:
    from devstack.node import kubelet as node

    stack = _Stack(tmp_path)
    toml = node.containerd_config(stack)
    assert "restrict_oom_score_adj = true" in toml
    assert "netns_mounts_under_state_dir = true" in toml
    assert f'sandbox = "{node.PAUSE_IMAGE}"' in toml
    assert str(tmp_path) in toml and "/var/lib/containerd" not in toml
    bridge = node.cni_config(stack)["plugins"][0]
    assert bridge["ipMasq"] is False  # pod traffic is never NATed off the node
    assert bridge["ipam"]["ranges"][0][0]["subnet"] == node.NodeNet.of(stack).pod_cidr
