"""`facts.Source` over plain lists: what the controller's caches would answer
about these pods and Workloads, for tests of the readers of `facts.gather`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from raykueue.controller import decide as d
from raykueue.controller import pods as p
from raykueue.controller.current import names_pod
from raykueue.controller.facts import Facts, gather
from raykueue.core import contract as c
from raykueue.core.objects import Obj
from raykueue.core.podrole import role_of


class ListSource:
    def __init__(self, pods: Iterable[Obj], workloads: Iterable[Obj], *,
                 flavors: Iterable[Obj] = (), priority_values: Mapping[str, int] | None = None
                 ) -> None:
        self.pods = list(pods)
        self.workloads = list(workloads)
        self.flavors = {p.name(x): x for x in flavors}
        self.priority_values = dict(priority_values or {})

    def workloads_of(self, pod: Obj) -> list[Obj]:
        return [x for x in self.workloads if names_pod(x, p.name(pod), p.uid(pod))]

    def heads(self, namespace: str, cluster: str) -> list[Obj]:
        return [x for x in self.pods if p.key(x)[0] == namespace and p.cluster(x) == cluster
                and role_of(x) == c.ROLE_HEAD]

    def flavor(self, name: str) -> Obj | None:
        return self.flavors.get(name)

    def priority_value(self, class_name: str) -> int | None:
        return self.priority_values.get(class_name)


def facts_of(pods: Iterable[Obj], workloads: Iterable[Obj], *, head_first: bool = True,
             priority_values: Mapping[str, int] | None = None) -> Callable[[Obj], Facts]:
    source = ListSource(pods, workloads, priority_values=priority_values)
    return lambda pod: gather(source, pod, d.Context(head_first=head_first))
