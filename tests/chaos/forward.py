"""A plain TCP forwarder: `python forward.py LISTEN_HOST:PORT=TARGET_HOST:PORT ...`.

The partition fault runs one inside a network namespace (the namespace's 127.0.0.1
ports lead over a veth pair to the host) and one on the host (the veth address leads
to the host's 127.0.0.1, where PostgreSQL, RabbitMQ and the kube-apiserver listen).
Taking the veth link down then cuts whatever runs in the namespace off from all three,
with no connection reset: a partition, not a crash.
"""

from __future__ import annotations

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
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


async def _serve(listen: str, target: str) -> asyncio.Server:
    target_host, target_port = target.rsplit(":", 1)

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(target_host, int(target_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    host, port = listen.rsplit(":", 1)
    return await asyncio.start_server(accept, host, int(port), reuse_address=True)


async def main(pairs: list[str]) -> None:
    servers = [await _serve(*pair.split("=", 1)) for pair in pairs]
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
