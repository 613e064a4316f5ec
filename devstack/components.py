"""What each process of the stack is: one declaration per component.

A `Component` says which binary runs, with which arguments, on which named
ports, what it needs running first, when it is ready, and whether `up` gives
up at once when it fails. `plan.py` orders them by `needs` (start) and the
reverse (stop); `stack.py` starts, stops, restarts and reports them from
these declarations and state.json alone.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from .config import StackConfig
from .controlplane import pki
from .controlplane.objects import KUEUE_NAMESPACE, KWOK_NODE_ANNOTATION, apply_objects, node_objects
from .kueue import shipped as kueue_shipped
from .node import kubelet as node
from .probes import condition, http_ok, secure_healthz, tls_port_open
from .procs import StackError
from .ray import dashboard_proxy

if TYPE_CHECKING:
    # The stack as a declaration sees it; `handle.Stack` is one (and imports us).
    from .stackview import StackView as Stack

Ports = dict[str, int]
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


@dataclass(frozen=True)
class Component:
    name: str
    tier: str
    # A name in the bin dir, or an absolute path (devstack's own Python processes).
    binary: str
    # Named ports, each a free loopback port at start; the first is the one
    # `Stack.ports` reports (etcd's client port, the API server's secure port, ...).
    ports: tuple[str, ...]
    args: Callable[[Stack, Ports], list[str]]
    ready: Callable[[Stack], tuple[bool, str]]
    needs: tuple[str, ...] = ()
    # Files the arguments refer to (certificates, a config file, etcd's data dir).
    prepare: Callable[[Stack, Ports], None] | None = None
    # Runs right after the process starts, before waiting for it (kwok: its nodes).
    after_start: Callable[[Stack], None] | None = None
    # A command prefix the process runs under (the real node's: nsenter into its
    # namespaces, devstack/node/kubelet.py); the recorded binary stays the component's own.
    wrap: Callable[[Stack], list[str]] | None = None
    # Also pass KUBECONFIG: controller-runtime managers read it besides --kubeconfig.
    kubeconfig_env: bool = False
    # More of the process's environment, read at every start.
    env: Callable[[Stack], dict[str, str]] | None = None
    # Nothing works without it: `up` stops at its failure instead of collecting it.
    fatal: bool = False
    # `restart_component` waits for `ready` again (components whose probe needs
    # nothing but the process itself).
    wait_after_restart: bool = False


# ---- etcd and the API server ------------------------------------------------------------

def _etcd_data(stack: Stack, ports: Ports) -> None:
    stack.record(etcd_data=tempfile.mkdtemp(prefix="raykueue-etcd-"))


def _etcd_args(stack: Stack, ports: Ports) -> list[str]:
    url, peer_url = f"http://127.0.0.1:{ports['client']}", f"http://127.0.0.1:{ports['peer']}"
    return [
        "--name=raykueue", f"--data-dir={stack.etcd_data}",
        f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=raykueue={peer_url}",
        "--unsafe-no-fsync=true", "--log-level=warn",
    ]


def _etcd_ready(stack: Stack) -> tuple[bool, str]:
    ok, body = http_ok(f"http://127.0.0.1:{stack.ports['etcd']}/health")
    return ok and '"health":"true"' in body.replace(" ", ""), body


def _apiserver_kubeconfig(stack: Stack, ports: Ports) -> None:
    stack.write_kubeconfig(f"https://127.0.0.1:{ports['secure']}")


def _apiserver_args(stack: Stack, ports: Ports) -> list[str]:
    d = stack.pki_dir
    return [
        f"--etcd-servers=http://127.0.0.1:{stack.ports['etcd']}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={ports['secure']}",
        f"--cert-dir={d}",
        f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
        f"--client-ca-file={stack.ca_file}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={d / 'sa.pub'}",
        f"--service-account-signing-key-file={d / 'sa.key'}",
        f"--service-cluster-ip-range={stack.config.service_cluster_ip_range}",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        # It taints every new Node not-ready until node-lifecycle-controller clears it;
        # that controller would also evict pods when kwok's heartbeat is late.
        "--disable-admission-plugins=TaintNodesByCondition",
        # A namespace's annotations may pin its pods to nodes and give them
        # tolerations (no-ops without them): how the node tier keeps raykueue's
        # Helm install on the real node, the chart having no such values.
        "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
        # The aggregation layer (Kueue's visibility API when shipped); the same in
        # both Kueue modes so that the API server never depends on the mode.
        *kueue_shipped.apiserver_aggregation_flags(*kueue_shipped.ensure_aggregation_pki(d)),
        "--endpoint-reconciler-type=none",
        # `kubectl logs` and exec reach the real node's kubelet by its address: no
        # DNS here knows its name (kwok's nodes serve neither).
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--profiling=false",
        "--v=1",
    ]


def _apiserver_ready(stack: Stack) -> tuple[bool, str]:
    status, body = stack.api.request("GET", "/readyz", timeout=3)
    return status == 200, body.decode(errors="replace")


# ---- controller-manager and scheduler ----------------------------------------------------

def _kube_component_args(stack: Stack, name: str, port: int) -> list[str]:
    cert_dir = stack.dir / name
    cert_dir.mkdir(parents=True, exist_ok=True)
    return [
        f"--kubeconfig={stack.kubeconfig}",
        f"--authentication-kubeconfig={stack.kubeconfig}",
        f"--authorization-kubeconfig={stack.kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={cert_dir}",
        "--leader-elect=false",
    ]


def _controller_manager_args(stack: Stack, ports: Ports) -> list[str]:
    return [
        *_kube_component_args(stack, "kube-controller-manager", ports["secure"]),
        # job-controller: KubeRay submits a RayJob in K8sJobMode (its default) from a
        # batch Job's pod; without it that Job never gets a pod (kwok's pod-complete
        # stage then takes a Job's running pod to Succeeded).
        "--controllers=garbage-collector-controller,namespace-controller,"
        "serviceaccount-controller,root-ca-certificate-publisher-controller,job-controller",
        f"--root-ca-file={stack.ca_file}",
        f"--service-account-private-key-file={stack.pki_dir / 'sa.key'}",
        "--use-service-account-credentials=false",
        "--v=1",
    ]


def _controller_manager_ready(stack: Stack) -> tuple[bool, str]:
    ok, body = secure_healthz(stack.ports["kube-controller-manager"])
    if not ok:
        return ok, body
    # The serviceaccount controller is what lets pods be created at all.
    if stack.api.get_or_none("/api/v1/namespaces/default/serviceaccounts/default") is None:
        return False, "ServiceAccount default/default not created yet"
    return True, "ok"


def _scheduler_args(stack: Stack, ports: Ports) -> list[str]:
    return [*_kube_component_args(stack, "kube-scheduler", ports["secure"]), "--v=1"]


# ---- kwok ------------------------------------------------------------------------------

def _kwok_args(stack: Stack, ports: Ports) -> list[str]:
    stages = []
    for sub in ("node-fast", "node-heartbeat", "pod-fast"):
        stages += sorted(str(p) for p in (stack.config.stage_dir / sub).glob("*.yaml"))
    if not stages:
        raise StackError(f"kwok: no stage files under {stack.config.stage_dir}; run controlplane/build.sh")
    key, value = KWOK_NODE_ANNOTATION
    return [
        f"--kubeconfig={stack.kubeconfig}",
        f"--config={','.join(stages)}",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--server-address=127.0.0.1:{ports['server']}",
    ]


def _kwok_ready(stack: Stack) -> tuple[bool, str]:
    ok, body = http_ok(f"http://127.0.0.1:{stack.ports['kwok']}/healthz")
    if not ok:
        return ok, body
    nodes = stack.api.get("/api/v1/nodes", query={"labelSelector": "type=kwok"})["items"]
    ready = [n["metadata"]["name"] for n in nodes if condition(n, "Ready") == "True"]
    want = stack.config.nodes.count
    return len(ready) >= want, f"{len(ready)}/{want} kwok nodes Ready"


# ---- Kueue -----------------------------------------------------------------------------

def kueue_dir(config: StackConfig) -> Path:
    return config.stack_dir.resolve() / "kueue"


def kueue_config(config: StackConfig, health: int, webhook: int, visibility: int | None = None) -> dict:
    """The Kueue manager's configuration for `config.kueue_mode`, `config.kueue_config` merged over it.

    minimal: batch/job only; shipped: Kueue's own controller_manager_config.yaml
    (devstack/kueue/shipped.py), with only addresses, ports and certificates changed.
    """
    shipped = config.kueue_mode == kueue_shipped.SHIPPED
    module = kueue_shipped.shipped_module(config.kueue_version) if shipped else None
    base = module.manager_config if module else kueue_shipped.MINIMAL_BASE
    placeable = module is not None and module.visibility_placeable
    if module and not placeable:
        base = kueue_shipped.deep_merge(base, kueue_shipped.NO_VISIBILITY)
    listen = kueue_shipped.Listeners(health=health, webhook=webhook,
                                     webhook_cert_dir=kueue_dir(config) / "webhook-certs",
                                     visibility=visibility if placeable else None)
    return kueue_shipped.kueue_configuration(base, KUEUE_NAMESPACE, listen, config.kueue_config)


def _hard_coded_pair(cert_dir: Path, name: str) -> None:
    """Kueue exits unless tls.crt/tls.key exist in `cert_dir`, a path compiled into it."""
    pair = pki.Pair(cert_dir / "tls.crt", cert_dir / "tls.key")
    if pair.cert.exists() and pair.key.exists():
        return
    try:
        pki.self_signed(pair, name)
    except PermissionError as e:
        raise StackError(
            f"kueue: it insists on {cert_dir}/tls.crt and tls.key (a hard-coded path) and "
            f"devstack cannot write them ({e}); create any self-signed pair there") from e


def _kueue_files(stack: Stack, ports: Ports) -> None:
    kdir = kueue_dir(stack.config)
    pki.self_signed(pki.Pair(kdir / "webhook-certs/tls.crt", kdir / "webhook-certs/tls.key"),
                    "kueue-webhook")
    _hard_coded_pair(KUEUE_METRICS_CERT_DIR, "kueue-metrics")
    if stack.kueue_mode == kueue_shipped.SHIPPED:
        _hard_coded_pair(kueue_shipped.VISIBILITY_CERT_DIR, "kueue-visibility")
    cfg = kueue_config(stack.config, ports["health"], ports["webhook"], ports["visibility"])
    (kdir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def _kueue_args(stack: Stack, ports: Ports) -> list[str]:
    return [f"--config={kueue_dir(stack.config) / 'config.yaml'}", f"--kubeconfig={stack.kubeconfig}"]


def _kueue_registered(stack: Stack) -> None:
    """Shipped: Kueue's webhook configurations, APIService and ConfigMap, as installs have them."""
    if stack.kueue_mode == kueue_shipped.SHIPPED:
        kueue_shipped.register(stack)


def _kueue_ready(stack: Stack) -> tuple[bool, str]:
    ports = stack.procs["kueue"].ports
    ok, body = http_ok(f"http://127.0.0.1:{ports['health']}/readyz")
    if not ok:
        return ok, f"readyz: {body}"
    if not tls_port_open(ports["webhook"]):
        return False, "webhook port not listening"
    if stack.kueue_mode == kueue_shipped.SHIPPED:
        ok, why = kueue_shipped.registered(stack)
        if not ok:
            return ok, why
    name = stack.config.samples.cluster_queue
    cq = stack.api.get_or_none(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{name}")
    if cq is None:
        return True, "ok (no sample ClusterQueue)"
    active = condition(cq, "Active")
    return active == "True", f"ClusterQueue {name} Active={active}"


# ---- KubeRay ---------------------------------------------------------------------------

def _dashboard_proxy_args(stack: Stack, ports: Ports) -> list[str]:
    return ["-m", "devstack.ray.dashboard_proxy", f"--port={ports['http']}",
            f"--routes={dashboard_proxy.routes_dir(stack.dir)}"]


def _ray_operator_env(stack: Stack) -> dict[str, str]:
    """RayJobs and RayServices make the operator call a head's dashboard by its Service's
    cluster DNS name: plain HTTP, so through this proxy (devstack/ray/dashboard_proxy.py)."""
    proxy = f"http://127.0.0.1:{stack.ports['dashboard-proxy']}"
    return {"HTTP_PROXY": proxy, "http_proxy": proxy,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def _ray_operator_args(stack: Stack, ports: Ports) -> list[str]:
    return [
        "--enable-leader-election=false",
        f"--metrics-addr=127.0.0.1:{ports['metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{ports['probe']}",
        f"--kubeconfig={stack.kubeconfig}",
        "--log-stdout-encoder=console",
    ]


def _ray_operator_ready(stack: Stack) -> tuple[bool, str]:
    return http_ok(f"http://127.0.0.1:{stack.ports['ray-operator']}/readyz")


# "objects" is not a process but a step of the plan (plan.STEPS): the CRDs and the
# sample Kueue objects. Kueue and KubeRay watch those CRDs from their first second.
# The scheduler and kwok do not need them; they start after them anyway, as they
# always did: beside the CRD applies they did not start the stack any faster on a
# loaded machine (docs/DEVSTACK.md), and the applies are the slow part.
_AFTER_OBJECTS = ("kube-apiserver", "objects")
COMPONENTS: dict[str, Component] = {c.name: c for c in (
    Component("etcd", "api", "etcd", ("client", "peer"), _etcd_args, _etcd_ready,
              prepare=_etcd_data, fatal=True, wait_after_restart=True),
    Component("kube-apiserver", "api", "kube-apiserver", ("secure",), _apiserver_args,
              _apiserver_ready, needs=("etcd",), prepare=_apiserver_kubeconfig, fatal=True,
              wait_after_restart=True),
    Component("kube-controller-manager", "api", "kube-controller-manager", ("secure",),
              _controller_manager_args, _controller_manager_ready, needs=("kube-apiserver",)),
    Component("kube-scheduler", "e2e", "kube-scheduler", ("secure",), _scheduler_args,
              lambda s: secure_healthz(s.ports["kube-scheduler"]), needs=_AFTER_OBJECTS),
    Component("kwok", "e2e", "kwok", ("server",), _kwok_args, _kwok_ready,
              needs=_AFTER_OBJECTS,
              after_start=lambda s: apply_objects(s.api, node_objects(s.config))),
    Component("kueue", "e2e", "kueue", ("health", "webhook", "visibility"), _kueue_args,
              _kueue_ready, needs=("objects",), prepare=_kueue_files, after_start=_kueue_registered,
              kubeconfig_env=True),
    Component("dashboard-proxy", "e2e", sys.executable, ("http",), _dashboard_proxy_args,
              lambda s: http_ok(f"http://127.0.0.1:{s.ports['dashboard-proxy']}/healthz"),
              wait_after_restart=True),
    Component("ray-operator", "e2e", "ray-operator", ("probe", "metrics"), _ray_operator_args,
              _ray_operator_ready, needs=("objects", "dashboard-proxy"), kubeconfig_env=True,
              env=_ray_operator_env),
    # ---- the node tier: one real kubelet node (devstack/node/kubelet.py, docs/DEVSTACK.md) ----
    Component("node-ns", "node", sys.executable, (), node.ns_args, node.ns_ready,
              prepare=node.ns_prepare),
    Component("node-apiserver-proxy", "node", sys.executable, ("listen",), node.proxy_args,
              node.proxy_ready, needs=("node-ns", "kube-apiserver"),
              after_start=node.apiserver_endpoint, wait_after_restart=True),
    Component("node-controllers", "node", "kube-controller-manager", ("secure",),
              node.node_controllers_args,
              lambda s: secure_healthz(s.ports["node-controllers"]), needs=("kube-apiserver",)),
    Component("containerd", "node", "containerd", (), node.containerd_args, node.containerd_ready,
              needs=("node-ns",), prepare=node.containerd_prepare, wrap=node.enter_node),
    Component("kubelet", "node", "kubelet", ("kubelet", "healthz"), node.kubelet_args,
              node.kubelet_ready, needs=("containerd", "node-apiserver-proxy", "node-images"),
              prepare=node.kubelet_prepare, wrap=node.enter_node),
    Component("kube-proxy", "node", "kube-proxy", ("healthz", "metrics"), node.kube_proxy_args,
              node.kube_proxy_ready, needs=("node-ns", "node-apiserver-proxy"),
              prepare=node.kube_proxy_prepare, wrap=node.enter_node),
)}
