"""The fake API server as the controller's tests see it.

`testkit/fakeapi.FakeApi` serving the resources the controller and `explain`
read and write, with Kueue's group at one version (discovery answers it).
The api tier runs the same scenarios against a real kube-apiserver.
"""

from __future__ import annotations

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube import resources as r
from testkit.fakeapi import FakeApi

_KUEUE_CLUSTER_SCOPED = ("resourceflavors", "workloadpriorityclasses", "clusterqueues")
_KUEUE_NAMESPACED = ("workloads", "localqueues")


class World(FakeApi):
    def __init__(self, version: str = w.V1BETA2) -> None:
        kueue = [r.crd(c.KUEUE_GROUP, version, plural) for plural in _KUEUE_NAMESPACED]
        kueue += [r.crd(c.KUEUE_GROUP, version, plural, namespaced=False)
                  for plural in _KUEUE_CLUSTER_SCOPED]
        super().__init__([r.PODS, *kueue], groups={c.KUEUE_GROUP: [version]})
        self.version = version
