"""Every name raykueue shares with users, KubeRay and Kueue.

One place for each string so that a rename is one edit and a typo is an import
error, not a silent mismatch between the webhook and the controller.
"""

from typing import Final

# --- opt-in -----------------------------------------------------------------
# Proposed upstream for Kueue and never implemented there; we give it meaning.
STANDALONE_ANNOTATION: Final = "kueue.x-k8s.io/standalone"
STANDALONE_VALUES: Final = ("true", "false")

# --- KubeRay labels (set by the operator on every pod it creates) ------------
NODE_TYPE_LABEL: Final = "ray.io/node-type"
CLUSTER_LABEL: Final = "ray.io/cluster"
GROUP_LABEL: Final = "ray.io/group"
ROLE_HEAD: Final = "head"
ROLE_WORKER: Final = "worker"
MANAGED_ROLES: Final = (ROLE_HEAD, ROLE_WORKER)

# --- owners ------------------------------------------------------------------
RAY_API_GROUP: Final = "ray.io"
RAYCLUSTER_KIND: Final = "RayCluster"
RAYJOB_KIND: Final = "RayJob"
RAYSERVICE_KIND: Final = "RayService"

# --- Kueue's names -----------------------------------------------------------
KUEUE_GROUP: Final = "kueue.x-k8s.io"
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
# Kueue's plain-pod integration marks pods it manages with this label and gate;
# either one on a pod means Kueue already owns its admission.
KUEUE_MANAGED_LABEL: Final = "kueue.x-k8s.io/managed"
KUEUE_POD_GATE: Final = "kueue.x-k8s.io/admission"
KUEUE_TOPOLOGY_GATE: Final = "kueue.x-k8s.io/topology"
WORKLOAD_PRIORITY_CLASS_KIND: Final = "WorkloadPriorityClass"
DEFAULT_LOCAL_QUEUE: Final = "default"

# --- raykueue's own names ----------------------------------------------------
GATE: Final = "raykueue.io/admission"
POD_UID_LABEL: Final = "raykueue.io/pod-uid"
MANAGED_BY_LABEL: Final = "raykueue.io/managed-by"
MANAGED_BY_VALUE: Final = "raykueue"
# Pod condition written before an evicted pod is deleted, so the reason
# survives in the pod's last state and in `kubectl describe`.
EVICTED_CONDITION: Final = "raykueue.io/Evicted"

DEFAULT_HEAD_PRIORITY_CLASS: Final = "ray-head"
DEFAULT_WORKER_PRIORITY_CLASS: Final = "ray-worker"
DEFAULT_CONTROLLER_IDENTITY: Final = "system:serviceaccount:raykueue-system:raykueue"

# Webhook configuration names sort after Kueue's ("kueue-...") so that Kueue's
# own webhooks run first and raykueue sees their result.
MUTATING_WEBHOOK_CONFIG: Final = "zz-raykueue-mutating"
VALIDATING_WEBHOOK_CONFIG: Final = "zz-raykueue-validating"
MUTATE_PATH: Final = "/mutate-pods"
VALIDATE_PATH: Final = "/validate-pods"
