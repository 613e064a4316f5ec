"""Kueue for the stack: stripped down ("minimal") or as users install it ("shipped").

"shipped" takes everything that decides Kueue's behaviour from the Kueue Go
module the control plane is built from (the version pinned in
controlplane/go.mod, read from the module cache), never a copy:

- the Configuration of `config/components/manager/controller_manager_config.yaml`
  (its integrations list among the rest), with only what running off-cluster
  needs changed: loopback addresses, free ports, no leader election, certificates
  from files;
- the webhook configurations of `config/components/webhook/manifests.yaml` with
  the namespaceSelectors its kustomization adds and the name prefix of
  `config/default`, registered by URL to the stack's Kueue;
- the visibility API (VisibilityOnDemand, on by default) behind the API
  server's aggregation layer: the APIService of `config/components/visibility`
  and its Service, made an ExternalName `localhost` because EndpointSlices may
  not hold loopback addresses.

The functions that build objects are pure; `register`, `registered` and
`unregister_kueue_pod_webhooks` talk to a running stack.
"""

from __future__ import annotations

import base64
import copy
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ..config import KUEUE_MODES, REPO_ROOT
from ..controlplane import pki
from ..controlplane.kubeapi import object_path
from ..controlplane.webhooks import by_url

if TYPE_CHECKING:
    # The stack as a declaration sees it; `handle.Stack` is one (and imports us).
    from ..stackview import StackView as Stack

MINIMAL, SHIPPED = KUEUE_MODES

KUEUE_MODULE = "sigs.k8s.io/kueue"
GO_MOD = REPO_ROOT / "controlplane" / "go.mod"

MANAGER_CONFIG = "config/components/manager/controller_manager_config.yaml"
WEBHOOK_MANIFESTS = "config/components/webhook/manifests.yaml"
WEBHOOK_KUSTOMIZATION = "config/components/webhook/kustomization.yaml"
DEFAULT_KUSTOMIZATION = "config/default/kustomization.yaml"
VISIBILITY_APISERVICE = "config/components/visibility/apiservice_v1beta2.yaml"
VISIBILITY_SERVICE = "config/components/visibility/service.yaml"
CRD_KUSTOMIZATION = "config/components/crd/kustomization.yaml"
CONVERSION_MANAGER = "raykueue-devstack-conversion"  # owns only spec.conversion of Kueue's CRDs

# Kueue v0.19.2 pkg/visibility/server.go: `certDir = "/visibility"`, a package
# variable no flag or config field reaches; with internal cert management off
# the server exits unless tls.crt and tls.key are there. Nothing verifies the
# pair (the APIService is insecureSkipTLSVerify as shipped), so every stack on
# the machine can share one.
VISIBILITY_CERT_DIR = Path("/visibility")

# The front proxy: the API server's client identity towards aggregated servers.
FRONT_PROXY_CA = "front-proxy-ca"
FRONT_PROXY_CLIENT = "front-proxy-client"

# Kueue's pod webhooks, the only ones the benchmarks register (beside raykueue's).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


# ---- the Kueue module ------------------------------------------------------------------

def pinned_version(go_mod: str, module: str = KUEUE_MODULE) -> str:
    """The version of `module` that a go.mod requires (replace lines win)."""
    replaced = re.search(rf"^\s*replace\s+{re.escape(module)}\s+=>\s+\S+\s+(v\S+)", go_mod, re.M)
    if replaced:
        return replaced.group(1)
    required = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod, re.M)
    if not required:
        raise ValueError(f"go.mod does not require {module}")
    return required.group(1)


def escape_module_path(path: str) -> str:
    """The module cache's case encoding: an upper-case letter becomes `!` + lower case."""
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), path)


def module_cache() -> Path:
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    go = shutil.which("go")
    if go:
        out = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True,
                             timeout=60, check=False).stdout.strip()
        if out:
            return Path(out)
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    return Path(gopath.split(os.pathsep)[0]) / "pkg" / "mod"


@functools.cache
def kueue_module_dir(version: str | None = None) -> Path:
    """Where a Kueue module sits in the module cache (build.sh downloads it): `version`
    (the one a bin dir was built with, StackConfig.kueue_version), else controlplane's pin."""
    version = version or pinned_version(GO_MOD.read_text())
    root = module_cache() / f"{escape_module_path(KUEUE_MODULE)}@{version}"
    if not (root / MANAGER_CONFIG).is_file():
        raise FileNotFoundError(f"{root / MANAGER_CONFIG} is missing: Kueue {version} is not in the "
                                f"Go module cache; run controlplane/build.sh")
    return root


FEATURES_GO = "pkg/features/kube_features.go"


def feature_gate_default(root: Path, gate: str) -> bool | None:
    """A feature gate's default in the Kueue module at `root`: its last versioned spec
    (the one for the module's own version), None when the module has no such gate."""
    text = (root / FEATURES_GO).read_text()
    start = text.find(f"\t{gate}: {{")
    if start < 0:
        return None
    block = text[start:text.index("\t},", start)]
    return block.rsplit("Default:", 1)[1].strip().startswith("true")


def sources_mention(root: Path, text: str) -> bool:
    """Whether a non-test Go source under the module's pkg/ holds `text` (a label, an annotation)."""
    return any(text in p.read_text(errors="replace")
               for p in (root / "pkg").rglob("*.go") if not p.name.endswith("_test.go"))


@dataclass(frozen=True)
class KueueModule:
    """The shipped files of one Kueue module, parsed."""

    root: Path

    def docs(self, rel: str) -> list[dict]:
        return [d for d in yaml.safe_load_all((self.root / rel).read_text()) if d]

    def doc(self, rel: str) -> dict:
        (only,) = self.docs(rel)
        return only

    @property
    def manager_config(self) -> dict:
        return self.doc(MANAGER_CONFIG)

    @property
    def install(self) -> dict:
        """config/default's kustomization: the namespace and name prefix of an install."""
        return self.doc(DEFAULT_KUSTOMIZATION)

    @property
    def namespace(self) -> str:
        return self.install["namespace"]

    @property
    def visibility_placeable(self) -> bool:
        """Whether its Configuration can place the visibility server (`visibilityServer`,
        Kueue v0.16+). Before that it binds 0.0.0.0:8082, a port every stack on the machine
        would fight over and an address devstack never uses, so devstack turns it off there."""
        types = self.root / "apis/config/v1beta2/configuration_types.go"
        return types.is_file() and 'json:"visibilityServer' in types.read_text()

    @property
    def serves_visibility(self) -> bool:
        """Whether the stack runs this Kueue with its visibility API (VisibilityOnDemand on as
        shipped, and placeable on loopback)."""
        on = feature_gate_default(self.root, "VisibilityOnDemand") is not False
        return self.visibility_placeable and on

    def conversion_patches(self) -> list[dict]:
        """The CRD patches config/components/crd's kustomization applies to serve each listed
        CRD's versions through Kueue's conversion webhook (`patches/webhook_in_*.yaml`). Kueue
        v0.15 stores Workloads and queues as v1beta1: without them the API server rewrites only
        apiVersion and prunes what v1beta1 lacks (a Workload's spec.priorityClassRef)."""
        kustomization = self.doc(CRD_KUSTOMIZATION)
        return [self.doc(f"config/components/crd/{patch['path']}")
                for patch in kustomization.get("patches") or []
                if str(patch.get("path", "")).startswith("patches/webhook_in_")]

    def webhook_configurations(self) -> list[dict]:
        return kustomized_webhooks(self.docs(WEBHOOK_MANIFESTS), self.doc(WEBHOOK_KUSTOMIZATION),
                                   self.install.get("namePrefix", ""))


def shipped_module(version: str | None = None) -> KueueModule:
    return KueueModule(kueue_module_dir(version))


# ---- Kueue's Configuration ---------------------------------------------------------------

def deep_merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


# Kueue stripped to batch/job: no pod or ray.io integration, no webhooks, no visibility.
MINIMAL_BASE = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "manageJobsWithoutQueueName": False,
    "integrations": {"frameworks": ["batch/job"]},
    "featureGates": {"VisibilityOnDemand": False},
}


@dataclass(frozen=True)
class Listeners:
    """Where the stack's Kueue listens (all on 127.0.0.1)."""

    health: int
    webhook: int
    webhook_cert_dir: Path
    visibility: int | None = None


# What a shipped Kueue that cannot place its visibility server runs with instead.
NO_VISIBILITY = {"featureGates": {"VisibilityOnDemand": False}}


def kueue_configuration(base: dict, namespace: str, listen: Listeners,
                        overlay: dict | None = None) -> dict:
    """`base` (MINIMAL_BASE or the shipped manager config) made runnable off-cluster.

    Only placement changes: addresses, ports, certificates, leader election.
    `overlay` (StackConfig.kueue_config) is merged last, so a test can still
    change anything.
    """
    local = {
        "namespace": namespace,
        "leaderElection": {"leaderElect": False},
        # Off-cluster it would wait forever for a kubelet-mounted Secret.
        "internalCertManagement": {"enable": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{listen.health}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": listen.webhook,
                    "certDir": str(listen.webhook_cert_dir)},
    }
    if listen.visibility is not None:
        local["visibilityServer"] = {"bindAddress": "127.0.0.1", "bindPort": listen.visibility}
    cfg = deep_merge(base, local)
    # Leader election is off: the shipped lease name would only be noise.
    cfg["leaderElection"] = {"leaderElect": False}
    return deep_merge(cfg, overlay or {})


# ---- Kueue's webhook configurations ------------------------------------------------------

_WEBHOOK_FIELD = re.compile(r"^webhooks\.\[name=([^\]]+)\]\.([A-Za-z]+)$")


def _webhook_field(path: str) -> tuple[str, str]:
    m = _WEBHOOK_FIELD.match(path)
    if not m:
        raise ValueError(f"kustomization fieldPath {path!r}: only webhooks.[name=X].<field> is understood")
    return m.group(1), m.group(2)


def _select(configs: list[dict], kind: str, name: str) -> dict:
    for c in configs:
        if c["kind"] == kind and c["metadata"]["name"] == name:
            return c
    raise ValueError(f"kustomization names {kind} {name}, which the manifests lack")


def _hook(config: dict, name: str) -> dict:
    for h in config["webhooks"]:
        if h["name"] == name:
            return h
    raise ValueError(f"{config['metadata']['name']} has no webhook {name}")


def kustomized_webhooks(manifests: list[dict], kustomization: dict, name_prefix: str) -> list[dict]:
    """What `kustomize build` makes of Kueue's webhook manifests, for the parts Kueue uses.

    Inline strategic-merge patches (webhooks merge by name) and replacements
    between `webhooks.[name=X].<field>` paths; anything else in the
    kustomization that would change the webhooks raises, so that a Kueue
    upgrade that changes its shape fails here and not silently.
    """
    configs = copy.deepcopy([d for d in manifests if d["kind"].endswith("WebhookConfiguration")])
    for patch in kustomization.get("patches") or []:
        if "patch" not in patch or "target" in patch:
            raise ValueError(f"kustomization patch {patch!r}: only inline patches are understood")
        p = yaml.safe_load(patch["patch"])
        target = _select(configs, p["kind"], p["metadata"]["name"])
        for hook in p.get("webhooks") or []:
            _hook(target, hook["name"]).update(copy.deepcopy(hook))
    for rep in kustomization.get("replacements") or []:
        src = rep["source"]
        hook_name, fld = _webhook_field(src["fieldPath"])
        value = _hook(_select(configs, src["kind"], src["name"]), hook_name)[fld]
        for tgt in rep["targets"]:
            config = _select(configs, tgt["select"]["kind"], tgt["select"]["name"])
            for path in tgt["fieldPaths"]:
                name, tfld = _webhook_field(path)
                hook = _hook(config, name)
                if tfld not in hook and not (tgt.get("options") or {}).get("create"):
                    continue
                hook[tfld] = copy.deepcopy(value)
    for c in configs:
        c["metadata"]["name"] = name_prefix + c["metadata"]["name"]
    return configs


def kueue_webhook_configurations(shipped: list[dict], url_base: str, ca_bundle_pem: bytes, *,
                                 only: Iterable[str] | None = None,
                                 namespace_selector: dict | None = None) -> list[dict]:
    """`shipped` (KueueModule.webhook_configurations) registered by URL to the stack's Kueue.

    `only` keeps just the named webhooks; `namespace_selector` replaces every
    webhook's (the benchmarks give Kueue its own namespaces).
    """
    keep = None if only is None else set(only)
    configs = copy.deepcopy(shipped)
    for c in configs:
        if keep is not None:
            c["webhooks"] = [h for h in c["webhooks"] if h["name"] in keep]
        if namespace_selector is not None:
            for h in c["webhooks"]:
                h["namespaceSelector"] = copy.deepcopy(namespace_selector)
    configs = [c for c in configs if c["webhooks"]]
    return by_url(configs, url_base, ca_bundle_pem)


def conversion_objects(patches: list[dict], url_base: str, ca_bundle_pem: bytes) -> list[dict]:
    """`KueueModule.conversion_patches` made server-side apply bodies that send each CRD's
    conversions to the stack's Kueue by URL (the shipped patches name a Service)."""
    out = []
    for patch in patches:
        hook = patch["spec"]["conversion"]["webhook"]
        out.append({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": patch["metadata"]["name"]},
            "spec": {"conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": url_base.rstrip("/") + hook["clientConfig"]["service"]["path"],
                                 "caBundle": base64.b64encode(ca_bundle_pem).decode()},
                "conversionReviewVersions": list(hook["conversionReviewVersions"])}}},
        })
    return out


# ---- the aggregation layer -----------------------------------------------------------------

def ensure_aggregation_pki(pki_dir: Path) -> tuple[pki.Pair, pki.Pair]:
    """The requestheader CA and the front-proxy client pair it signs (kubeadm's layout)."""
    ca = pki.ensure_ca(pki_dir, name=FRONT_PROXY_CA, common_name="raykueue-front-proxy-ca")
    client = pki.issue(ca, pki.Pair(pki_dir / f"{FRONT_PROXY_CLIENT}.crt",
                                    pki_dir / f"{FRONT_PROXY_CLIENT}.key"),
                       common_name=FRONT_PROXY_CLIENT, client=True)
    return ca, client


def apiserver_aggregation_flags(ca: pki.Pair, client: pki.Pair) -> list[str]:
    """kube-apiserver flags that let it proxy to aggregated API servers (Kueue's visibility)."""
    return [
        f"--requestheader-client-ca-file={ca.cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={client.cert}",
        f"--proxy-client-key-file={client.key}",
    ]


def visibility_objects(apiservice: dict, service: dict, namespace: str, port: int) -> list[dict]:
    """The shipped APIService and a Service of its name that reaches 127.0.0.1:`port`.

    The aggregator resolves an ExternalName Service to https://<externalName>:<the
    APIService's port> (k8s.io/apiserver pkg/util/proxy ResolveCluster), and its
    availability check skips endpoints for any type but ClusterIP.
    """
    name = service["metadata"]["name"]
    svc = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"type": "ExternalName", "externalName": "localhost"}}
    api = copy.deepcopy(apiservice)
    api["metadata"] = {"name": apiservice["metadata"]["name"]}
    api["spec"]["service"] = {"name": name, "namespace": namespace, "port": port}
    return [svc, api]


# ---- a running stack ---------------------------------------------------------------------------

def webhook_ca(stack: Stack) -> Path:
    """The CA of the self-signed pair the stack gives Kueue's webhook server."""
    return stack.dir / "kueue" / "webhook-certs" / "tls-ca.crt"


def kueue_url(stack: Stack) -> str:
    return f"https://127.0.0.1:{stack.procs['kueue'].ports['webhook']}"


def manager_config_map(config_text: str, namespace: str) -> dict:
    """The ConfigMap Kueue's install mounts its Configuration from (config/components/manager),
    named as `config/default` prefixes it; raykueue reads it to learn Kueue's setup."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": namespace},
            "data": {"controller_manager_config.yaml": config_text}}


def shipped_objects(stack: Stack, module: KueueModule) -> list[dict]:
    """Everything `register` applies: both webhook configurations, the Service, the APIService,
    and the ConfigMap holding the Configuration Kueue runs with."""
    hooks = kueue_webhook_configurations(module.webhook_configurations(), kueue_url(stack),
                                         webhook_ca(stack).read_bytes())
    vis = visibility_objects(module.doc(VISIBILITY_APISERVICE), module.doc(VISIBILITY_SERVICE),
                             module.namespace, stack.procs["kueue"].ports["visibility"]
                             ) if module.serves_visibility else []
    config = manager_config_map((stack.dir / "kueue" / "config.yaml").read_text(), module.namespace)
    return hooks + vis + [config]


def register(stack: Stack) -> None:
    """Apply Kueue's webhook configurations, its APIService and its CRDs' conversion
    webhooks (idempotent; the conversions under a field manager of their own, so that
    re-applying the CRDs leaves them)."""
    module = shipped_module(stack.config.kueue_version)
    for obj in shipped_objects(stack, module):
        stack.api.apply(object_path(obj), obj)
    ca = webhook_ca(stack).read_bytes()
    for obj in conversion_objects(module.conversion_patches(), kueue_url(stack), ca):
        stack.api.apply(object_path(obj), obj, field_manager=CONVERSION_MANAGER)


def registered(stack: Stack) -> tuple[bool, str]:
    """Ready check: the APIService is Available and the API server calls Kueue's webhooks.

    The probe is a dry-run Job with no queue label in the sample LocalQueue's
    namespace: Kueue's job webhook defaults the label to the LocalQueue named
    `default` (jobframework ApplyDefaultLocalQueue...), so it only comes back
    labelled once the API server has picked the registration up.
    """
    module = shipped_module(stack.config.kueue_version)
    if module.serves_visibility:
        name = module.doc(VISIBILITY_APISERVICE)["metadata"]["name"]
        apisvc = stack.api.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
        available = next((c for c in (apisvc.get("status") or {}).get("conditions") or []
                          if c.get("type") == "Available"), {})
        if available.get("status") != "True":
            return False, f"APIService {name} not Available: {available.get('message')}"
    s = stack.config.samples
    if s.local_queue != "default":
        return True, "ok (no LocalQueue named default to probe the webhooks with)"
    job = stack.api.call("POST", f"/apis/batch/v1/namespaces/{s.local_queue_namespace}/jobs",
                         probe_job(), query={"dryRun": "All"})
    label = (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
    return label == "default", f"dry-run Job came back with {QUEUE_LABEL}={label!r}"


def probe_job() -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"generateName": "kueue-webhook-probe-"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "probe", "image": "busybox", "resources": {"requests": {"cpu": "1m"}}}]}}},
    }
