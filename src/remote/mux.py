# herd's output multiplexer: runs a node's launcher (argv) and gives each of its ranks a
# stream of its own, so that no rank's line is ever joined with another's, at any size.
# Python 3 standard library only, run with -I -S. Shipped by herd (src/remote/mux.py).
#
# Each rank is started through the wrapper this writes (HERD_RANK_WRAPPER, see
# `launcher`), which connects its stdout and its stderr to the socket HERD_OUTPUT, says
# which rank it is, and execs the worker: the worker's pid is the wrapper's, and nothing sits
# between it and its launcher. This process is the only writer of fd 1, in records:
#   MAGIC                             once, first
#   +SID STREAM RANK LOCAL_RANK\n     a source opens (STREAM o|e; - for no rank: the launcher)
#   SID LEN\n + LEN bytes             what it wrote, as it came
#   -SID\n                            it closed
# Once the launcher has exited, what every source holds is read and the multiplexer exits
# with the launcher's status (128+N for signal N): what outlives the launcher is stopped by
# the agent. SIGTERM, SIGINT and SIGHUP reach the launcher through its group; this process
# outlives them to pass on the launcher's last words.
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile

MAGIC = b"\x1dherd-mux/1\n"

WRAPPER = r"""
import os, socket, sys
path = os.environ.get("HERD_OUTPUT")
rank, local = os.environ.get("RANK", "-"), os.environ.get("LOCAL_RANK", "-")
args = sys.argv[1:]
# DeepSpeed's launcher puts --local_rank=N right after what it runs: it belongs after the
# worker's script, the first COUNT words (herd's own, before the user's).
extra = [args.pop(0)] if args and args[0].startswith("--local_rank=") else []
count = int(args.pop(0))
args = args[:count] + extra + args[count:]
if path:
    for fd, stream in ((1, "o"), (2, "e")):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.sendall(("%s %s %s\n" % (stream, rank, local)).encode())
            os.dup2(s.fileno(), fd)
            s.close()
        except OSError:
            pass
os.execvp(args[0], args)
"""


def write_all(data):
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(1, view):]
        except InterruptedError:
            pass


def main():
    argv = sys.argv[1:]
    home = tempfile.mkdtemp(prefix="herd-out-")
    path = os.path.join(home, "s")
    wrapper = os.path.join(home, "rank")
    with open(wrapper, "w") as f:
        f.write("#!" + sys.executable + " -IS\n" + WRAPPER)
    os.chmod(wrapper, 0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4096)
    listener.setblocking(False)
    # A handler, not SIG_IGN: the launcher must get the default back when it execs.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    env = dict(os.environ, HERD_OUTPUT=path, HERD_RANK_WRAPPER=wrapper)
    write_all(MAGIC)
    try:
        launcher = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        write_all(b"+1 e - -\n")
        text = ("herd: %s: %s\n" % (argv[0], e.strerror)).encode()
        write_all(b"1 %d\n%s-1\n" % (len(text), text))
        cleanup(home)
        sys.exit(127)

    sel = selectors.DefaultSelector()
    sids = [2]
    hello = {}

    def open_source(sid, stream, rank, local, f):
        write_all(b"+%d %s %s %s\n" % (sid, stream, rank, local))
        sel.register(f, selectors.EVENT_READ, ("data", sid))

    def close_source(sid, f):
        sel.unregister(f)
        f.close()
        write_all(b"-%d\n" % sid)

    def emit(sid, data):
        write_all(b"%d %d\n" % (sid, len(data)) + data)

    def read(f):
        try:
            return os.read(f.fileno(), 65536)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return b""

    def serve(kind, sid, f, draining):
        if kind == "accept":
            while True:
                try:
                    conn, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    return
                conn.setblocking(False)
                hello[conn.fileno()] = bytearray()
                sel.register(conn, selectors.EVENT_READ, ("hello", conn.fileno()))
                if draining:
                    serve("hello", conn.fileno(), conn, True)
        elif kind == "hello":
            chunk = read(f)
            if chunk is None:
                return
            buf = hello[sid]
            buf += chunk
            if chunk and b"\n" not in buf:
                return
            sel.unregister(f)
            del hello[sid]
            head, _, rest = bytes(buf).partition(b"\n")
            words = head.split(b" ")
            if len(words) != 3 or words[0] not in (b"o", b"e"):
                f.close()
                return
            new = sids[0]
            sids[0] += 1
            open_source(new, words[0], words[1], words[2], f)
            if rest:
                emit(new, rest)
            if not chunk:
                close_source(new, f)
            elif draining:
                serve("data", new, f, True)
        else:
            while True:
                chunk = read(f)
                if chunk is None:
                    return
                if not chunk:
                    close_source(sid, f)
                    return
                emit(sid, chunk)
                if not draining:
                    return

    os.set_blocking(launcher.stdout.fileno(), False)
    os.set_blocking(launcher.stderr.fileno(), False)
    open_source(0, b"o", b"-", b"-", launcher.stdout)
    open_source(1, b"e", b"-", b"-", launcher.stderr)
    sel.register(listener, selectors.EVENT_READ, ("accept", None))
    status = None
    try:
        while status is None:
            for key, _ in sel.select(0.2):
                kind, sid = key.data
                serve(kind, sid, key.fileobj, False)
            status = launcher.poll()
        # The launcher is gone: what its sources hold now is the rest of their output.
        for key in list(sel.get_map().values()):
            kind, sid = key.data
            serve(kind, sid, key.fileobj, True)
        for key in list(sel.get_map().values()):
            kind, sid = key.data
            if kind == "data":
                close_source(sid, key.fileobj)
    except BrokenPipeError:
        # herd is gone; its agent stops what is left.
        status = 141
    cleanup(home)
    sys.exit(128 - status if status < 0 else status)


def cleanup(home):
    for name in ("s", "rank"):
        try:
            os.unlink(os.path.join(home, name))
        except OSError:
            pass
    try:
        os.rmdir(home)
    except OSError:
        pass


main()
