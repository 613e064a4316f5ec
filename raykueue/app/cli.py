"""`raykueue serve`, `raykueue explain` and `raykueue certs`."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Collection, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from raykueue.app.settings import Settings
from raykueue.app.startup import StartupError, bind, settings_error

if TYPE_CHECKING:
    import ssl

    import uvicorn

log = logging.getLogger("raykueue")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raykueue", description="Per-pod Kueue admission for autoscaled KubeRay clusters."
    )
    parser.add_argument("--version", action="version", version=f"raykueue {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        help="serve the admission webhooks over HTTPS (and run the controller when a "
        "cluster is reachable)",
        description="Flags override RAYKUEUE_* environment variables, which override defaults.",
    )
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--cert-dir", help="holds tls.crt/tls.key; generated with a CA when absent")
    serve.add_argument("--kubeconfig", help="cluster to watch; without it KUBECONFIG, then the "
                       "in-cluster service account, then ~/.kube/config")
    serve.add_argument("--no-cluster", dest="cluster", action="store_false", default=None,
                       help="admission only: never contact a cluster")
    serve.add_argument("--no-controller", dest="controller", action="store_false", default=None,
                       help="serve webhooks only; another process runs the controller")
    serve.add_argument("--controller-identity", dest="controller_identities", action="append",
                       help="username allowed to lift the gate (repeatable)")
    serve.add_argument("--log-level")
    serve.add_argument("--log-format", choices=["auto", "json", "text"],
                       help="auto (default): text on a terminal, JSON otherwise")

    explain = sub.add_parser(
        "explain", help="say why a pod is still gated, or summarise a Ray cluster",
        description="`explain POD` (or `explain pod POD`): one pod's gate, Workload and place in "
        "the queue. `explain raycluster NAME`: the cluster's workers running, waiting for quota "
        "(and where in the queue), waiting for their head, and evicted (and why).")
    explain.add_argument("pod", metavar="POD|pod|raycluster")
    explain.add_argument("name", nargs="?", help="the pod's or RayCluster's name, after a kind")
    explain.add_argument("-o", "--output", choices=["text", "json"], default="text")
    explain.add_argument("-n", "--namespace",
                         help="the pod's namespace (default: the kubeconfig context's, as kubectl)")
    explain.add_argument("--kubeconfig")

    certs = sub.add_parser("certs", help="inspect or rotate the certificate Secret")
    certs_sub = certs.add_subparsers(dest="certs_command", required=True)
    rotate = certs_sub.add_parser(
        "rotate", help="ask the leader to rotate: the serving certificate, or with --ca the CA",
        description="Marks the Secret; the replica holding the Lease rotates it (a CA in two "
        "stages: trusted first, served second) and removes the mark.")
    rotate.add_argument("--ca", action="store_true", help="rotate the CA, not only the serving "
                        "certificate")
    status = certs_sub.add_parser("status", help="show the Secret's CAs and rotation stage")
    for p in (rotate, status):
        p.add_argument("--secret", help="Secret name (default: RAYKUEUE_CERT_SECRET)")
        p.add_argument("-n", "--namespace", help="its namespace (default: RAYKUEUE_POD_NAMESPACE)")
        p.add_argument("--kubeconfig")
    uninstall = sub.add_parser(
        "uninstall", help="take raykueue out of every path: suspend opted-in Ray objects (or hand "
        "them back to Kueue), then delete its webhooks and Workloads; a dry run unless --yes",
        description="Needs admin credentials (a kubeconfig). Prints the plan; with --yes carries it "
        "out: no pod is left gated, no raykueue Workload behind, no pod running outside quota. "
        "Then remove raykueue's Deployment: kubectl delete -k manifests/ --ignore-not-found. "
        "Exit codes: 0 done (or planned), 1 failed or timed out (run it again), 3 blocked.")
    uninstall.add_argument("--yes", action="store_true", help="act on the plan (default: print it)")
    uninstall.add_argument("--handback", action="store_true",
                           help="give each suspended opted-in object to Kueue, in the queue raykueue "
                           "kept for it; Kueue admits it whole and resumes it")
    uninstall.add_argument("--timeout", type=float, default=300.0,
                           help="seconds to wait for each step's pods and Workloads to go")
    uninstall.add_argument("--kubeconfig")

    handback = sub.add_parser(
        "handback", help="give one opted-in RayCluster or RayJob to Kueue, raykueue staying "
        "installed: suspend it, then the queue label; Kueue admits it whole; a dry run unless --yes",
        description="The owner's way out for one object, with the owner's credentials. Exit codes "
        "as for uninstall.")
    handback.add_argument("kind", choices=["raycluster", "rayjob"])
    handback.add_argument("name")
    handback.add_argument("-n", "--namespace", default="default")
    handback.add_argument("--yes", action="store_true", help="act (default: print the plan)")
    handback.add_argument("--timeout", type=float, default=300.0,
                          help="seconds to wait for its pods and Workloads to go")
    handback.add_argument("--kubeconfig")

    return parser


def _version() -> str:
    try:
        return metadata.version("raykueue")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        return "unknown (not installed)"


def settings_from(flags: dict[str, Any]) -> Settings:
    """Settings from flags and RAYKUEUE_* variables, or a StartupError naming the bad one."""
    try:
        return Settings(**flags)
    except ValidationError as exc:
        raise settings_error(exc, flags) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except StartupError as exc:
        _report(str(exc))
        return 2


def _report(message: str) -> None:
    """One line: a JSON log line once logging is set up (a pod's log), plain text before."""
    from raykueue.app import logs

    if logs.configured():
        log.error("%s", message)
    else:
        print(f"raykueue: {message}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        flags: dict[str, Any] = {
            k: v for k, v in vars(args).items() if v is not None and k != "command"}
        return serve(settings_from(flags), flags)
    if args.command == "certs":
        return certs(args)
    if args.command in ("uninstall", "handback"):
        return uninstall(args)
    return explain(args.pod, args.namespace, args.kubeconfig, name=args.name, output=args.output)


def uvicorn_config(settings: Settings, app: Any, context: ssl.SSLContext) -> uvicorn.Config:
    """How raykueue (and bench/ceiling.py, its bare-ASGI ceiling) is served, loaded."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_keep_alive=settings.keep_alive_seconds,
    )
    config.load()
    # TLS is ours, not uvicorn's: the context is fed certificates as bytes
    # (see certs.serving), which uvicorn's file-path options cannot do.
    config.ssl = context
    return config


def tune_interpreter(settings: Settings) -> None:
    """Called once everything long-lived is built, just before serving."""
    # Everything imported and built so far lives as long as the process. Freezing
    # it keeps the cyclic GC from rescanning a few hundred thousand long-lived
    # objects (FastAPI, pydantic, the kubernetes client) while each review
    # allocates thousands of short-lived ones: measured as a third of the CPU
    # per review in bench/admission.py.
    gc.freeze()
    # The event loop gets the GIL back sooner from the controller's threads
    # (see Settings.switch_interval_ms).
    sys.setswitchinterval(settings.switch_interval_ms / 1000)


def serve(settings: Settings, flags: Collection[str] = ()) -> int:
    import uvicorn

    from raykueue.app import logs, runtime
    from raykueue.kube.client import ClusterConfigError

    logs.configure(settings.log_level, settings.log_format)
    # Bound first: a taken port fails before anything starts or says it serves.
    listener = bind(settings.host, settings.port, flags)
    try:
        try:
            running = runtime.start(settings)
        except ClusterConfigError as exc:
            log.error("%s", exc)
            return 2
        config = uvicorn_config(settings, running.app, running.certificates.serving.context)
        tune_interpreter(settings)
        log.info("serving admission on https://%s:%d (CA %s)", settings.host, settings.port,
                 running.certificates.ca_file)
        try:
            uvicorn.Server(config).run(sockets=[listener])
        finally:
            running.shutdown()
        return 0
    finally:
        listener.close()


_EXPLAIN_KINDS = {"pod": "pod", "pods": "pod", "po": "pod",
                  "raycluster": "raycluster", "rayclusters": "raycluster"}


def explain(pod: str, namespace: str | None, kubeconfig: str | None, *, name: str | None = None,
            output: str = "text") -> int:
    """`explain POD`, `explain pod POD` or `explain raycluster NAME`."""
    import orjson

    from raykueue.app.kubecontext import context_namespace
    from raykueue.controller.explain import describe_pod, explain_pod
    from raykueue.controller.explain_cluster import explain_raycluster, render
    from raykueue.kube.client import load_api_client
    from raykueue.kube.rest import Rest

    api = load_api_client(kubeconfig)
    if api is None:
        print("raykueue explain: no cluster reachable (set --kubeconfig or KUBECONFIG)",
              file=sys.stderr)
        return 2
    from raykueue.coexist.watcher import read_findings

    namespace = namespace or context_namespace(kubeconfig)
    settings = settings_from({})
    rest = Rest(api)
    notes = [f"{f.kind}: {f.message}"
             for f in read_findings(rest, settings.kueue_namespace, settings.kueue_config_map)]
    kind = "pod"
    if name is not None:
        if pod.lower() not in _EXPLAIN_KINDS:
            print(f"raykueue explain: kind {pod!r}: pod or raycluster", file=sys.stderr)
            return 2
        kind, pod = _EXPLAIN_KINDS[pod.lower()], name
    if kind == "raycluster":
        summary = explain_raycluster(rest, namespace, pod)
        summary["kueueSetup"] = notes
        print(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() if output == "json"
              else render(summary) + "".join(f"\n  Kueue setup: {n}" for n in notes))
        return 0 if summary["found"] or summary["pods"] else 1
    if output == "json":
        described = describe_pod(rest, namespace, pod, setup_notes=notes)
        print(orjson.dumps(described, option=orjson.OPT_INDENT_2).decode())
        return 0 if described["found"] else 1
    print(explain_pod(rest, namespace, pod, setup_notes=notes))
    return 0


def uninstall(args: argparse.Namespace) -> int:
    """`raykueue uninstall` and `raykueue handback` (one object)."""
    from raykueue.kube.client import load_api_client
    from raykueue.kube.rest import Rest
    from raykueue.uninstall.run import FAILED, Uninstall

    api = load_api_client(args.kubeconfig)
    if api is None:
        print(f"raykueue {args.command}: no cluster reachable (set --kubeconfig or KUBECONFIG)",
              file=sys.stderr)
        return FAILED
    tool = Uninstall(Rest(api), timeout=args.timeout)
    if args.command == "handback":
        kind = {"raycluster": "RayCluster", "rayjob": "RayJob"}[args.kind]
        return tool.hand_back_one(kind, args.namespace, args.name, act=args.yes)
    return tool.run(handback=args.handback, act=args.yes)


def certs(args: argparse.Namespace) -> int:
    from raykueue.certs.rotation import ROTATE_CA, ROTATE_SERVING
    from raykueue.certs.secret import SECRETS, describe, request_rotation
    from raykueue.kube.client import load_api_client
    from raykueue.kube.rest import ApiError, Rest

    settings = settings_from({})
    name = args.secret or settings.cert_secret
    namespace = args.namespace or settings.pod_namespace
    if not name:
        print("raykueue certs: name the Secret (--secret or RAYKUEUE_CERT_SECRET)", file=sys.stderr)
        return 2
    api = load_api_client(args.kubeconfig or settings.kubeconfig)
    if api is None:
        print("raykueue certs: no cluster reachable (set --kubeconfig or KUBECONFIG)",
              file=sys.stderr)
        return 2
    rest = Rest(api)
    try:
        if args.certs_command == "rotate":
            what = ROTATE_CA if args.ca else ROTATE_SERVING
            request_rotation(rest, namespace, name, what)
            print(f"Secret {namespace}/{name} marked for {what} rotation; the leader acts on "
                  "its next tick (see `raykueue certs status`)")
            return 0
        for line in describe(rest.get(SECRETS.path(namespace, name))):
            print(line)
        return 0
    except ApiError as exc:
        print(f"raykueue certs: Secret {namespace}/{name}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
