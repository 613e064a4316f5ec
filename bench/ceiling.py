"""The ceiling for bench/admission.py: the same decision behind a bare ASGI handler.

No routing, no metrics, no logging, no limits: parse with orjson, decide,
encode. Served by the same uvicorn, TLS context and core as the real server,
so the ratio between the two is what raykueue's own serving code costs.

    python bench/ceiling.py --port 9555 --cert-dir /tmp/certs
"""

from __future__ import annotations

import argparse

import uvicorn

from certs.store import ensure_certs, make_server_ssl_context
from webhooks.admit import admit_create
from webhooks.classify import Context, Policy
from webhooks.review import encode, parse

CONTEXT = Context()
POLICY = Policy()
HEADERS = [(b"content-type", b"application/json")]


async def app(scope, receive, send) -> None:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    review = parse(b"".join(chunks))
    body = encode(review.uid, admit_create(review, CONTEXT, POLICY).verdict)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
    args = parser.parse_args()
    paths = ensure_certs(args.cert_dir)
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port,
                            ssl_certfile=str(paths.tls_cert), ssl_keyfile=str(paths.tls_key),
                            lifespan="off", log_config=None, access_log=False)
    config.load()
    config.ssl = make_server_ssl_context(paths)  # the real server's TLS settings
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
