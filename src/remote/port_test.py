# herd's test of the master port, for the doctor's probe: probe.sh runs it with the job's
# Python (`python -c`), the port in MASTER_PORT. Python 3, standard library only.
#
# argv: listen ADDR SECS FACTS...   on the master: listen on the port on every address (IPv6
#                                   when ADDR is an IPv6 address), say so, and only then run
#                                   FACTS (the argv that prints the node's facts); say when
#                                   they are done, and accept until herd ends the probe (its
#                                   agent's stdin), or SECS seconds after.
#       connect ADDR SECS           on a worker: one connection to ADDR at the port, within
#                                   SECS seconds.
# stdout: `herd-listening` or `herd-listen-failed ERROR`, the facts, `herd-facts-done`; or
#         `herd-reached` or `herd-unreached ERROR`.
#
# Only the master listens: a worker's connection imports nothing but the built-in _socket
# (socket, subprocess and threading take 40 to 50 ms to import, on every node).
import os
import sys


def listen(addr, secs, facts):
    import socket
    import subprocess
    import threading
    import time

    try:
        s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", int(os.environ["MASTER_PORT"])))
        s.listen(1024)
        print("herd-listening", flush=True)
    except OSError as e:
        print("herd-listen-failed " + str(e), flush=True)
        s = None
    done = subprocess.Popen(facts)
    if s is None:
        sys.exit(done.wait())

    def serve():
        while True:
            try:
                c, _ = s.accept()
                c.settimeout(3)
                c.recv(1)
                c.close()
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()
    done.wait()
    print("herd-facts-done", flush=True)
    time.sleep(secs)


def connect(addr, secs):
    """One connection to ADDR at the port, as socket.create_connection makes it: each of
    its addresses in turn, until one answers."""
    import _socket

    error = "no address"
    try:
        found = _socket.getaddrinfo(addr, int(os.environ["MASTER_PORT"]), 0, _socket.SOCK_STREAM)
    except OSError as e:
        found, error = [], str(e)
    for family, kind, proto, _, where in found:
        s = None
        try:
            # A family the node does not have (IPv6 disabled) is one address that fails.
            s = _socket.socket(family, kind, proto)
            s.settimeout(secs)
            s.connect(where)
            print("herd-reached")
            return
        except OSError as e:
            error = str(e)
        finally:
            if s is not None:
                s.close()
    print("herd-unreached " + error)


if sys.argv[1] == "listen":
    listen(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
else:
    connect(sys.argv[2], int(sys.argv[3]))
