#!/usr/bin/env python3
"""An HTTP/1.1 forwarder between corrald and corral-collector that counts what crosses it.

usage: http_count_proxy.py LISTEN_PORT TARGET_PORT STATS_FILE MODE
MODE: pass   forward as is
      strip  remove Accept-Encoding from answers (a collector that takes no zstd)
      mixed  pass, but answer every second zstd body itself with 400 and no Accept-Encoding
             (an older collector behind the same balancer reading zstd bytes as NDJSON)
STATS_FILE gets one JSON line per request: method, content-encoding, body bytes, the bytes a
zstd body decodes to (from its frame header, through libzstd), status.
"""
import ctypes
import ctypes.util
import json
import socket
import sys
import threading

lport, tport, stats, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
lock = threading.Lock()
zlib = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
zlib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
zlib.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
zstd_seen = 0


def read_msg(f):
    """(start line, [(name, value)], body) of one HTTP message, or None at EOF."""
    line = f.readline()
    if not line:
        return None
    headers = []
    while True:
        h = f.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers.append((k.strip(), v.strip()))
    n = 0
    for k, v in headers:
        if k.lower() == "content-length":
            n = int(v)
    body = f.read(n) if n else b""
    return line, headers, body


def write_msg(sock, line, headers, body):
    out = line + b"".join(("%s: %s\r\n" % (k, v)).encode("latin-1") for k, v in headers)
    sock.sendall(out + b"\r\n" + body)


def header(headers, name):
    for k, v in headers:
        if k.lower() == name:
            return v
    return ""


def serve(c):
    global zstd_seen
    up = socket.create_connection(("127.0.0.1", tport))
    cf, uf = c.makefile("rb"), up.makefile("rb")
    try:
        while True:
            req = read_msg(cf)
            if req is None:
                return
            line, headers, body = req
            ce = header(headers, "content-encoding")
            status = None
            if mode == "mixed" and ce == "zstd":
                with lock:
                    zstd_seen += 1
                    refuse = zstd_seen % 2 == 0
                if refuse:
                    msg = b'{"error":"line 1: invalid JSON"}'
                    write_msg(c, b"HTTP/1.1 400 Bad Request\r\n",
                              [("Content-Type", "application/json"),
                               ("Content-Length", str(len(msg)))], msg)
                    status = 400
            if status is None:
                write_msg(up, line, headers, body)
                rline, rheaders, rbody = read_msg(uf)
                if mode == "strip":
                    rheaders = [(k, v) for k, v in rheaders if k.lower() != "accept-encoding"]
                write_msg(c, rline, rheaders, rbody)
                status = int(rline.split()[1])
            with lock, open(stats, "a") as f:
                raw = len(body)
                if ce == "zstd":
                    raw = zlib.ZSTD_getFrameContentSize(body, len(body))
                f.write(json.dumps({"method": line.split()[0].decode(), "ce": ce,
                                    "bytes": len(body), "raw": raw, "status": status}) + "\n")
    except (OSError, ValueError):
        return
    finally:
        c.close()
        up.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", lport))
s.listen(64)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
