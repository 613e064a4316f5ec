"""The node tier: one real kubelet node beside the kwok nodes (docs/DEVSTACK.md, "The real node").

What runs, all from controlplane/node/build.sh except runc and the CNI plugins
(Debian's):

    node-ns               devstack/node/ns.py: the node's network and mount
                          namespaces, a veth pair to the machine, the cgroup root
    node-apiserver-proxy  devstack/node/proxy.py: the API server at the host end
                          of the veth pair (it binds only 127.0.0.1)
    containerd            CRI runtime, runc, CNI bridge; inside the node
    kubelet               inside the node; taints itself so only pods that
                          tolerate it (raykueue's own, in the tests) run there
    kube-proxy            iptables mode, inside the node: ClusterIPs work there
    node-controllers      a second kube-controller-manager with the controllers a
                          Deployment needs (deployment, replicaset, endpointslice,
                          disruption); the api tier's runs without them

The API server reaches a webhook's Service by its ClusterIP (its default
resolver, no --enable-aggregator-routing): the machine routes the Service range
to the node, where kube-proxy's rules send it to a pod. Pods reach the API
server at the `kubernetes` Service's ClusterIP, whose EndpointSlice (devstack
writes it: the API server runs with --endpoint-reconciler-type=none) names the
proxy.

Addresses: a stack gets one /30 for the veth pair and one /24 for its pods,
from its directory's hash; nothing has a default route, so pod traffic never
leaves the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ..config import REPO_ROOT
from ..probes import condition, http_ok
from ..procs import StackError

if TYPE_CHECKING:
    from ..stackview import StackView as Stack

Ports = dict[str, int]

NODE_NAME = "raykueue-node"
# The taint keeps every pod that does not tolerate it (Ray's, on the kwok nodes)
# off the real node; the label is what raykueue's pods select it by.
NODE_LABEL = ("raykueue.io/real-node", "true")
NODE_TAINT = {"key": "raykueue.io/real-node", "value": "true", "effect": "NoSchedule"}
# Kubernetes' own pause, compiled from the Kubernetes module (controlplane/node/build.sh).
PAUSE_IMAGE = "localhost/raykueue-pause:3.10.2"
CRI_NAMESPACE = "k8s.io"
BUILD_IMAGE = REPO_ROOT / "scripts" / "build-image"


@dataclass(frozen=True)
class NodeNet:
    """The addresses of one stack's node, from its directory's hash."""

    index: int
    service_cidr: str

    @classmethod
    def of(cls, stack: Stack) -> NodeNet:
        digest = hashlib.sha256(str(stack.dir).encode()).digest()
        return cls(index=20 + digest[0] % 200, service_cidr=stack.config.service_cluster_ip_range)

    @property
    def host_if(self) -> str:
        return f"rkh-{self.index}"

    @property
    def node_if(self) -> str:
        return f"rkn-{self.index}"

    @property
    def host_ip(self) -> str:
        return f"10.213.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"10.213.{self.index}.2"

    @property
    def pod_cidr(self) -> str:
        return f"10.214.{self.index}.0/24"

    @property
    def pod_gateway(self) -> str:
        return f"10.214.{self.index}.1"


def node_dir(stack: Stack) -> Path:
    return stack.dir / "node"


def cgroup_root(stack: Stack) -> str:
    return f"/raykueue-node-{NodeNet.of(stack).index}"


def holder_pid(stack: Stack) -> int:
    proc = stack.procs.get("node-ns")
    if proc is None or not proc.alive():
        raise StackError("node-ns is not running: the node's namespaces are gone")
    return proc.pid


def enter_node(stack: Stack) -> list[str]:
    """The command prefix that runs a process inside the node's namespaces."""
    nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
    return [nsenter, f"--target={holder_pid(stack)}", "--mount", "--net", "--"]


def in_node(stack: Stack, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*enter_node(stack), *argv], capture_output=True, text=True,
                          timeout=timeout)


# ---- node-ns ------------------------------------------------------------------------

def ns_prepare(stack: Stack, ports: Ports) -> None:
    net = NodeNet.of(stack)
    d = node_dir(stack)
    d.mkdir(parents=True, exist_ok=True)
    spec = {
        "node_dir": str(d), "host_if": net.host_if, "node_if": net.node_if,
        "host_ip": net.host_ip, "node_ip": net.node_ip, "link_prefix": 30,
        "routes": [net.service_cidr, net.pod_cidr], "cgroup_root": cgroup_root(stack),
    }
    (d / "ns.json").write_text(json.dumps(spec, indent=1))


def ns_args(stack: Stack, ports: Ports) -> list[str]:
    return ["-m", "devstack.node.ns", str(node_dir(stack) / "ns.json")]


def ns_ready(stack: Stack) -> tuple[bool, str]:
    ready = node_dir(stack) / "ns-ready"
    if not ready.exists():
        return False, "namespaces not set up yet"
    return True, ready.read_text().strip()


# ---- the API server at the node's door ------------------------------------------------

def proxy_args(stack: Stack, ports: Ports) -> list[str]:
    net = NodeNet.of(stack)
    return ["-m", "devstack.node.proxy", f"--listen={net.host_ip}:{ports['listen']}",
            f"--to=127.0.0.1:{stack.ports['kube-apiserver']}"]


def proxy_ready(stack: Stack) -> tuple[bool, str]:
    net = NodeNet.of(stack)
    try:
        with socket.create_connection((net.host_ip, stack.ports["node-apiserver-proxy"]), timeout=2):
            return True, "ok"
    except OSError as e:
        return False, str(e)


def apiserver_endpoint(stack: Stack) -> None:
    """The `kubernetes` Service's EndpointSlice: the proxy, where pods reach the API server."""
    net = NodeNet.of(stack)
    port = stack.ports["node-apiserver-proxy"]
    body = {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {
            "kubernetes.io/service-name": "kubernetes",
            "endpointslice.kubernetes.io/managed-by": "devstack.raykueue.io"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [net.host_ip], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }
    path = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    if stack.api.get_or_none(f"{path}/kubernetes") is None:
        stack.api.call("POST", path, body)
    else:
        stack.api.call("PUT", f"{path}/kubernetes", body)


def node_kubeconfig(stack: Stack) -> Path:
    """The admin credentials, at the proxy; the API server's certificate names
    `kubernetes`, not the proxy's address, so the name to verify is given."""
    net = NodeNet.of(stack)
    cfg = yaml.safe_load(stack.kubeconfig.read_text())
    cluster = cfg["clusters"][0]["cluster"]
    cluster["server"] = f"https://{net.host_ip}:{stack.ports['node-apiserver-proxy']}"
    cluster["tls-server-name"] = "kubernetes"
    path = node_dir(stack) / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


# ---- containerd ---------------------------------------------------------------------

def containerd_socket(stack: Stack) -> Path:
    return node_dir(stack) / "containerd" / "containerd.sock"


def containerd_config(stack: Stack) -> str:
    d = node_dir(stack) / "containerd"
    cni = node_dir(stack) / "cni"
    runc = shutil.which("runc") or "/usr/bin/runc"
    return f"""\
version = 3
root = "{d / 'root'}"
state = "{d / 'state'}"

[grpc]
  address = "{containerd_socket(stack)}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  # containerd cannot lower a process's oom_score_adj below its own here: the
  # machine withholds CAP_SYS_RESOURCE, and the kubelet asks -998 for sandboxes.
  restrict_oom_score_adj = true
  # The pods' network namespaces are mounted under the state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true
  # Hybrid cgroups here: hugetlb is only in the unified (v2) mount, not in v1.
  disable_hugetlb_controller = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni / 'net.d'}"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{d / 'runc'}"
        SystemdCgroup = false
"""


def cni_config(stack: Stack) -> dict:
    """The bridge plugin makes `cni0` inside the node; host-local hands out the pod /24."""
    net = NodeNet.of(stack)
    return {
        "cniVersion": "1.0.0", "name": "raykueue-node",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(node_dir(stack) / "cni" / "ipam"),
                      "ranges": [[{"subnet": net.pod_cidr, "gateway": net.pod_gateway}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd_prepare(stack: Stack, ports: Ports) -> None:
    d = node_dir(stack)
    (d / "containerd").mkdir(parents=True, exist_ok=True)
    (d / "containerd" / "config.toml").write_text(containerd_config(stack))
    netd = d / "cni" / "net.d"
    netd.mkdir(parents=True, exist_ok=True)
    (netd / "10-raykueue.conflist").write_text(json.dumps(cni_config(stack), indent=1))


def containerd_args(stack: Stack, ports: Ports) -> list[str]:
    return [f"--config={node_dir(stack) / 'containerd' / 'config.toml'}", "--log-level=warn"]


def ctr(stack: Stack, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """ctr from the machine: containerd's socket is a file in the stack dir."""
    return subprocess.run([str(stack.binary("ctr")), f"--address={containerd_socket(stack)}",
                           f"--namespace={CRI_NAMESPACE}", *args],
                          capture_output=True, text=True, timeout=timeout)


def containerd_ready(stack: Stack) -> tuple[bool, str]:
    if not containerd_socket(stack).exists():
        return False, "no socket yet"
    done = ctr(stack, "version", timeout=10)
    return done.returncode == 0, (done.stdout + done.stderr).strip()[-300:]


# ---- images -------------------------------------------------------------------------

def image_cache() -> Path:
    return Path(os.environ.get("RAYKUEUE_IMAGE_CACHE") or Path.home() / ".cache/raykueue/image")


def build_image() -> dict[str, str]:
    """scripts/build-image (a no-op when nothing changed): RAYKUEUE_IMAGE and its archive."""
    done = subprocess.run([str(BUILD_IMAGE)], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise StackError(f"scripts/build-image exited {done.returncode}:\n{done.stderr[-3000:]}")
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def image_ref_file(stack: Stack) -> Path:
    return node_dir(stack) / "image"


def raykueue_image(stack: Stack) -> str:
    """The raykueue image in the node's containerd (what the tests install)."""
    return image_ref_file(stack).read_text().strip()


def import_images(stack: Stack, log) -> None:
    """The pause image and raykueue's own, into containerd's CRI namespace."""
    built = build_image()
    pause = image_cache() / "pause.tar"
    if not pause.exists():
        raise StackError(f"{pause} is missing; run controlplane/node/build.sh")
    for archive, ref in ((pause, PAUSE_IMAGE),
                         (Path(built["RAYKUEUE_IMAGE_ARCHIVE"]), built["RAYKUEUE_IMAGE"])):
        if ctr(stack, "images", "check", f"name=={ref}").stdout.count(ref):
            continue
        done = ctr(stack, "images", "import", "--no-unpack=false", str(archive))
        if done.returncode != 0:
            raise StackError(f"ctr images import {archive}: {done.stderr.strip()}")
    image_ref_file(stack).write_text(built["RAYKUEUE_IMAGE"] + "\n")
    log(f"images in the node: {PAUSE_IMAGE}, {built['RAYKUEUE_IMAGE']}")


# ---- kubelet ------------------------------------------------------------------------

def kubelet_config(stack: Stack, ports: Ports) -> dict:
    net = NodeNet.of(stack)
    d = node_dir(stack)
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        # This machine mounts cgroup v1; the v1beta1 default of failCgroupV1 is true
        # in 1.36 (pkg/kubelet/apis/config/v1beta1/defaults.go), so say false.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root(stack),
        "containerRuntimeEndpoint": f"unix://{containerd_socket(stack)}",
        "address": net.node_ip, "port": ports["kubelet"], "readOnlyPort": 0,
        "healthzBindAddress": net.node_ip, "healthzPort": ports["healthz"],
        # Nothing but the API server (through the node's veth) can reach it.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(d / "pod-logs"),
        # No cluster DNS here, and the machine's resolver is not the pods' business.
        "resolvConf": str(d / "resolv.conf"),
        "registerWithTaints": [NODE_TAINT],
        "maxPods": 16,
        # Its own oom_score_adj stays as it is (lowering it needs CAP_SYS_RESOURCE).
        "oomScoreAdj": 0,
        # A shared machine's disk and memory are not this node's to guard.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
    }


def kubelet_prepare(stack: Stack, ports: Ports) -> None:
    d = node_dir(stack)
    for sub in ("kubelet", "pod-logs"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "resolv.conf").write_text("")
    (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(stack, ports), sort_keys=False))
    node_kubeconfig(stack)


def kubelet_args(stack: Stack, ports: Ports) -> list[str]:
    net = NodeNet.of(stack)
    d = node_dir(stack)
    return [
        f"--config={d / 'kubelet.yaml'}", f"--kubeconfig={d / 'kubeconfig'}",
        f"--root-dir={d / 'kubelet'}", f"--hostname-override={NODE_NAME}",
        f"--node-ip={net.node_ip}", f"--node-labels={'='.join(NODE_LABEL)},type=real",
        "--v=1",
    ]


def kubelet_ready(stack: Stack) -> tuple[bool, str]:
    node = stack.api.get_or_none(f"/api/v1/nodes/{NODE_NAME}")
    if node is None:
        return False, f"Node {NODE_NAME} not registered yet"
    ready = condition(node, "Ready")
    return ready == "True", f"Node {NODE_NAME} Ready={ready}"


# ---- kube-proxy ---------------------------------------------------------------------

def kube_proxy_prepare(stack: Stack, ports: Ports) -> None:
    net = NodeNet.of(stack)
    cfg = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(node_kubeconfig(stack))},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": net.pod_cidr,
        "bindAddress": net.node_ip,
        "healthzBindAddress": f"{net.node_ip}:{ports['healthz']}",
        "metricsBindAddress": f"{net.node_ip}:{ports['metrics']}",
        "nodePortAddresses": [f"{net.node_ip}/32"],
        # Zero: leave the conntrack sysctls alone (nf_conntrack_max is the machine's).
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False},
    }
    (node_dir(stack) / "kube-proxy.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def kube_proxy_args(stack: Stack, ports: Ports) -> list[str]:
    return [f"--config={node_dir(stack) / 'kube-proxy.yaml'}", "--v=1"]


def kube_proxy_ready(stack: Stack) -> tuple[bool, str]:
    net = NodeNet.of(stack)
    return http_ok(f"http://{net.node_ip}:{stack.procs['kube-proxy'].ports['healthz']}/healthz")


# ---- the controllers a Deployment (and the chart's uninstall hook, a Job) needs -------------

NODE_CONTROLLERS = ("deployment-controller", "replicaset-controller",
                    "endpointslice-controller", "disruption-controller", "job-controller")


def node_controllers_args(stack: Stack, ports: Ports) -> list[str]:
    cert_dir = stack.dir / "node-controllers"
    cert_dir.mkdir(parents=True, exist_ok=True)
    return [
        f"--kubeconfig={stack.kubeconfig}",
        f"--authentication-kubeconfig={stack.kubeconfig}",
        f"--authorization-kubeconfig={stack.kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={ports['secure']}", f"--cert-dir={cert_dir}",
        "--leader-elect=false",
        f"--controllers={','.join(NODE_CONTROLLERS)}",
        "--use-service-account-credentials=false",
        "--v=1",
    ]
