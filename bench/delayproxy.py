"""A TCP proxy that delays every byte by a fixed time each way, for kernels without ``netem``.

    python -m bench.delayproxy LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS

Each chunk read on one side is written to the other ``DELAY_MS`` later (order kept), so a
request/reply costs ``2 × DELAY_MS`` more round trip. Its own CPU is its own process's.
"""

from __future__ import annotations

import asyncio
import sys


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await reader.read(65536):
            loop.call_at(loop.time() + delay, writer.write, data)
        await asyncio.sleep(delay)
    finally:
        writer.close()


async def _serve(port: int, host: str, target: int, delay: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, target)
        await asyncio.gather(_pump(reader, up_writer, delay), _pump(up_reader, writer, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, host, target, delay_ms = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    asyncio.run(_serve(port, host, target, delay_ms / 1000))


if __name__ == "__main__":
    main()
