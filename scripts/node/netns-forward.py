#!/usr/bin/env python3
"""Forward TCP from inside the node's network namespace to loopback services of this host,
or (--connect) from this host's loopback into the node's namespace.

    netns-forward.py NETNS_FILE LISTEN_ADDR:PORT=CONNECT_ADDR:PORT ...
    netns-forward.py NETNS_FILE --connect SOCKET_PATH

Each listener is made inside NETNS_FILE's network namespace (e.g. /proc/PID/ns/net); each
connection it accepts is relayed to CONNECT_ADDR:PORT in the namespace this process started in.
It is how the kubelet and the pods, which live in the node's own namespace, reach the apiserver
and the test's redis-servers on the host's 127.0.0.1 without one address, route, bridge or
iptables rule being added to the host's namespace. (Python 3.11 has no os.setns: ctypes.)

With --connect it is an HTTP CONNECT proxy the other way: it listens on the Unix socket
SOCKET_PATH and opens each requested connection inside NETNS_FILE's namespace. The
apiserver reaches the kubelet (kubectl exec, logs, port-forward) through it: its egress
selector's `cluster` connection names this proxy (scripts/control-plane.sh, node_up).
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


def connect_proxy(listener):
    """CONNECT HOST:PORT HTTP/1.1 -> 200, then relay; the connect is made in the namespace of
    the thread that started this one (the node's)."""
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=tunnel, args=(conn,), daemon=True).start()


def tunnel(conn):
    head = b""
    while b"\r\n\r\n" not in head and len(head) < 8192:
        chunk = conn.recv(4096)
        if not chunk:
            conn.close()
            return
        head += chunk
    request = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    if len(request) != 3 or request[0] != "CONNECT" or head.index(b"\r\n\r\n") + 4 != len(head):
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        conn.close()
        return
    try:
        up = socket.create_connection(addr(request[1]), timeout=5)
        up.settimeout(None)
    except OSError as e:
        conn.sendall(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{e}".encode())
        conn.close()
        return
    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    for a, b in ((conn, up), (up, conn)):
        threading.Thread(target=pipe, args=(a, b), daemon=True).start()


def addr(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


def main():
    netns, maps = sys.argv[1], sys.argv[2:]
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    node = os.open(netns, os.O_RDONLY)
    if maps[:1] == ["--connect"] and len(maps) == 2:
        # A Unix socket, not a TCP port: the apiserver (1.37) dereferences a missing TLS
        # configuration for a plain-HTTP TCP proxy, and a socket in DIR adds no port to the host.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(maps[1])
        os.chmod(maps[1], 0o600)
        s.listen(128)
        # Threads started from here on are in the node's namespace: their connects go there.
        setns(node)
        print("netns-forward: listening", maps[1], "(CONNECT proxy into the node)", flush=True)
        t = threading.Thread(target=connect_proxy, args=(s,), daemon=True)
        t.start()
        t.join()
        return
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
