"""The ceiling for raykueue's pod webhook: the same decision behind a bare ASGI handler.

No routing, no metrics per review, no logging, no limits: parse with orjson,
decide, encode. Served the way the real server is (app.cli.uvicorn_config: the
same uvicorn options and keep-alive, from the same RAYKUEUE_* settings) with the
same TLS context (app.certificates.counted: the SNI hand-over and the
raykueue_tls_handshakes counter), so the gap between the two is what raykueue's
own serving code costs. GET (any path) answers the Prometheus page, for the
handshake count.

The decision is the real server's mutating one (admit_create with the policy
from the settings) with the context of a server that has no cluster: the pods
the benches send (opted in on the pod, queue label set, no owner) get the
same patch either way, which bench/compare.py checks with a dry-run in both.

With --tune-interpreter it sets the interpreter up as `raykueue serve` does
(app.cli.tune_interpreter: the GC freeze of everything built before serving, the
thread switch interval), so that a ratio to it compares webhooks, not interpreter
settings.

    python bench/ceiling.py --port 9555 --cert-dir /tmp/certs [--tune-interpreter]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _repo  # noqa: F401 - the checkout on sys.path
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from raykueue.app.certificates import counted
from raykueue.app.cli import tune_interpreter, uvicorn_config
from raykueue.app.runtime import policy_from
from raykueue.app.settings import Settings
from raykueue.certs.store import ensure_certs
from raykueue.webhooks.admit import admit_create
from raykueue.webhooks.classify import PodContext
from raykueue.webhooks.review import encode, parse

CONTEXT = PodContext()
HEADERS = [(b"content-type", b"application/json")]
METRICS_HEADERS = [(b"content-type", CONTENT_TYPE_LATEST.encode())]


def make_app(settings: Settings):  # an ASGI callable
    policy = policy_from(settings)

    async def app(scope, receive, send) -> None:
        if scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 200, "headers": METRICS_HEADERS})
            await send({"type": "http.response.body", "body": generate_latest()})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        review = parse(b"".join(chunks))
        body = encode(review.uid, admit_create(review, CONTEXT, policy).verdict)
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": body})

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
    parser.add_argument("--tune-interpreter", action="store_true",
                        help="set the interpreter up as `raykueue serve` does before serving")
    args = parser.parse_args()
    settings = Settings(host="127.0.0.1", port=args.port, cert_dir=Path(args.cert_dir),
                        cluster=False)
    paths = ensure_certs(settings.cert_dir)
    serving = counted(paths.tls_cert.read_bytes(), paths.tls_key.read_bytes())
    config = uvicorn_config(settings, make_app(settings), serving.context)
    if args.tune_interpreter:
        # Where `raykueue serve` calls it: once the app is loaded, just before serving.
        tune_interpreter(settings)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
