"""What the controller keeps between passes, behind one lock.

- Indexes over the caches: Workloads by the key whose pass handles them
  (`owner_key`: a pod, a namespace's orphans, a gang), a Ray cluster's pods
  and heads. Fed by the watch events; a restart rebuilds them from the lists.
- Departed pods: the last state of pods gone from the cache, until the pass
  over their key has used it (it tells a deleted pod from a relabelled one).
- The read-your-writes overlay: what our own writes returned, read in place
  of the cache until the watch delivers them (or something newer), so a pass
  triggered meanwhile does not repeat a write nor decide on the state before it.
- Gang pods released under their base, until they are seen to go: a gang's
  pass counts them in their slots even where its snapshot is behind them.
- What was already said: Events sent per pod, conflicts per pod, when an
  admission was seen live.

Nothing here is needed for correctness after a restart: the API server holds
every fact; this only saves reads and repeated writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Literal, TypeVar

from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.keys import GangKey, OrphansKey, PodKey, QueueKey, Ref
from raykueue.core import contract as c
from raykueue.core.objects import Obj, labels, metadata
from raykueue.core.podrole import role_of
from raykueue.kube.cache import DELETED

Kind = Literal["pod", "workload"]
_K = TypeVar("_K", bound=Hashable)


def owner_key(wl: Obj) -> QueueKey | None:
    """The key whose pass handles this Workload; None if it is not ours to handle."""
    ns = str(metadata(wl).get("namespace") or "")
    owner = w.owner_pod(wl)
    if owner is not None:
        return PodKey(ns, owner[0])
    if not w.is_ours(wl):
        return None
    gang = labels(wl).get(c.GANG_LABEL)
    # A gang's base is owned by the RayCluster and handled by the cluster's pass.
    return GangKey(ns, gang) if gang else OrphansKey(ns)


def _index(index: dict[_K, set[str]], key: _K, name: str, present: bool) -> None:
    if present:
        index.setdefault(key, set()).add(name)
        return
    names = index.get(key)
    if names is not None:
        names.discard(name)
        if not names:
            del index[key]


def _supersedes(seen: Obj, pre_rv: str | None, after: Obj) -> bool:
    """Whether `seen` (from the cache) is at least as new as our write's result.

    Not merely other than the version our write replaced: a write of someone
    else's that landed between our read and our write (the scheduler's
    SchedulingGated condition before our gate lift) reaches the watch before
    ours, and dropping our result for it would read the pod as still gated.
    resourceVersions are etcd revisions, so where both are numbers the order is
    theirs; a result we made up (a delete's, at the version it replaced) or an
    opaque version falls back to "the cache moved past the version we replaced".
    """
    current = metadata(seen).get("resourceVersion")
    written = metadata(after).get("resourceVersion")
    try:
        if written != pre_rv and current is not None and written is not None:
            return int(current) >= int(written)
    except (TypeError, ValueError):
        pass
    return current != pre_rv


class State:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wl_by_owner: dict[QueueKey, set[str]] = {}
        self._cluster_pods: dict[Ref, set[str]] = {}  # (ns, cluster) -> pod names
        self._cluster_heads: dict[Ref, set[str]] = {}  # (ns, cluster) -> head pod names
        self._admitted_seen: dict[str, float] = {}  # Workload uid -> when we saw Admitted
        self._departed: dict[Ref, Obj] = {}
        self._departed_at: dict[Ref, float] = {}  # when the watch said the pod went
        # (kind, ns, name) -> (resourceVersion our write replaced, what it returned)
        self._written: dict[tuple[Kind, str, str], tuple[str | None, Obj]] = {}
        self._reported: dict[str, set[tuple[str, str]]] = {}  # pod uid -> events sent
        self._gang_released: dict[Ref, dict[str, str]] = {}  # (ns, gang) -> pod uid -> group
        self._conflicts: dict[str, tuple[str, str]] = {}  # "ns/pod" -> (kind, message)

    # --- fed by the watches -------------------------------------------------------

    def pod_event(self, event: str, pod: Obj, now: float | None = None) -> None:
        """`now`: when the event arrived; a departed pod's Workload is left to the
        garbage collector for a grace counted from it (`release.collected`)."""
        key = p.key(pod)
        cluster = p.cluster(pod)
        present = event != DELETED
        with self._lock:
            self._drop_written("pod", key, pod, gone=not present)
            gang = labels(pod).get(c.GANG_LABEL)
            if gang and (not present or p.is_deleting(pod) or p.is_terminal(pod)):
                released = self._gang_released.get((key[0], gang))
                if released is not None:
                    released.pop(p.uid(pod), None)
                    if not released:
                        del self._gang_released[(key[0], gang)]
            if cluster:
                _index(self._cluster_pods, (key[0], cluster), key[1], present)
                _index(self._cluster_heads, (key[0], cluster), key[1],
                       present and role_of(pod) == c.ROLE_HEAD)
            if present:
                self._departed.pop(key, None)
                self._departed_at.pop(key, None)
            else:
                self._departed[key] = pod
                if now is None:
                    self._departed_at.pop(key, None)
                else:
                    self._departed_at[key] = now

    def workload_event(self, event: str, wl: Obj, key: QueueKey, now: float | None) -> None:
        """`now` is None for the initial list: for Workloads admitted before we
        looked, the condition's own time is the better (if coarser) answer."""
        meta = metadata(wl)
        name = str(meta.get("name") or "")
        uid = str(meta.get("uid") or "")
        with self._lock:
            self._drop_written("workload", (key.namespace, name), wl)
            _index(self._wl_by_owner, key, name, event != DELETED)
            if event == DELETED:
                self._admitted_seen.pop(uid, None)
            elif now is not None and w.is_admitted(wl) and uid not in self._admitted_seen:
                self._admitted_seen[uid] = now

    def add_owned(self, key: QueueKey, name: str) -> None:
        """A Workload we just created, before its watch event arrives."""
        with self._lock:
            self._wl_by_owner.setdefault(key, set()).add(name)

    # --- indexes ------------------------------------------------------------------

    def workload_names(self, key: QueueKey) -> set[str]:
        """Names of Workloads whose pass is `key`, plus every one we wrote in its
        namespace that the watch has not delivered yet."""
        with self._lock:
            names = set(self._wl_by_owner.get(key, ()))
            names |= {k[2] for k in self._written
                      if k[0] == "workload" and k[1] == key.namespace}
        return names

    def heads(self, ns: str, cluster: str) -> list[str]:
        with self._lock:
            return list(self._cluster_heads.get((ns, cluster), ()))

    def members(self, ns: str, cluster: str) -> list[str]:
        with self._lock:
            return sorted(self._cluster_pods.get((ns, cluster), ()))

    def waiting_members(self, ns: str, cluster: str) -> list[str]:
        """Pods of the cluster that have no Workload yet."""
        with self._lock:
            members = list(self._cluster_pods.get((ns, cluster), ()))
            return [name for name in members if not self._wl_by_owner.get(PodKey(ns, name))]

    def note_gang_released(self, ns: str, gang: str, uid: str, group: str,
                           still_there: Callable[[], bool]) -> None:
        """A pod our gang pass released under the base (or moved into it).

        `still_there` asks the pod cache, under this lock: the cache drops a pod
        before its handler reaches `pod_event`, so a pod that went before this
        call is never noted, and one that goes after it is forgotten there.
        """
        with self._lock:
            if still_there():
                self._gang_released.setdefault((ns, gang), {})[uid] = group

    def gang_released(self, ns: str, gang: str) -> dict[str, str]:
        """uid -> group of the gang's pods released under its base and not yet seen to go."""
        with self._lock:
            return dict(self._gang_released.get((ns, gang), {}))

    def admitted_at(self, uid: str) -> float | None:
        with self._lock:
            return self._admitted_seen.get(uid)

    # --- departed pods ------------------------------------------------------------

    def departed(self, key: Ref) -> Obj | None:
        with self._lock:
            return self._departed.get(key)

    def departed_at(self, key: Ref) -> float | None:
        with self._lock:
            return self._departed_at.get(key)

    def forget_pod(self, key: Ref, departed: Obj | None) -> None:
        """After a pass over a pod that is gone: nothing of it is needed any more."""
        with self._lock:
            self._departed.pop(key, None)
            self._departed_at.pop(key, None)
            if departed is not None:
                self._reported.pop(p.uid(departed), None)
            self._conflicts.pop(f"{key[0]}/{key[1]}", None)

    # --- the read-your-writes overlay ---------------------------------------------

    def _drop_written(self, kind: Kind, key: Ref, obj: Obj, gone: bool = False) -> None:
        entry = self._written.get((kind, *key))
        if entry is not None and (gone or _supersedes(obj, *entry)):
            del self._written[(kind, *key)]

    def remember(self, kind: Kind, key: Ref, before: Obj | None, after: Obj) -> None:
        """Until the watch delivers our write, reads return its result: a pass
        triggered meanwhile must not repeat the write."""
        pre_rv = metadata(before).get("resourceVersion") if before is not None else None
        with self._lock:
            self._written[(kind, *key)] = (pre_rv, after)

    def read(self, kind: Kind, key: Ref, cached: Obj | None) -> Obj | None:
        """The cached object, or our write's result while the cache is older than it."""
        with self._lock:
            entry = self._written.get((kind, *key))
            if entry is None:
                return cached
            pre_rv, after = entry
            if cached is None:
                if pre_rv is None:
                    return after  # our create, not delivered yet
            elif not _supersedes(cached, pre_rv, after):
                return after
            del self._written[(kind, *key)]
            return cached

    # --- what was already said ----------------------------------------------------

    def first_report(self, pod_uid: str, what: tuple[str, str]) -> bool:
        """True the first time `what` is reported for this pod, False after."""
        with self._lock:
            sent = self._reported.setdefault(pod_uid, set())
            if what in sent:
                return False
            sent.add(what)
            return True

    def set_conflict(self, name: str, kind: str, message: str) -> tuple[str, str] | None:
        """Record the pod's standing conflict; returns the one it replaces."""
        with self._lock:
            previous = self._conflicts.get(name)
            self._conflicts[name] = (kind, message)
            return previous

    def clear_conflict(self, name: str) -> None:
        with self._lock:
            self._conflicts.pop(name, None)

    def conflicts(self) -> dict[str, str]:
        with self._lock:
            return {k: f"{kind}: {msg}" for k, (kind, msg) in sorted(self._conflicts.items())}
