#!/usr/bin/env python3
"""Slow readers against a running agui-host: peak server memory, and how the runs end.

Opens N connections whose receive buffer is tiny, posts a run on each, reads the response
headers, then reads nothing for --stall seconds while sampling the server's RSS; then reads
every stream to its end and counts how each run ended (RUN_FINISHED, or RUN_ERROR and its code).

    scripts/slow-readers.py --url http://127.0.0.1:8080/ --pid "$(pgrep -n agui-host)" \\
        -c 128 --message 'big-predict: update the recipe' --stall 40

The figure is the server's peak RSS during the stall minus its RSS before the first request.
"""

import argparse
import asyncio
import json
import socket
import time
import urllib.parse


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def request_bytes(url, message, index):
    body = json.dumps({
        "threadId": f"slow-{index}", "runId": f"slow-run-{index}-{time.time_ns()}",
        "state": {}, "tools": [], "context": [], "forwardedProps": {},
        "messages": [{"id": f"u{index}", "role": "user", "content": message}],
    }).encode()
    head = (f"POST {url.path or '/'} HTTP/1.1\r\nhost: {url.netloc}\r\n"
            "content-type: application/json\r\naccept: text/event-stream\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode() + body


async def open_stalled(url, message, index, rcvbuf):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (url.hostname, url.port or 80))
    await loop.sock_sendall(sock, request_bytes(url, message, index))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await loop.sock_recv(sock, 1)
        if not chunk:
            break
        head += chunk
    return sock


async def read_rest(sock):
    loop = asyncio.get_running_loop()
    data = bytearray()
    while True:
        chunk = await loop.sock_recv(sock, 65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    # The body is chunked: the terminal event is the last `data:` line, whatever the framing.
    lines = [l for l in bytes(data).split(b"\n") if l.startswith(b"data: ")]
    if not lines:
        return "no events"
    try:
        last = json.loads(lines[-1][6:])
    except ValueError:
        return "cut mid-event"
    if last.get("type") == "RUN_ERROR":
        return "RUN_ERROR " + str(last.get("code"))
    return last.get("type", "?")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("-c", "--concurrency", type=int, default=128)
    parser.add_argument("--message", default="big-predict: update the recipe")
    parser.add_argument("--stall", type=float, default=40.0)
    parser.add_argument("--rcvbuf", type=int, default=4096)
    args = parser.parse_args()
    url = urllib.parse.urlparse(args.url)
    before = rss_kb(args.pid)
    socks = await asyncio.gather(*(open_stalled(url, args.message, i, args.rcvbuf)
                                   for i in range(args.concurrency)))
    peak = before
    end = time.monotonic() + args.stall
    while time.monotonic() < end:
        peak = max(peak, rss_kb(args.pid))
        await asyncio.sleep(0.2)
    outcomes = await asyncio.gather(*(read_rest(s) for s in socks))
    counts = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    print(json.dumps({
        "concurrency": args.concurrency, "message": args.message, "stall_s": args.stall,
        "rss_before_mb": round(before / 1024, 1), "rss_peak_mb": round(peak / 1024, 1),
        "growth_mb": round((peak - before) / 1024, 1),
        "growth_kb_per_stream": round((peak - before) / args.concurrency, 1),
        "outcomes": counts,
    }))


asyncio.run(main())
