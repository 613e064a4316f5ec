"""Start, reuse, upgrade and stop the local control plane.

Tier `api`: etcd, kube-apiserver, kube-controller-manager, every CRD and the
sample Kueue objects. Tier `e2e` adds kube-scheduler, kwok (with fake nodes), the
Kueue manager and the KubeRay operator. Every process binds 127.0.0.1 on a free
port, runs in its own session (so a stack outlives the `up` that started it) and
logs to `<stack dir>/logs/<name>.log`. `<stack dir>/state.json` records pids,
ports and paths so that `down`, `status` and other processes find the stack.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import kueue_shipped, pki
from .config import KUEUE_MODE_ENV, TIERS, StackConfig
from .kubeapi import KubeApi, KubeError, object_path

STATE_VERSION = 1

# name -> (tier, components it needs running)
COMPONENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "etcd": ("api", ()),
    "kube-apiserver": ("api", ("etcd",)),
    "kube-controller-manager": ("api", ("kube-apiserver",)),
    "kube-scheduler": ("e2e", ("kube-apiserver",)),
    "kwok": ("e2e", ("kube-apiserver",)),
    "kueue": ("e2e", ("kube-apiserver",)),
    "ray-operator": ("e2e", ("kube-apiserver",)),
}
STOP_ORDER = ["ray-operator", "kueue", "kwok", "kube-scheduler",
              "kube-controller-manager", "kube-apiserver", "etcd"]
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
KUEUE_NAMESPACE = "kueue-system"
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


class StackError(RuntimeError):
    """A component would not start; the message says which and quotes its log."""


def components_for(tier: str) -> list[str]:
    want = TIERS.index(tier)
    return [n for n, (t, _) in COMPONENTS.items() if TIERS.index(t) <= want]


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text.splitlines()[-lines:])


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def _pid_runs(pid: int, binary: str) -> bool:
    """Guard against pid reuse: the pid must still run the binary we started."""
    if not pid_alive(pid):
        return False
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return True  # no /proc: trust the pid
    return os.path.basename(exe).startswith(os.path.basename(binary))


def _http_ok(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
            body = r.read(2000).decode(errors="replace")
            return r.status == 200, body
    except urllib.error.HTTPError as e:
        return False, f"HTTP {e.code}: {e.read(2000).decode(errors='replace')}"
    except (OSError, ssl.SSLError) as e:
        return False, str(e)


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _tls_port_open(port: int) -> bool:
    """A full TLS handshake (a bare connect makes Go servers log handshake errors)."""
    with contextlib.suppress(OSError, ssl.SSLError), \
            socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
            _insecure().wrap_socket(raw, server_hostname="localhost"):
        return True
    return False


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
            f"devstack cannot write them ({e}); create any self-signed pair there"
        ) from e


@dataclass
class Proc:
    name: str
    pid: int
    binary: str
    log: str
    ports: dict[str, int] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return _pid_runs(self.pid, self.binary)


class Stack:
    """A running (or starting) stack. Build one with `up()` or `Stack.load()`."""

    def __init__(self, config: StackConfig):
        self.config = config
        self.dir = config.stack_dir.resolve()
        self.tier: str | None = None
        self.procs: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}
        self.etcd_data: str | None = None
        self.started_at: float = time.time()
        self.crds_digest: str | None = None
        self.crd_names: list[str] = []
        # "manual" (scripts/cluster up: stays up) or "session" (a test session started
        # it: the last session using it stops it)
        self.owner: str = "manual"
        # [kueue-mode] which Kueue this stack runs (kueue_shipped.MODES)
        self.kueue_mode: str = config.kueue_mode
        self._popen: dict[str, subprocess.Popen] = {}

    # ---- paths ------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def pki_dir(self) -> Path:
        return self.dir / "pki"

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def admin_cert(self) -> pki.Pair:
        return pki.Pair(self.pki_dir / "admin.crt", self.pki_dir / "admin.key")

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def api(self) -> KubeApi:
        return KubeApi(self.server, self.ca_file, self.admin_cert.cert, self.admin_cert.key)

    def binary(self, name: str) -> Path:
        return self.config.binary(name)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    # ---- state --------------------------------------------------------------
    def save(self) -> None:
        state = {
            "version": STATE_VERSION,
            "tier": self.tier,
            "stack_dir": str(self.dir),
            "bin_dir": str(self.config.bin_dir),
            "server": self.server if "kube-apiserver" in self.ports else None,
            "kubeconfig": str(self.kubeconfig),
            "ca_file": str(self.ca_file),
            "etcd_data": self.etcd_data,
            "ports": self.ports,
            "started_at": self.started_at,
            "owner": self.owner,
            "kueue_mode": self.kueue_mode,  # [kueue-mode]
            "crds_digest": self.crds_digest,
            "crd_names": self.crd_names,
            "components": {n: p.__dict__ for n, p in self.procs.items()},
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.state_file)

    @classmethod
    def load(cls, config: StackConfig | None = None) -> Stack | None:
        config = config or StackConfig()
        stack = cls(config)
        try:
            state = json.loads(stack.state_file.read_text())
        except (OSError, ValueError):
            return None
        if state.get("version") != STATE_VERSION:
            return None
        stack.tier = state.get("tier")
        stack.ports = {k: int(v) for k, v in state.get("ports", {}).items()}
        stack.etcd_data = state.get("etcd_data")
        stack.started_at = state.get("started_at", 0.0)
        stack.owner = state.get("owner", "manual")
        stack.kueue_mode = state.get("kueue_mode", kueue_shipped.MINIMAL)  # [kueue-mode]
        stack.crds_digest = state.get("crds_digest")
        stack.crd_names = state.get("crd_names") or []
        stack.procs = {n: Proc(**p) for n, p in state.get("components", {}).items()}
        if state.get("bin_dir"):
            stack.config.bin_dir = Path(state["bin_dir"])
        return stack

    # ---- health ---------------------------------------------------------------
    def dead_components(self) -> list[str]:
        return [n for n, p in self.procs.items() if not p.alive()]

    def apiserver_ready(self) -> bool:
        if "kube-apiserver" not in self.ports:
            return False
        try:
            status, _ = self.api.request("GET", "/readyz", timeout=3)
            return status == 200
        except (OSError, ssl.SSLError):
            return False

    def status(self) -> dict:
        comps = {}
        for name in COMPONENTS:
            p = self.procs.get(name)
            if p is None:
                comps[name] = {"state": "not started"}
                continue
            comps[name] = {
                "state": "running" if p.alive() else "dead",
                "pid": p.pid,
                "ports": p.ports,
                "log": p.log,
            }
        return {
            "tier": self.tier,
            "owner": self.owner,
            "kueue_mode": self.kueue_mode,  # [kueue-mode]
            "users": _live_users(self.dir),
            "stack_dir": str(self.dir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server if "kube-apiserver" in self.ports else None,
            "apiserver_ready": self.apiserver_ready(),
            "components": comps,
        }

    # ---- helpers for tests and scripts -------------------------------------
    def kubectl(self, *args: str, check: bool = False, input: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.binary("kubectl")), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True, text=True, check=check, input=input, timeout=timeout,
        )

    def env(self) -> dict[str, str]:
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "RAYKUEUE_STACK_DIR": str(self.dir),
            "RAYKUEUE_BIN_DIR": str(self.config.bin_dir),
        }

    # ---- process control -------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], ports: dict[str, int],
               env: dict[str, str] | None = None) -> Proc:
        binary = argv[0]
        if not os.access(binary, os.X_OK):
            raise StackError(
                f"{name}: binary {binary} is missing; run controlplane/build.sh "
                f"(RAYKUEUE_BIN_DIR={self.config.bin_dir})"
            )
        log = self.log_path(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            out.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
            out.flush()
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})}, cwd=self.dir, start_new_session=True,
            )
        self._popen[name] = popen
        proc = Proc(name=name, pid=popen.pid, binary=binary, log=str(log), ports=ports, argv=argv)
        self.procs[name] = proc
        self.save()
        return proc

    def _exited(self, name: str) -> int | None:
        """Exit code if the component has exited, else None."""
        popen = self._popen.get(name)
        if popen is not None:
            return popen.poll()
        return None if self.procs[name].alive() else -1

    def wait_ready(self, name: str, check: Callable[[], tuple[bool, str]],
                   timeout: float | None = None) -> None:
        timeout = timeout or self.config.ready_timeout
        deadline = time.monotonic() + timeout
        last = "not checked yet"
        interval = 0.1
        while True:
            code = self._exited(name)
            if code is not None:
                raise StackError(
                    f"{name} exited with code {code} while starting; last lines of "
                    f"{self.log_path(name)}:\n{tail(self.log_path(name))}"
                )
            try:
                ok, last = check()
            except Exception as e:
                ok, last = False, f"{type(e).__name__}: {e}"
            if ok:
                return
            if time.monotonic() > deadline:
                raise StackError(
                    f"{name} not ready after {timeout:.0f}s (last check: {last[:500]}); "
                    f"last lines of {self.log_path(name)}:\n{tail(self.log_path(name))}"
                )
            time.sleep(interval)
            interval = min(interval * 1.5, 1.0)

    def stop(self, name: str, grace: float = 10.0) -> None:
        proc = self.procs.get(name)
        if proc is None:
            return
        if proc.alive():
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while proc.alive() and time.monotonic() < deadline:
                popen = self._popen.get(name)
                if popen is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        popen.wait(timeout=0.1)
                else:
                    time.sleep(0.1)
            if proc.alive():
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
        popen = self._popen.pop(name, None)
        if popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)
        del self.procs[name]

    # ---- the components ------------------------------------------------------------
    def _ensure_pki(self) -> None:
        d = self.pki_dir
        ca = pki.ensure_ca(d)
        pki.issue(ca, pki.Pair(d / "apiserver.crt", d / "apiserver.key"),
                  common_name="kube-apiserver",
                  dns_names=("localhost", "kubernetes", "kubernetes.default",
                             "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
                  ip_addresses=("127.0.0.1", "10.96.0.1"), server=True)
        pki.issue(ca, self.admin_cert, common_name="raykueue-admin",
                  organizations=("system:masters",), client=True)
        pki.ensure_rsa_key(d / "sa.key", d / "sa.pub")

    def _write_kubeconfig(self) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "raykueue", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(self.admin_cert.cert),
                "client-key": str(self.admin_cert.key)}}],
            "contexts": [{"name": "raykueue", "context": {"cluster": "raykueue", "user": "admin"}}],
            "current-context": "raykueue",
        }
        tmp = self.kubeconfig.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(cfg, sort_keys=False))
        os.replace(tmp, self.kubeconfig)

    def _start_etcd(self) -> None:
        client, peer = free_ports(2)
        self.ports["etcd"] = client
        self.etcd_data = tempfile.mkdtemp(prefix="raykueue-etcd-")
        self.save()
        url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._spawn("etcd", [
            str(self.binary("etcd")),
            "--name=raykueue", f"--data-dir={self.etcd_data}",
            f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=raykueue={peer_url}",
            "--unsafe-no-fsync=true", "--log-level=warn",
        ], {"client": client, "peer": peer})

    def _check_etcd(self) -> tuple[bool, str]:
        ok, body = _http_ok(f"http://127.0.0.1:{self.ports['etcd']}/health")
        return ok and '"health":"true"' in body.replace(" ", ""), body

    def _start_apiserver(self) -> None:
        (port,) = free_ports(1)
        self.ports["kube-apiserver"] = port
        d = self.pki_dir
        self._write_kubeconfig()
        self._spawn("kube-apiserver", [
            str(self.binary("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={d}",
            f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            f"--service-cluster-ip-range={self.config.service_cluster_ip_range}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # It taints every new Node not-ready until node-lifecycle-controller clears it;
            # that controller would also evict pods when kwok's heartbeat is late.
            "--disable-admission-plugins=TaintNodesByCondition",
            # [kueue-mode] The aggregation layer (Kueue's visibility API when shipped);
            # the same in both modes so that the API server never depends on the mode.
            *kueue_shipped.apiserver_aggregation_flags(*kueue_shipped.ensure_aggregation_pki(d)),
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--v=1",
        ], {"secure": port})

    def _check_apiserver(self) -> tuple[bool, str]:
        status, body = self.api.request("GET", "/readyz", timeout=3)
        return status == 200, body.decode(errors="replace")

    def _component_args(self, port: int, name: str) -> list[str]:
        cert_dir = self.dir / name
        cert_dir.mkdir(parents=True, exist_ok=True)
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={cert_dir}",
            "--leader-elect=false",
        ]

    def _start_controller_manager(self) -> None:
        (port,) = free_ports(1)
        self.ports["kube-controller-manager"] = port
        d = self.pki_dir
        self._spawn("kube-controller-manager", [
            str(self.binary("kube-controller-manager")),
            *self._component_args(port, "kube-controller-manager"),
            "--controllers=garbage-collector-controller,namespace-controller,"
            "serviceaccount-controller,root-ca-certificate-publisher-controller",
            f"--root-ca-file={self.ca_file}",
            f"--service-account-private-key-file={d / 'sa.key'}",
            "--use-service-account-credentials=false",
            "--v=1",
        ], {"secure": port})

    def _check_secure_healthz(self, name: str) -> tuple[bool, str]:
        return _http_ok(f"https://127.0.0.1:{self.ports[name]}/healthz", _insecure())

    def _check_controller_manager(self) -> tuple[bool, str]:
        ok, body = self._check_secure_healthz("kube-controller-manager")
        if not ok:
            return ok, body
        # The serviceaccount controller is what lets pods be created at all.
        if self.api.get_or_none("/api/v1/namespaces/default/serviceaccounts/default") is None:
            return False, "ServiceAccount default/default not created yet"
        return True, "ok"

    def _start_scheduler(self) -> None:
        (port,) = free_ports(1)
        self.ports["kube-scheduler"] = port
        self._spawn("kube-scheduler", [
            str(self.binary("kube-scheduler")),
            *self._component_args(port, "kube-scheduler"),
            "--v=1",
        ], {"secure": port})

    def _start_kwok(self) -> None:
        (port,) = free_ports(1)
        self.ports["kwok"] = port
        stages = []
        for sub in ("node-fast", "node-heartbeat", "pod-fast"):
            stages += sorted(str(p) for p in (self.config.stage_dir / sub).glob("*.yaml"))
        if not stages:
            raise StackError(f"kwok: no stage files under {self.config.stage_dir}; run controlplane/build.sh")
        key, value = KWOK_NODE_ANNOTATION
        self._spawn("kwok", [
            str(self.binary("kwok")),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={','.join(stages)}",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            f"--server-address=127.0.0.1:{port}",
        ], {"server": port})

    def _check_kwok(self) -> tuple[bool, str]:
        ok, body = _http_ok(f"http://127.0.0.1:{self.ports['kwok']}/healthz")
        if not ok:
            return ok, body
        nodes = self.api.get("/api/v1/nodes", query={"labelSelector": "type=kwok"})["items"]
        ready = [n["metadata"]["name"] for n in nodes if _condition(n, "Ready") == "True"]
        want = self.config.nodes.count
        return len(ready) >= want, f"{len(ready)}/{want} kwok nodes Ready"

    def _kueue_config(self, health: int, webhook: int, visibility: int | None = None) -> dict:
        # [kueue-mode] minimal: batch/job only; shipped: Kueue's own configuration.
        shipped = self.kueue_mode == kueue_shipped.SHIPPED
        base = (kueue_shipped.shipped_module().manager_config if shipped
                else kueue_shipped.MINIMAL_BASE)
        listen = kueue_shipped.Listeners(health=health, webhook=webhook,
                                         webhook_cert_dir=self.dir / "kueue" / "webhook-certs",
                                         visibility=visibility if shipped else None)
        return kueue_shipped.kueue_configuration(base, KUEUE_NAMESPACE, listen,
                                                 self.config.kueue_config)

    def _start_kueue(self) -> None:
        health, webhook, visibility = free_ports(3)
        self.ports["kueue"] = health
        kdir = self.dir / "kueue"
        pki.self_signed(pki.Pair(kdir / "webhook-certs/tls.crt", kdir / "webhook-certs/tls.key"),
                        "kueue-webhook")
        _hard_coded_pair(KUEUE_METRICS_CERT_DIR, "kueue-metrics")
        ports = {"health": health, "webhook": webhook}
        if self.kueue_mode == kueue_shipped.SHIPPED:  # [kueue-mode]
            _hard_coded_pair(kueue_shipped.VISIBILITY_CERT_DIR, "kueue-visibility")
            ports["visibility"] = visibility
        config_file = kdir / "config.yaml"
        config_file.write_text(yaml.safe_dump(
            self._kueue_config(health, webhook, ports.get("visibility")), sort_keys=False))
        self._spawn("kueue", [
            str(self.binary("kueue")), f"--config={config_file}", f"--kubeconfig={self.kubeconfig}",
        ], ports, env={"KUBECONFIG": str(self.kubeconfig)})

    def _check_kueue(self) -> tuple[bool, str]:
        ports = self.procs["kueue"].ports
        ok, body = _http_ok(f"http://127.0.0.1:{ports['health']}/readyz")
        if not ok:
            return ok, f"readyz: {body}"
        if not _tls_port_open(ports["webhook"]):
            return False, "webhook port not listening"
        cq = self.api.get_or_none(
            f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{self.config.samples.cluster_queue}")
        if cq is None:
            return True, "ok (no sample ClusterQueue)"
        active = _condition(cq, "Active")
        return active == "True", f"ClusterQueue {self.config.samples.cluster_queue} Active={active}"

    def _start_ray_operator(self) -> None:
        metrics, probe = free_ports(2)
        self.ports["ray-operator"] = probe
        self._spawn("ray-operator", [
            str(self.binary("ray-operator")),
            "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            f"--kubeconfig={self.kubeconfig}",
            "--log-stdout-encoder=console",
        ], {"metrics": metrics, "probe": probe}, env={"KUBECONFIG": str(self.kubeconfig)})

    def _check_ray_operator(self) -> tuple[bool, str]:
        return _http_ok(f"http://127.0.0.1:{self.procs['ray-operator'].ports['probe']}/readyz")

    # ---- objects ------------------------------------------------------------
    def crd_files(self) -> list[Path]:
        files = []
        for sub in ("kueue", "kuberay"):
            found = sorted((self.config.crd_dir / sub).glob("*.yaml"))
            if not found:
                raise StackError(f"no CRDs under {self.config.crd_dir / sub}; run controlplane/build.sh")
            files += found
        return files

    def install_crds(self) -> list[str]:
        """Server-side apply every CRD; skipped when the same files went in already."""
        files = self.crd_files()
        digest = hashlib.sha256()
        for f in files:
            digest.update(f.read_bytes())
        if self.crds_digest == digest.hexdigest() and self.crd_names:
            return self.crd_names
        # The files go to the API server as they are (apply-patch+yaml takes YAML):
        # parsing 5 MB of YAML here would cost more than the applies. Only the
        # head of each file (apiVersion, kind, metadata) is read, for the URL.
        docs = []
        for f in files:
            raw = f.read_bytes()
            if raw.count(b"\n---") > 0 and raw.lstrip().startswith(b"---"):
                raw = raw.lstrip()[3:]
            if b"\n---\n" in raw:
                raise StackError(f"{f}: expected one CRD per file")
            head = raw.split(b"\nspec:", 1)[0]
            meta = yaml.safe_load(head)
            docs.append((meta, raw))

        def apply(item: tuple[dict, bytes]) -> str:
            meta, raw = item
            self.api.call("PATCH", object_path(meta), raw,
                          query={"fieldManager": "raykueue-devstack", "force": "true"},
                          content_type="application/apply-patch+yaml")
            return meta["metadata"]["name"]

        with cf.ThreadPoolExecutor(max_workers=4) as pool:
            names = list(pool.map(apply, docs))
        self.crds_digest, self.crd_names = digest.hexdigest(), names
        return names

    def wait_crds_established(self, names: list[str]) -> None:
        def check() -> tuple[bool, str]:
            pending = []
            for n in names:
                crd = self.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
                if _condition(crd, "Established") != "True":
                    pending.append(n)
            return not pending, f"not Established: {pending}"
        self.wait_ready("kube-apiserver", check)

    def base_objects(self) -> list[dict]:
        s = self.config.samples
        objs: list[dict] = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.local_queue_namespace}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
             "metadata": {"name": s.flavor}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
             "metadata": {"name": s.cluster_queue},
             "spec": {
                 "namespaceSelector": {},
                 "resourceGroups": [{
                     "coveredResources": list(s.quota),
                     "flavors": [{"name": s.flavor, "resources": [
                         {"name": r, "nominalQuota": q} for r, q in s.quota.items()]}],
                 }],
             }},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": s.local_queue, "namespace": s.local_queue_namespace},
             "spec": {"clusterQueue": s.cluster_queue}},
        ]
        for name, value in s.priority_classes.items():
            objs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                         "metadata": {"name": name}, "value": value,
                         "description": f"raykueue devstack sample ({name})"})
        return objs

    def node_objects(self) -> list[dict]:
        n = self.config.nodes
        key, value = KWOK_NODE_ANNOTATION
        return [{
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": f"{n.prefix}{i}",
                "annotations": {key: value, "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"type": "kwok", "kubernetes.io/hostname": f"{n.prefix}{i}",
                           "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                           "kubernetes.io/role": "agent"},
            },
            "spec": {},
            "status": {"capacity": dict(n.capacity), "allocatable": dict(n.capacity),
                       "phase": "Running"},
        } for i in range(n.count)]

    def apply_objects(self, objs: list[dict]) -> None:
        for obj in objs:
            self.api.apply(object_path(obj), obj)
            if obj["kind"] == "Node":
                # status is a subresource: capacity must be there before the scheduler looks
                self.api.apply(object_path(obj) + "/status", {
                    "apiVersion": obj["apiVersion"], "kind": obj["kind"],
                    "metadata": {"name": obj["metadata"]["name"]}, "status": obj["status"]})


def _condition(obj: dict, ctype: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c.get("status")
    return None


@contextlib.contextmanager
def _locked(stack_dir: Path) -> Iterator[None]:
    stack_dir.mkdir(parents=True, exist_ok=True)
    with open(stack_dir / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _log(msg: str) -> None:
    print(f"devstack: {msg}", file=sys.stderr, flush=True)


def up(tier: str = "e2e", config: StackConfig | None = None, *, quiet: bool = False,
       user_pid: int | None = None) -> tuple[Stack, bool]:
    """Start the stack at `tier`, or reuse/upgrade one that is running.

    Returns (stack, started) where `started` is True when this call started etcd
    and the API server. With `user_pid` (a test session), the pid is recorded as a
    user of the stack and a stack it starts is marked "session": `release()` by
    the last live user stops it. Without it (scripts/cluster up) the stack is
    marked "manual" and only `down` stops it.
    Raises StackError naming every component that failed, with its log's tail.
    """
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}")
    config = config or StackConfig()
    log = (lambda m: None) if quiet else _log
    with _locked(config.stack_dir):
        t0 = time.monotonic()
        stack = Stack.load(config)
        started = False
        if stack is not None and not _healthy(stack):
            log("found a stale stack; cleaning it up")
            _down(stack, keep_logs=True)
            stack = None
        if stack is not None and stack.kueue_mode != config.kueue_mode:
            # [kueue-mode] never serve one mode's tests from the other's stack
            _other_mode(stack, config.kueue_mode, user_pid, log)
            _down(stack, keep_logs=True)
            stack = None
        if stack is None:
            stack = Stack(config)
            stack.dir.mkdir(parents=True, exist_ok=True)
            if stack.log_dir.exists():
                shutil.rmtree(stack.log_dir, ignore_errors=True)
            started = True
        else:
            log(f"reusing the {stack.tier} stack at {stack.dir}")
        if user_pid is None:
            stack.owner = "manual"
        else:
            if started:
                stack.owner = "session"
            _users_dir(stack.dir).mkdir(parents=True, exist_ok=True)
            (_users_dir(stack.dir) / str(user_pid)).touch()
        try:
            _bring_up(stack, tier, log)
        except BaseException:
            stack.save()
            raise
        log(f"{tier} stack ready in {time.monotonic() - t0:.1f}s; KUBECONFIG={stack.kubeconfig}")
        return stack, started


def _other_mode(stack: Stack, wanted: str, user_pid: int | None,
                log: Callable[[str], None]) -> None:
    """A stack runs the other Kueue mode: it may go if only a finished session started it."""
    others = [p for p in _live_users(stack.dir) if p != user_pid]
    if stack.owner != "session" or others:
        who = f"sessions {others} use it" if others else "it was started by hand (`up`)"
        raise StackError(
            f"the stack at {stack.dir} runs Kueue {stack.kueue_mode!r} but {wanted!r} was asked "
            f"({KUEUE_MODE_ENV}); {who}, so it is left alone. Stop it "
            f"(python -m devstack down) or use another RAYKUEUE_STACK_DIR.")
    log(f"the stack at {stack.dir} runs Kueue {stack.kueue_mode!r}, {wanted!r} was asked: "
        f"restarting it")


def _bring_up(stack: Stack, tier: str, log: Callable[[str], None]) -> None:
    stack._ensure_pki()
    failures: dict[str, str] = {}

    def ensure(name: str, start: Callable[[], None], check: Callable[[], tuple[bool, str]]) -> None:
        proc = stack.procs.get(name)
        if proc is not None and proc.alive():
            return
        if proc is not None:
            log(f"{name} is dead; restarting it (old log kept in {proc.log})")
            stack.procs.pop(name)
        t = time.monotonic()
        start()
        stack.wait_ready(name, check)
        log(f"{name} ready ({time.monotonic() - t:.1f}s)")

    # etcd and the API server: nothing works without them, so fail at once.
    ensure("etcd", stack._start_etcd, stack._check_etcd)
    ensure("kube-apiserver", stack._start_apiserver, stack._check_apiserver)
    stack._write_kubeconfig()

    # controller-manager starts while the CRDs go in.
    cm = stack.procs.get("kube-controller-manager")
    if cm is None or not cm.alive():
        stack.procs.pop("kube-controller-manager", None)
        stack._start_controller_manager()
    t = time.monotonic()
    crds = stack.install_crds()
    stack.wait_crds_established(crds)
    if stack.tier not in TIERS:
        # Only on a new stack: a reused one keeps the samples it was started with
        # (and whatever tests or people changed since).
        stack.apply_objects(stack.base_objects())
    log(f"{len(crds)} CRDs established, sample objects in place ({time.monotonic() - t:.1f}s)")
    try:
        stack.wait_ready("kube-controller-manager", stack._check_controller_manager)
        log("kube-controller-manager ready")
    except StackError as e:
        failures["kube-controller-manager"] = str(e)

    if TIERS.index(tier) >= TIERS.index("e2e"):
        plan = {
            "kube-scheduler": (stack._start_scheduler,
                               lambda: stack._check_secure_healthz("kube-scheduler")),
            "kwok": (stack._start_kwok, stack._check_kwok),
            "kueue": (stack._start_kueue, stack._check_kueue),
            "ray-operator": (stack._start_ray_operator, stack._check_ray_operator),
        }
        waiting = {}
        t = time.monotonic()
        for name, (start, check) in plan.items():
            proc = stack.procs.get(name)
            if proc is not None and proc.alive():
                continue
            stack.procs.pop(name, None)
            try:
                start()
                waiting[name] = check
            except StackError as e:
                failures[name] = str(e)
        if "kwok" in waiting:
            stack.apply_objects(stack.node_objects())
        with cf.ThreadPoolExecutor(max_workers=len(waiting) or 1) as pool:
            futures = {pool.submit(stack.wait_ready, n, c): n for n, c in waiting.items()}
            for fut in cf.as_completed(futures):
                name = futures[fut]
                try:
                    fut.result()
                    log(f"{name} ready ({time.monotonic() - t:.1f}s)")
                except StackError as e:
                    failures[name] = str(e)
                except KubeError as e:
                    failures[name] = f"{name}: {e}"
        if stack.kueue_mode == kueue_shipped.SHIPPED and "kueue" in stack.procs \
                and "kueue" not in failures:
            # [kueue-mode] Kueue's webhooks and APIService, once Kueue serves them.
            try:
                t = time.monotonic()
                kueue_shipped.register(stack)
                stack.wait_ready("kueue", lambda: kueue_shipped.registered(stack))
                log(f"Kueue's webhooks and visibility API registered ({time.monotonic() - t:.1f}s)")
            except (StackError, KubeError) as e:
                failures["kueue"] = f"kueue (registering its webhooks and APIService): {e}"
    if not failures:
        if stack.tier not in TIERS or TIERS.index(tier) > TIERS.index(stack.tier):
            stack.tier = tier
    elif stack.tier is None:
        stack.tier = "partial"  # `up` again retries what failed
    stack.save()
    if failures:
        raise StackError(
            f"{len(failures)} component(s) failed to start ({', '.join(failures)}); logs in "
            f"{stack.log_dir}\n\n" + "\n\n".join(failures.values())
        )


def _healthy(stack: Stack, patience: float = 30.0) -> bool:
    """etcd and the API server run and answer /readyz (a busy one gets `patience` s)."""
    core = [stack.procs.get("etcd"), stack.procs.get("kube-apiserver")]
    deadline = time.monotonic() + patience
    while all(p is not None and p.alive() for p in core):
        if stack.apiserver_ready():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return False


def _users_dir(stack_dir: Path) -> Path:
    return stack_dir / "users"


def _live_users(stack_dir: Path) -> list[int]:
    users = []
    d = _users_dir(stack_dir)
    for f in d.glob("*") if d.exists() else []:
        try:
            pid = int(f.name)
        except ValueError:
            continue
        if pid_alive(pid):
            users.append(pid)
        else:
            f.unlink(missing_ok=True)
    return users


def release(config: StackConfig | None = None, user_pid: int | None = None,
            *, keep_logs: bool = True) -> bool:
    """A test session is done with the stack. Stops it (returns True) when the stack
    was started by a session and no other live session uses it."""
    config = config or StackConfig()
    user_pid = user_pid or os.getpid()
    with _locked(config.stack_dir):
        (_users_dir(config.stack_dir) / str(user_pid)).unlink(missing_ok=True)
        stack = Stack.load(config)
        if stack is None or stack.owner != "session" or _live_users(config.stack_dir):
            return False
        _down(stack, keep_logs=keep_logs)
        return True


def _down(stack: Stack, keep_logs: bool = True) -> None:
    for name in STOP_ORDER:
        stack.stop(name)
    for name in list(stack.procs):
        stack.stop(name)
    if stack.etcd_data and Path(stack.etcd_data).name.startswith("raykueue-etcd-"):
        shutil.rmtree(stack.etcd_data, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        stack.state_file.unlink()
    with contextlib.suppress(FileNotFoundError):
        stack.kubeconfig.unlink()
    shutil.rmtree(_users_dir(stack.dir), ignore_errors=True)
    if not keep_logs:
        shutil.rmtree(stack.log_dir, ignore_errors=True)


def down(config: StackConfig | None = None, *, keep_logs: bool = True) -> bool:
    """Stop the stack recorded in the stack dir. Returns False if there was none."""
    config = config or StackConfig()
    with _locked(config.stack_dir):
        stack = Stack.load(config)
        if stack is None:
            return False
        _down(stack, keep_logs=keep_logs)
        return True


def _recorded(stack: Stack) -> Stack:
    """The stack as state.json has it now; call with the stack dir locked.

    A `Stack` object can be stale: the one `up("api")` returned knows nothing
    of components a later `up("e2e")` added. Saving it would drop them from
    state.json, and `down` would then leave them running.
    """
    current = Stack.load(stack.config)
    if current is None:
        return stack
    # Children this process spawned are reaped through their Popen objects.
    current._popen = stack._popen
    return current


def stop_component(stack: Stack, name: str) -> None:
    """Stop one component of a running stack (e.g. to test what happens without it)."""
    with _locked(stack.config.stack_dir):
        current = _recorded(stack)
        current.stop(name)
        current.save()
        stack.procs.pop(name, None)


# Components whose argv can be replayed as is: they take their ports on the
# command line, so a restart keeps them (and every client's kubeconfig) valid.
_READY_CHECKS: dict[str, Callable[[Stack], tuple[bool, str]]] = {
    "etcd": lambda s: s._check_etcd(),
    "kube-apiserver": lambda s: s._check_apiserver(),
}


def restart_component(stack: Stack, name: str = "kube-apiserver", *,
                      grace: float = 10.0, down_for: float = 0.0) -> float:
    """Stop one component and start it again with the same argv and ports.

    For the API server this keeps etcd and its data, so every object (and
    resourceVersion) survives and clients reconnect to the same URL, as after
    a rolling restart of a real control plane. `down_for` keeps it stopped a
    while first (fault tests). Returns the seconds from stop to ready again.
    """
    check = _READY_CHECKS.get(name)
    t0 = time.monotonic()
    with _locked(stack.config.stack_dir):
        current = _recorded(stack)
        proc = current.procs.get(name)
        if proc is None or not proc.argv:
            raise StackError(f"{name} is not running in {stack.dir}; nothing to restart")
        current.stop(name, grace=grace)
        if down_for > 0:
            time.sleep(down_for)
        current._spawn(name, list(proc.argv), dict(proc.ports))
        stack.procs[name] = current.procs[name]
    if check is not None:
        current.wait_ready(name, lambda: check(current))
    return time.monotonic() - t0
