"""`Stack`: a handle on one stack directory, its state.json, files and processes.

It keeps nothing itself: every property reads state.json (state.py) afresh and
every change writes it whole, so two handles on one directory never disagree
(the one `up("api")` returned still sees what a later `up("e2e")` added).
"""

from __future__ import annotations

import os
import ssl
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import yaml

from . import procs, state
from .components import COMPONENTS
from .config import StackConfig
from .controlplane import pki
from .controlplane.kubeapi import KubeApi
from .controlplane.objects import crd_files, crds_digest, install_crds
from .procs import Proc, StackError, free_ports
from .stackview import Log


def _main_ports(components: dict[str, Proc]) -> dict[str, int]:
    return {n: p.ports[COMPONENTS[n].ports[0]] for n, p in components.items()
            if n in COMPONENTS and COMPONENTS[n].ports and COMPONENTS[n].ports[0] in p.ports}


class Stack:
    """A handle on a stack directory. Build one with `up()` or `Stack.load()`."""

    def __init__(self, config: StackConfig):
        self.config = config
        self.dir = config.stack_dir.resolve()

    @classmethod
    def load(cls, config: StackConfig | None = None) -> Stack | None:
        """The stack recorded in the config's stack dir, or None."""
        stack = cls(config or StackConfig())
        recorded = state.read(stack.state_file)
        if recorded is None:
            return None
        if recorded.bin_dir:
            stack.config.bin_dir = Path(recorded.bin_dir)
        return stack

    # ---- paths ------------------------------------------------------------------
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

    def binary(self, name: str) -> Path:
        return self.config.binary(name)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    # ---- state.json, read every time ----------------------------------------------
    def read(self) -> state.State:
        return state.read(self.state_file) or state.State(bin_dir=str(self.config.bin_dir),
                                                           kueue_mode=self.config.kueue_mode)

    def record(self, **changes) -> None:
        """Write state.json with `changes` (fields of state.State) applied."""
        self._write(replace(self.read(), **changes))

    def _write(self, st: state.State) -> None:
        ports = _main_ports(st.components)
        server = f"https://127.0.0.1:{ports['kube-apiserver']}" if "kube-apiserver" in ports else None
        state.write(self.state_file, st, {
            "stack_dir": str(self.dir), "server": server, "kubeconfig": str(self.kubeconfig),
            "ca_file": str(self.ca_file), "ports": ports})

    @property
    def procs(self) -> dict[str, Proc]:
        return self.read().components

    @property
    def kueue_mode(self) -> str:
        return self.read().kueue_mode

    @property
    def ports(self) -> dict[str, int]:
        """Each component's main port (its first declared one)."""
        return _main_ports(self.procs)

    @property
    def tier(self) -> str | None:
        return self.read().tier

    @property
    def owner(self) -> str:
        return self.read().owner

    @property
    def etcd_data(self) -> str | None:
        return self.read().etcd_data

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def api(self) -> KubeApi:
        return KubeApi(self.server, self.ca_file, self.admin_cert.cert, self.admin_cert.key)

    # ---- health -------------------------------------------------------------------
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
        st = self.read()
        comps = {}
        for name in COMPONENTS:
            p = st.components.get(name)
            comps[name] = {"state": "not started"} if p is None else {
                "state": "running" if p.alive() else "dead",
                "pid": p.pid, "ports": p.ports, "log": p.log}
        return {
            "tier": st.tier,
            "owner": st.owner,
            "kueue_mode": st.kueue_mode,
            "users": state.live_users(self.dir),
            "stack_dir": str(self.dir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server if "kube-apiserver" in self.ports else None,
            "apiserver_ready": self.apiserver_ready(),
            "components": comps,
        }

    # ---- helpers for tests and scripts -----------------------------------------------
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

    # ---- processes ------------------------------------------------------------------
    def spawn(self, name: str, argv: list[str], ports: dict[str, int],
              env: dict[str, str] | None = None) -> Proc:
        """Start argv as component `name` and record it in state.json."""
        exe = argv[argv.index("--") + 1] if os.path.basename(argv[0]) == "nsenter" else argv[0]
        if not os.access(exe, os.X_OK):
            raise StackError(f"{name}: binary {exe} is missing; run controlplane/build.sh "
                             f"(RAYKUEUE_BIN_DIR={self.config.bin_dir})")
        proc = procs.spawn(name, argv, self.log_path(name), cwd=self.dir, ports=ports, env=env)
        st = self.read()
        st.components[name] = proc
        self._write(st)
        return proc

    def start(self, name: str) -> Proc:
        """Start component `name` as components.py declares it, on fresh ports."""
        comp = COMPONENTS[name]
        ports = dict(zip(comp.ports, free_ports(len(comp.ports)), strict=True))
        if comp.prepare is not None:
            comp.prepare(self, ports)
        wrap = comp.wrap(self) if comp.wrap is not None else []
        argv = [*wrap, str(self.binary(comp.binary)), *comp.args(self, ports)]
        proc = self.spawn(name, argv, ports, self._env(name))
        if comp.after_start is not None:
            comp.after_start(self)
        return proc

    def _env(self, name: str) -> dict[str, str] | None:
        comp = COMPONENTS[name]
        env = {"KUBECONFIG": str(self.kubeconfig)} if comp.kubeconfig_env else {}
        if comp.env is not None:
            env.update(comp.env(self))
        return env or None

    def ensure_started(self, name: str, log: Log) -> bool:
        """Start `name` unless it runs; True when it was started (and is to be waited for)."""
        proc = self.procs.get(name)
        if proc is not None and proc.alive():
            return False
        if proc is not None:
            log(f"{name} is dead; restarting it (old log kept in {proc.log})")
            self.forget(name)
        self.start(name)
        return True

    def wait_ready(self, name: str, check: Callable[[], tuple[bool, str]],
                   timeout: float | None = None) -> None:
        procs.wait_ready(self.procs[name], check, timeout or self.config.ready_timeout)

    def stop(self, name: str, grace: float = 10.0) -> None:
        proc = self.procs.get(name)
        if proc is not None:
            procs.stop(proc, grace)
            self.forget(name)

    def forget(self, name: str) -> None:
        st = self.read()
        st.components.pop(name, None)
        self._write(st)

    # ---- files ---------------------------------------------------------------------
    def ensure_pki(self) -> None:
        pki.ensure_stack_pki(self.pki_dir, self.admin_cert)

    def write_kubeconfig(self, server: str | None = None) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "raykueue", "cluster": {
                "server": server or self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(self.admin_cert.cert),
                "client-key": str(self.admin_cert.key)}}],
            "contexts": [{"name": "raykueue", "context": {"cluster": "raykueue", "user": "admin"}}],
            "current-context": "raykueue",
        }
        tmp = self.kubeconfig.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(cfg, sort_keys=False))
        os.replace(tmp, self.kubeconfig)

    def install_crds(self) -> list[str]:
        """Server-side apply every CRD; skipped when the same files went in already."""
        files = crd_files(self.config)
        digest = crds_digest(files)
        st = self.read()
        if st.crds_digest == digest and st.crd_names:
            return st.crd_names
        names = install_crds(self.api, files, self.config.ready_timeout)
        self.record(crds_digest=digest, crd_names=names)
        return names
