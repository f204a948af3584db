#!/usr/bin/env python3
"""Probe targets in a process of their own, for the probe-cost benchmark (benches/prober.rs).

One single-threaded epoll loop serves three ports on 127.0.0.1 and prints them on its first
line, `PORTS <http> <tcp> <stats>`:
  http   answers every request `HTTP/1.1 200 OK`, `Content-Length: 3`, `Connection: close`;
  tcp    accepts connections;
  stats  answers each connection with `<http requests> <tcp connections>` and closes.
MODE decides who closes a probe's connection first:
  server   the server closes as soon as it has answered (http) or accepted (tcp), as a
           Python http.server or most health endpoints do;
  client   the server waits for the client to close, then closes.
It runs until its stdin closes (the benchmark's end), so it never outlives the benchmark.
"""
import os
import select
import socket
import sys

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
MAX_REQUEST = 8192


def listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1024)
    s.setblocking(False)
    return s


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "server"
    if mode not in ("server", "client"):
        sys.exit("usage: probe_target.py server|client")
    server_closes = mode == "server"
    http, tcp, stats = listener(), listener(), listener()
    print("PORTS %d %d %d" % (http.getsockname()[1], tcp.getsockname()[1], stats.getsockname()[1]), flush=True)
    ep = select.epoll()
    kinds = {http.fileno(): "http", tcp.fileno(): "tcp", stats.fileno(): "stats"}
    socks = {http.fileno(): http, tcp.fileno(): tcp, stats.fileno(): stats}
    for fd in kinds:
        ep.register(fd, select.EPOLLIN)
    ep.register(sys.stdin.fileno(), select.EPOLLIN | select.EPOLLHUP)
    # fd -> (kind, socket, bytes read so far) of an open connection.
    conns = {}
    counts = {"http": 0, "tcp": 0}

    def close(fd):
        ep.unregister(fd)
        conns.pop(fd)[1].close()

    while True:
        for fd, _ in ep.poll():
            if fd == sys.stdin.fileno():
                if not os.read(fd, 4096):
                    return
                continue
            kind = kinds.get(fd)
            if kind is not None:
                while True:
                    try:
                        c, _ = socks[fd].accept()
                    except BlockingIOError:
                        break
                    if kind == "stats":
                        c.sendall(b"%d %d\n" % (counts["http"], counts["tcp"]))
                        c.close()
                        continue
                    if kind == "tcp":
                        counts["tcp"] += 1
                        if server_closes:
                            c.close()
                            continue
                    c.setblocking(False)
                    conns[c.fileno()] = [kind, c, b""]
                    ep.register(c.fileno(), select.EPOLLIN)
                continue
            conn = conns.get(fd)
            if conn is None:
                continue
            try:
                data = conn[1].recv(4096)
            except (ConnectionResetError, BlockingIOError):
                data = b""
            if not data:
                close(fd)
                continue
            if conn[0] == "http" and conn[2] is not None:
                conn[2] += data
                if b"\r\n\r\n" in conn[2] or len(conn[2]) > MAX_REQUEST:
                    counts["http"] += 1
                    try:
                        conn[1].sendall(RESPONSE)
                    except OSError:
                        pass
                    conn[2] = None
                    if server_closes:
                        close(fd)


if __name__ == "__main__":
    main()
