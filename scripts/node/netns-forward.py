#!/usr/bin/env python3
"""Forward TCP from inside the node's network namespace to loopback services of this host.

    netns-forward.py NETNS_FILE LISTEN_ADDR:PORT=CONNECT_ADDR:PORT ...

Each listener is made inside NETNS_FILE's network namespace (e.g. /proc/PID/ns/net); each
connection it accepts is relayed to CONNECT_ADDR:PORT in the namespace this process started in.
It is how the kubelet and the pods, which live in the node's own namespace, reach the apiserver
and the test's redis-servers on the host's 127.0.0.1 without one address, route, bridge or
iptables rule being added to the host's namespace. (Python 3.11 has no os.setns: ctypes.)
"""
import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        sys.exit(f"netns-forward: setns failed: {os.strerror(err)}")


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (dst, src):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(listener, target):
    while True:
        conn, _ = listener.accept()
        try:
            up = socket.create_connection(target, timeout=5)
            up.settimeout(None)
        except OSError:
            conn.close()
            continue
        for a, b in ((conn, up), (up, conn)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


def addr(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


def main():
    netns, maps = sys.argv[1], sys.argv[2:]
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    node = os.open(netns, os.O_RDONLY)
    setns(node)
    listeners = []
    for m in maps:
        listen, target = m.split("=", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr(listen))
        s.listen(128)
        listeners.append((s, addr(target)))
    # Threads started from here on are in the host's namespace: their connects go to its loopback.
    setns(home)
    print("netns-forward: listening", " ".join(maps), flush=True)
    threads = [threading.Thread(target=serve, args=l, daemon=True) for l in listeners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
