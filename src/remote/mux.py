# herd's output multiplexer: runs a node's launcher (argv) and gives each of its ranks a
# stream of its own, so that no rank's line is ever joined with another's, at any size.
# Python 3.8+, run with -I -S. Shipped by herd (src/remote/mux.py). It starts on every node
# of every attempt, and its wrapper once per rank: both import only built-in modules (os,
# sys, select, _socket, _signal), which start in a third of the time `socket`,
# `subprocess`, `selectors` and `tempfile` take (10 ms against 35 ms a start).
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
import select
import sys
import _signal
import _socket

MAGIC = b"\x1dherd-mux/1\n"

WRAPPER = r"""
import os, sys, _socket
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
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            s.connect(path)
            s.sendall(("%s %s %s\n" % (stream, rank, local)).encode())
            os.dup2(s.fileno(), fd)
            s.close()
        except OSError:
            pass
os.execvp(args[0], args)
"""

READ = select.POLLIN | select.POLLHUP | select.POLLERR
# A record's most bytes: herd's own read size (supervisor::READ_SIZE). herd makes one event
# of a record, and bounds the output in flight by counting events.
READ_SIZE = 16384


def write_all(data):
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(1, view):]
        except InterruptedError:
            pass


def make_home():
    # The agent's choice, which it removes once the job is gone; else one of our own.
    home = os.environ.pop("HERD_MUX_HOME", None)
    if home:
        try:
            os.mkdir(home, 0o700)
            return home
        except OSError:
            pass
    base = os.environ.get("TMPDIR") or "/tmp"
    while True:
        home = os.path.join(base, "herd-out-" + os.urandom(6).hex())
        try:
            os.mkdir(home, 0o700)
            return home
        except FileExistsError:
            pass


def read(fd):
    try:
        return os.read(fd, READ_SIZE)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def exit_code(status):
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def main():
    argv = sys.argv[1:]
    home = make_home()
    path = os.path.join(home, "s")
    wrapper = os.path.join(home, "rank")
    fd = os.open(wrapper, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
    os.write(fd, ("#!" + sys.executable + " -IS\n" + WRAPPER).encode())
    os.close(fd)
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4096)
    listener.setblocking(False)
    # A handler, not SIG_IGN: the launcher gets the default back when it execs.
    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(sig, lambda *_: None)
    # The launcher's exit wakes the loop below at once (a byte on this pipe), not at its next
    # turn: without it, a short job's node waited up to a turn (200 ms) for nothing.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    _signal.signal(_signal.SIGCHLD, lambda *_: None)
    _signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    env = dict(os.environ, HERD_OUTPUT=path, HERD_RANK_WRAPPER=wrapper)
    write_all(MAGIC)
    # What subprocess would do: the launcher inherits no other descriptor of ours, and gets
    # back the default for the signals Python ignores (SIGPIPE above all).
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            try:
                os.set_inheritable(int(name), False)
            except OSError:
                pass
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid = os.posix_spawnp(
            argv[0],
            argv,
            env,
            file_actions=[(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)],
            setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGCHLD),
        )
    except OSError as e:
        write_all(b"+1 e - -\n")
        text = ("herd: %s: %s\n" % (argv[0], e.strerror)).encode()
        write_all(b"1 %d\n%s-1\n" % (len(text), text))
        cleanup(home)
        sys.exit(127)
    os.close(out_w)
    os.close(err_w)

    poller = select.poll()
    # fd -> [kind, sid, pending hello bytes]; kind is "accept", "hello" or "data".
    fds = {}
    sids = [2]

    def watch(fd, kind, sid):
        fds[fd] = [kind, sid, bytearray()]
        poller.register(fd, READ)

    def unwatch(fd):
        poller.unregister(fd)
        del fds[fd]
        os.close(fd)

    def open_source(sid, stream, rank, local, fd):
        write_all(b"+%d %s %s %s\n" % (sid, stream, rank, local))
        watch(fd, "data", sid)

    def emit(sid, data):
        write_all(b"%d %d\n" % (sid, len(data)) + data)

    def serve(fd, draining):
        kind, sid, buf = fds[fd]
        if kind == "accept":
            while True:
                try:
                    conn, _ = listener._accept()
                except (BlockingIOError, InterruptedError):
                    return
                os.set_blocking(conn, False)
                watch(conn, "hello", None)
                if draining:
                    serve(conn, True)
        elif kind == "hello":
            chunk = read(fd)
            if chunk is None:
                return
            buf += chunk
            if chunk and b"\n" not in buf:
                return
            poller.unregister(fd)
            del fds[fd]
            head, _, rest = bytes(buf).partition(b"\n")
            words = head.split(b" ")
            if len(words) != 3 or words[0] not in (b"o", b"e"):
                os.close(fd)
                return
            new = sids[0]
            sids[0] += 1
            open_source(new, words[0], words[1], words[2], fd)
            if rest:
                emit(new, rest)
            if not chunk:
                unwatch(fd)
                write_all(b"-%d\n" % new)
            elif draining:
                serve(fd, True)
        else:
            while True:
                chunk = read(fd)
                if chunk is None:
                    return
                if not chunk:
                    unwatch(fd)
                    write_all(b"-%d\n" % sid)
                    return
                emit(sid, chunk)
                if not draining:
                    return

    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    open_source(0, b"o", b"-", b"-", out_r)
    open_source(1, b"e", b"-", b"-", err_r)
    watch(listener.fileno(), "accept", None)
    poller.register(wake_r, READ)
    status = None
    try:
        while status is None:
            for fd, _ in poller.poll(200):
                if fd == wake_r:
                    read(wake_r)
                elif fd in fds:
                    serve(fd, False)
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = exit_code(code)
        # The launcher is gone: what its sources hold now is the rest of their output.
        for fd in list(fds):
            if fd in fds:
                serve(fd, True)
        for fd in list(fds):
            kind, sid, _ = fds[fd]
            if kind == "data":
                unwatch(fd)
                write_all(b"-%d\n" % sid)
    except BrokenPipeError:
        # herd is gone; its agent stops what is left.
        status = 141
    cleanup(home)
    sys.exit(status)


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
