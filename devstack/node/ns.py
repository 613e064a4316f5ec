"""The real node's namespaces: `python -m devstack.node.ns SPEC` makes and holds them.

The node tier's first process (component `node-ns`, devstack/node/kubelet.py). It

1. unshares a mount and a network namespace of its own: the node's;
2. makes a veth pair: one end in the machine's namespace with the host address,
   the other in the node's with the node address, and routes the stack's Service
   range and the node's pod range to the node (the API server calls ClusterIPs,
   which kube-proxy translates inside the node; replies to pods find their way);
3. inside the node: loopback up, forwarding on (a sysctl of that namespace only),
   and no default route, so nothing a pod sends can leave the machine;
4. in its mount namespace: the node's directory made a shared mount (the kubelet
   wants mount propagation), and the kernel tunables the kubelet checks shown
   with the values it wants (bind-mounted files), so that it never writes the
   machine's own vm.overcommit_memory, kernel.panic or kernel.panic_on_oops;
5. creates the kubelet's cgroup root in every cgroup v1 hierarchy.

containerd, the kubelet and kube-proxy join it with `nsenter --target PID --mount
--net`. On SIGTERM it removes the cgroup root (the stack has stopped everything
in it by then) and exits; the namespaces, the veth pair, the routes, the pods'
network namespaces, the bridge and every mount the node made go with the last
process in them.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000

# pkg/kubelet/cm/container_manager_linux.go setupKernelTunables (1.36): what the
# kubelet wants to read, and otherwise writes (the machine is shared).
KUBELET_TUNABLES = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}
CGROUP_V1 = Path("/sys/fs/cgroup")


def run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")


def unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


def cgroup_hierarchies(unified: bool = False) -> list[Path]:
    """The mounted v1 hierarchies (cpu, memory, ..., name=systemd); with `unified`,
    also the v2 mount of a hybrid machine (/sys/fs/cgroup/unified), where runc
    makes the pods' cgroups too."""
    types = ("cgroup", "cgroup2") if unified else ("cgroup",)
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mnt, fstype, *_ = line.split()
        if fstype in types and mnt.startswith(str(CGROUP_V1) + "/"):
            found.append(Path(mnt))
    return found


def own_cgroup(hierarchy: Path, name: str) -> Path:
    """The node's cgroup root in `hierarchy`; never a hierarchy's own root, which
    holds every process of the machine."""
    if not name.startswith("/raykueue-node-") or "/" in name.strip("/"):
        raise ValueError(f"cgroup root {name!r} is not a /raykueue-node-* of devstack's")
    return hierarchy / name.strip("/")


def make_cgroup_root(name: str) -> None:
    for hierarchy in cgroup_hierarchies():
        path = own_cgroup(hierarchy, name)
        path.mkdir(exist_ok=True)
        # A new cpuset has no CPUs and no memory nodes: give it its parent's.
        for knob in ("cpuset.cpus", "cpuset.mems"):
            own = path / knob
            if own.exists() and not own.read_text().strip():
                own.write_text((path.parent / knob).read_text())


def remove_cgroup_root(name: str) -> list[str]:
    """rmdir the tree bottom-up; returns what could not go (a process still in it)."""
    left = []
    for hierarchy in cgroup_hierarchies(unified=True):
        root = own_cgroup(hierarchy, name)
        if not root.is_dir():
            continue
        for dirpath, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
            try:
                os.rmdir(dirpath)
            except OSError as e:
                left.append(f"{dirpath}: {e.strerror}")
    return left


def namespace_members(own_mnt: str, host_mnt: str) -> list[int]:
    """Pids of the other processes in the node's mount namespace `own_mnt`: what the
    node still runs (containerd's shims outlive containerd and the kubelet).

    Refuses unless `own_mnt` is a namespace of its own, not the machine's
    `host_mnt`: there, "every process in this mount namespace" is every process
    on the machine.
    """
    if own_mnt == host_mnt or os.readlink("/proc/self/ns/mnt") != own_mnt:
        raise RuntimeError(f"not inside the node's own mount namespace ({own_mnt}, "
                           f"machine's {host_mnt}): refusing to list its processes")
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/mnt") == own_mnt:
                found.append(int(entry))
        except OSError:
            continue  # gone meanwhile
    return found


def cgroup_members(name: str) -> list[int]:
    """Pids in the kubelet's cgroup tree: the pods' processes, which run in mount
    namespaces of their own (so `namespace_members` does not see them)."""
    found: set[int] = set()
    for hierarchy in cgroup_hierarchies(unified=True):
        for dirpath, _, files in os.walk(own_cgroup(hierarchy, name)):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    found.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
    return sorted(found)


def node_processes(own_mnt: str, host_mnt: str, cgroup_root: str) -> list[int]:
    return sorted(set(namespace_members(own_mnt, host_mnt)) | set(cgroup_members(cgroup_root)))


def stop_members(own_mnt: str, host_mnt: str, cgroup_root: str,
                 timeout: float = 10.0) -> list[int]:
    """SIGKILL every other process of the node (each by its pid) until none is left."""
    deadline = time.monotonic() + timeout
    while (left := node_processes(own_mnt, host_mnt, cgroup_root)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)  # a killed process leaves the namespace as it exits
    return node_processes(own_mnt, host_mnt, cgroup_root)


def show_tunables(state_dir: Path) -> None:
    """Bind-mount files with the kubelet's wanted values over the ones that differ."""
    fakes = state_dir / "sysctl"
    for key, want in KUBELET_TUNABLES.items():
        real = Path("/proc/sys") / key
        if int(real.read_text().split()[0]) == want:
            continue
        fake = fakes / key.replace("/", ".")
        fake.parent.mkdir(parents=True, exist_ok=True)
        fake.write_text(f"{want}\n")
        run("mount", "--bind", "-o", "ro", str(fake), str(real))


def setup(spec: dict) -> tuple[str, str]:
    """Make the namespaces; returns (the node's mount namespace, the machine's)."""
    pid = os.getpid()
    host_mnt = os.readlink("/proc/self/ns/mnt")
    host_ns_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    unshare(CLONE_NEWNS | CLONE_NEWNET)
    own_mnt = os.readlink("/proc/self/ns/mnt")
    if own_mnt == host_mnt:
        raise RuntimeError("unshare left this process in the machine's mount namespace")
    host_ns = f"/proc/{pid}/fd/{host_ns_fd}"
    in_host = ("nsenter", f"--net={host_ns}")

    # Mounts made here stay here; the machine's still show up (slave).
    run("mount", "--make-rslave", "/")
    node_dir = Path(spec["node_dir"])
    node_dir.mkdir(parents=True, exist_ok=True)
    run("mount", "--bind", str(node_dir), str(node_dir))
    run("mount", "--make-rshared", str(node_dir))
    show_tunables(node_dir)

    host_if, node_if = spec["host_if"], spec["node_if"]
    run("ip", "link", "add", node_if, "type", "veth", "peer", "name", host_if, "netns", host_ns)
    run(*in_host, "ip", "addr", "add", f"{spec['host_ip']}/{spec['link_prefix']}", "dev", host_if)
    run(*in_host, "ip", "link", "set", host_if, "up")
    run("ip", "link", "set", "lo", "up")
    run("ip", "addr", "add", f"{spec['node_ip']}/{spec['link_prefix']}", "dev", node_if)
    run("ip", "link", "set", node_if, "up")
    for cidr in spec["routes"]:
        run(*in_host, "ip", "route", "add", cidr, "via", spec["node_ip"], "dev", host_if)
    # The node's own namespace: routes between the veth and the pods' bridge.
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    os.close(host_ns_fd)
    make_cgroup_root(spec["cgroup_root"])
    return own_mnt, host_mnt


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m devstack.node.ns SPEC.json", file=sys.stderr)
        return 2
    spec_file = Path(argv[0])
    spec = json.loads(spec_file.read_text())
    ready = Path(spec["node_dir"]) / "ns-ready"
    ready.unlink(missing_ok=True)
    # Held until sigwait below takes one: a SIGTERM during setup is not lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        own_mnt, host_mnt = setup(spec)
    except (OSError, RuntimeError) as e:
        print(f"node_ns: {e}", file=sys.stderr, flush=True)
        return 1
    ready.write_text(f"{os.getpid()}\n")
    print(f"node_ns: namespaces ready (pid {os.getpid()}): {spec['host_if']} {spec['host_ip']} <-> "
          f"{spec['node_if']} {spec['node_ip']}; routes {', '.join(spec['routes'])} to the node",
          flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    ready.unlink(missing_ok=True)
    survivors = stop_members(own_mnt, host_mnt, spec["cgroup_root"])
    if survivors:
        print(f"node_ns: still running in the node: {survivors}", file=sys.stderr, flush=True)
    left = remove_cgroup_root(spec["cgroup_root"])
    if left:
        print(f"node_ns: cgroups left behind: {'; '.join(left[:5])}", file=sys.stderr, flush=True)
    print("node_ns: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
