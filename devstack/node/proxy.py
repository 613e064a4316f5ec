"""The API server as the real node sees it: `python -m devstack.node.proxy --listen H:P --to H:P`.

The API server binds 127.0.0.1 (devstack keeps every port on loopback), which no
other network namespace can reach. This forwards raw TCP (TLS passes through
untouched, the API server still sees its clients' certificates) from the host
end of the node's veth pair, an address only the node can reach, to it. The
kubelet and kube-proxy connect here, and so do pods: the `kubernetes` Service's
EndpointSlice names this address, so kube-proxy sends 10.96.0.1:443 here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _serve(listen: tuple[str, int], to: tuple[str, int]) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*to)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))
        finally:
            for w in (client_w, up_w):
                w.close()

    server = await asyncio.start_server(handle, *listen, reuse_address=True)
    print(f"node_proxy: {listen[0]}:{listen[1]} -> {to[0]}:{to[1]}", flush=True)
    async with server:
        await server.serve_forever()


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.node.proxy")
    parser.add_argument("--listen", type=_addr, required=True)
    parser.add_argument("--to", type=_addr, required=True)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.listen, args.to))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
