"""python -m devstack up|down|status|env (see devstack/__init__.py)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from .config import TIERS, StackConfig
from .controlplane.webhooks import register_webhooks, unregister_webhooks
from .stack import Stack, StackError, down, up

NEXT_STEPS = """
devstack: next, in this repo (the controller runs as the stack's admin user):
  raykueue serve --host 127.0.0.1 --port 9443 --cert-dir certs-local \\
      --kubeconfig {kubeconfig} --controller-identity raykueue-admin &
  scripts/cluster webhooks --url https://127.0.0.1:9443 --ca certs-local/ca.crt
  kubectl --kubeconfig {kubeconfig} apply -k examples   # a queue and a RayCluster in team-a
"""


def _quota(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name or not value:
            raise argparse.ArgumentTypeError(f"expected name=value[,name=value], got {text!r}")
        out[name.strip()] = value.strip()
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m devstack", description=__doc__)
    p.add_argument("--stack-dir", type=Path, help="default: $RAYKUEUE_STACK_DIR or ~/.cache/raykueue/stack")
    p.add_argument("--bin-dir", type=Path, help="default: $RAYKUEUE_BIN_DIR or ~/.cache/raykueue/bin")
    sub = p.add_subparsers(dest="cmd", required=True)
    pu = sub.add_parser("up", help="start, reuse or upgrade a stack")
    pu.add_argument("--tier", choices=TIERS, default="e2e")
    pu.add_argument("--quota", type=_quota, help="sample ClusterQueue quota, e.g. cpu=16,memory=64Gi")
    pu.add_argument("--nodes", type=int, help="number of kwok nodes (default 2)")
    pu.add_argument("--node-capacity", type=_quota, help="kwok node capacity, e.g. cpu=16,pods=110")
    pu.add_argument("--timeout", type=float, help="seconds each component may take (default 120)")
    pd = sub.add_parser("down", help="stop the stack")
    pd.add_argument("--purge-logs", action="store_true")
    ps = sub.add_parser("status", help="show the stack (exit 1 when none runs)")
    ps.add_argument("--json", action="store_true")
    sub.add_parser("env", help="print shell exports for the running stack")
    pw = sub.add_parser("webhooks", help="point the stack's webhooks at a raykueue server")
    pw.add_argument("--url", default="https://127.0.0.1:9443", help="the server's base URL")
    pw.add_argument("--ca", type=Path, default=Path("certs-local/ca.crt"),
                    help="CA that signed the server's certificate (its --cert-dir/ca.crt)")
    pw.add_argument("--remove", action="store_true", help="delete the registrations instead")
    return p


def _up(args: argparse.Namespace, config: StackConfig) -> int:
    if args.quota:
        config.samples.quota = args.quota
    if args.nodes is not None:
        config.nodes.count = args.nodes
    if args.node_capacity:
        config.nodes.capacity.update(args.node_capacity)
    if args.timeout:
        config.ready_timeout = args.timeout
    try:
        stack, _ = up(args.tier, config, by_hand=True)
    except StackError as e:
        print(f"devstack: {e}", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={shlex.quote(str(stack.kubeconfig))}")
    print(NEXT_STEPS.format(kubeconfig=shlex.quote(str(stack.kubeconfig))), file=sys.stderr)
    return 0


def _status(args: argparse.Namespace, stack: Stack) -> int:
    st = stack.status()
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print(f"tier {st['tier']}  kueue {st['kueue_mode']}  server {st['server']}  "
              f"ready={st['apiserver_ready']}")
        print(f"kubeconfig {st['kubeconfig']}")
        print(f"owner {st['owner']}  users (sessions, bench runs): {st['users'] or 'none'}")
        for name, c in st["components"].items():
            extra = f"pid {c['pid']} ports {c['ports']} log {c['log']}" if "pid" in c else ""
            print(f"  {name:24} {c['state']:12} {extra}")
    ok = st["apiserver_ready"] and all(c["state"] != "dead" for c in st["components"].values())
    return 0 if ok else 1


def _webhooks(args: argparse.Namespace, stack: Stack) -> int:
    if args.remove:
        unregister_webhooks(stack.kubeconfig)
        print("devstack: webhooks removed", file=sys.stderr)
    else:
        register_webhooks(stack.kubeconfig, args.url, args.ca.read_bytes())
        print(f"devstack: webhooks call {args.url} (CA {args.ca})", file=sys.stderr)
    return 0


def _env(args: argparse.Namespace, stack: Stack) -> int:
    for k, v in stack.env().items():
        print(f"export {k}={shlex.quote(v)}")
    print(f"export PATH={shlex.quote(str(stack.config.bin_dir))}:\"$PATH\"")
    return 0


# Commands on a running stack (the others: up and down).
_ON_STACK = {"status": _status, "webhooks": _webhooks, "env": _env}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    config = StackConfig()
    if args.stack_dir:
        config.stack_dir = args.stack_dir
    if args.bin_dir:
        config.bin_dir = args.bin_dir
    if args.cmd == "up":
        return _up(args, config)
    if args.cmd == "down":
        if not down(config, keep_logs=not args.purge_logs):
            print("devstack: no stack recorded in " + str(config.stack_dir), file=sys.stderr)
        return 0
    stack = Stack.load(config)
    if stack is None:
        print(f"devstack: no stack in {config.stack_dir}", file=sys.stderr)
        return 1
    return _ON_STACK[args.cmd](args, stack)


if __name__ == "__main__":
    sys.exit(main())
