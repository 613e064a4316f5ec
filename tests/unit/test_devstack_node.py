"""devstack's real node: the pure parts (addresses, configurations) and the guards
that keep its clean-up to the node's own processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devstack import node_ns


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
