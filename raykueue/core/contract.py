"""Every name raykueue shares with users, KubeRay and Kueue.

One place for each string so that a rename is one edit and a typo is an import
error, not a silent mismatch between the webhook and the controller.
"""

from typing import Final

# --- opt-in -----------------------------------------------------------------
# Proposed upstream for Kueue and never implemented there; we give it meaning.
STANDALONE_ANNOTATION: Final = "kueue.x-k8s.io/standalone"
STANDALONE_VALUES: Final = ("true", "false")
# On a RayCluster or its RayJob/RayService (nearest wins): the head and every
# worker group's minReplicas are admitted as one Workload (docs/GANG.md).
GANG_ANNOTATION: Final = "raykueue.io/gang"
GANG_VALUES: Final = ("true", "false")

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
KUEUE_POD_FINALIZER: Final = "kueue.x-k8s.io/managed"
KUEUE_ROLE_HASH_ANNOTATION: Final = "kueue.x-k8s.io/role-hash"
WORKLOAD_PRIORITY_CLASS_KIND: Final = "WorkloadPriorityClass"
# The name Kueue's webhooks write into queue-name and priority-class labels when
# they default them (a LocalQueue / WorkloadPriorityClass named "default").
DEFAULT_LOCAL_QUEUE: Final = "default"
KUEUE_DEFAULT_PRIORITY_CLASS: Final = "default"

# --- raykueue's own names ----------------------------------------------------
GATE: Final = "raykueue.io/admission"
POD_UID_LABEL: Final = "raykueue.io/pod-uid"
MANAGED_BY_LABEL: Final = "raykueue.io/managed-by"
MANAGED_BY_VALUE: Final = "raykueue"
# The stamp: written by the first Ray-object webhook into every pod template of
# an opted-in RayCluster, so every pod KubeRay makes for it carries it from its
# creation. The pod webhook's scope is this label: a pod without it (and without
# its own opt-in, if it has no Ray owner) never waits for raykueue.
OPTED_IN_LABEL: Final = "raykueue.io/opted-in"
OPTED_IN_VALUE: Final = "true"
# Where an opted-in RayCluster/RayJob/RayService (and its pod templates) keeps
# its queue: Kueue acts on the queue-name label of a Ray object (suspends it and
# admits it whole), so raykueue moves that label here before Kueue's webhook runs.
QUEUE_ANNOTATION: Final = "raykueue.io/queue-name"
# Set by the first stage when Kueue took an opted-in Ray object (suspended it in a
# namespace where Kueue manages Ray jobs without a queue name): its value says why.
# From then on the object is Kueue's: unstamped, Kueue's queue label, no raykueue
# webhook changes it back (docs/KUEUE.md, "Hand-over to Kueue").
HANDED_TO_KUEUE_ANNOTATION: Final = "raykueue.io/handed-to-kueue"
HANDED_TO_KUEUE_REASON: Final = "HandedToKueue"
# On a running pod raykueue adopted (controller/adopt.py): the WorkloadPriorityClass
# its Workload takes. Kueue's pod webhook refuses a priority-class (or queue-name)
# label added to a running pod, so adopted pods carry both as raykueue's annotations.
PRIORITY_CLASS_ANNOTATION: Final = "raykueue.io/priority-class"
# Set on the way in when the user asked for spec.suspend, so that the webhook
# after Kueue's can tell the user's suspend from Kueue's; removed on the way out.
SUSPEND_REQUESTED_ANNOTATION: Final = "raykueue.io/suspend-requested"
# On a gang pod: the label names its cluster (the controller plans per cluster),
# the annotation carries each worker group's base count as the webhook read it
# from the RayCluster ({"group": minReplicas x numOfHosts}, JSON).
GANG_LABEL: Final = "raykueue.io/gang"
GANG_MIN_ANNOTATION: Final = "raykueue.io/gang-min"
# Pod condition written before an evicted pod is deleted, so the reason
# survives in the pod's last state and in `kubectl describe`.
EVICTED_CONDITION: Final = "raykueue.io/Evicted"

# spec.managedBy of a RayCluster/RayJob/RayService (KubeRay's CRDs allow these two):
# KubeRay's own, and MultiKueue's, which Kueue's defaulting writes when the queue's
# ClusterQueue has a MultiKueue admission check (the object then runs elsewhere).
KUBERAY_MANAGED_BY: Final = "ray.io/kuberay-operator"
MULTIKUEUE_MANAGED_BY: Final = "kueue.x-k8s.io/multikueue"
# A RayJob's submissionMode whose submitter runs in a pod of its own (a batch Job's).
K8S_JOB_MODE: Final = "K8sJobMode"
# The submissionMode whose submitter is a container KubeRay adds to the head pod.
SIDECAR_MODE: Final = "SidecarMode"
# The submitter pod a RayJob in K8sJobMode will run, as JSON of the part of a pod
# spec Kueue sizes and places by. The RayJob webhook writes it on an opted-in
# RayJob; KubeRay copies it onto the RayCluster it makes, whose webhook copies it
# onto the head's template, so the head pod's Workload reserves the submitter's
# quota in a second podSet (SUBMITTER_POD_SET) admitted with the head.
SUBMITTER_ANNOTATION: Final = "raykueue.io/submitter"
SUBMITTER_POD_SET: Final = "submitter"
# KubeRay's default submitter container requests (common.GetDefaultSubmitterContainer).
DEFAULT_SUBMITTER_REQUESTS: Final = {"cpu": "500m", "memory": "200Mi"}
DEFAULT_SUBMITTER_LIMITS: Final = {"cpu": "1", "memory": "1Gi"}
DEFAULT_SUBMITTER_CONTAINER: Final = "ray-job-submitter"

DEFAULT_HEAD_PRIORITY_CLASS: Final = "ray-head"
DEFAULT_WORKER_PRIORITY_CLASS: Final = "ray-worker"
# Kubernetes PriorityClasses for the optional pod priority: the same names, another kind.
DEFAULT_HEAD_POD_PRIORITY_CLASS: Final = DEFAULT_HEAD_PRIORITY_CLASS
DEFAULT_WORKER_POD_PRIORITY_CLASS: Final = DEFAULT_WORKER_PRIORITY_CLASS
# The install's namespace and ServiceAccount; the server takes the ones its pod
# really runs as from the downward API (RAYKUEUE_POD_NAMESPACE, RAYKUEUE_SERVICE_ACCOUNT).
DEFAULT_NAMESPACE: Final = "raykueue-system"
DEFAULT_SERVICE_ACCOUNT: Final = "raykueue"


def service_account_user(namespace: str, name: str) -> str:
    """The username the API server gives a ServiceAccount's tokens (and shows webhooks)."""
    return f"system:serviceaccount:{namespace}:{name}"


DEFAULT_CONTROLLER_IDENTITY: Final = service_account_user(DEFAULT_NAMESPACE, DEFAULT_SERVICE_ACCOUNT)

# The API server calls mutating webhook configurations in name order. "aa-..."
# sorts before Kueue's ("kueue-..."): there raykueue hides an opted-in Ray
# object's queue from Kueue. "zz-..." sorts after: there raykueue undoes what
# Kueue's defaulting still did and decides the pods.
FIRST_MUTATING_WEBHOOK_CONFIG: Final = "aa-raykueue-first"
MUTATING_WEBHOOK_CONFIG: Final = "zz-raykueue-mutating"
VALIDATING_WEBHOOK_CONFIG: Final = "zz-raykueue-validating"
MUTATING_WEBHOOK_CONFIGS: Final = (FIRST_MUTATING_WEBHOOK_CONFIG, MUTATING_WEBHOOK_CONFIG)
WEBHOOK_CONFIGS: Final = (
    *(("mutatingwebhookconfigurations", name) for name in MUTATING_WEBHOOK_CONFIGS),
    ("validatingwebhookconfigurations", VALIDATING_WEBHOOK_CONFIG),
)
# Protects the stamp without any raykueue process (manifests/webhooks.yaml).
STAMP_POLICY: Final = "raykueue-stamp"
MUTATE_PATH: Final = "/mutate-pods"
VALIDATE_PATH: Final = "/validate-pods"
RAY_OBJECTS_FIRST_PATH: Final = "/mutate-ray-objects/first"
RAY_OBJECTS_LAST_PATH: Final = "/mutate-ray-objects/last"

# --- the way out (raykueue uninstall; docs in manifests/README.md) -------------
# On a Ray object the uninstall suspended, so that a second run (or one with
# --handback later) can tell its own suspend from a user's.
SUSPENDED_BY_ANNOTATION: Final = "raykueue.io/suspended-by"
SUSPENDED_BY_UNINSTALL: Final = "uninstall"
# Kueue's elastic jobs (feature gate ElasticJobsViaWorkloadSlices, beta and on in
# v0.19): the only way Kueue takes an autoscaled RayCluster. The annotation is
# immutable once the object has a queue; a RayCluster's templates must carry the gate.
KUEUE_ELASTIC_JOB_ANNOTATION: Final = "kueue.x-k8s.io/elastic-job"
KUEUE_ELASTIC_JOB_GATE: Final = "kueue.x-k8s.io/elastic-job"
