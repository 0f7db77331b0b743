"""The zygote: an interpreter inside the sandbox that imports the runtime once and forks a fresh child for
every execution, so an execution starts in a few milliseconds instead of paying for namespaces, the root,
Python's start-up and the runtime's imports each time.

It never runs agent code, holds no secret (its environment is the sandboxed interpreter's, cleared by the
host) and only ever forks from itself, so a child carries nothing of another execution. Each child makes
its own pid, mount and IPC namespaces, enters a network namespace no live sibling has (when the plan says
so; see _take_netns), mounts a fresh /proc and private /tmp and /dev/shm, waits until the host has moved it
into its own cgroup, then sets its limits, keeps only its three stdio descriptors, empties its capabilities,
and applies the same Landlock ruleset as a cold sandbox and the seccomp filter that makes the zygote's the
cold sandbox's policy (both computed by the host: cem_sandbox::zygote::child_plan) before it reads any
code. Setting up a child is all system calls through ctypes: no import happens after the fork.

The host speaks to the zygote over a SOCK_SEQPACKET socket on fd 0: {"type": "fork", "id", "limits"} with
the child's stdin, stdout, stderr and a hello socket attached (SCM_RIGHTS); it answers {"type": "forked"}
or {"error"}, and {"type": "exited", "id", "status"} when a child ends.
"""

import ctypes
import gc
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import traceback

# The host's first message on fd 0: what each child applies to itself.
_CTL = socket.socket(fileno=0)
_PLAN = json.loads(_CTL.recv(1 << 20))
# Children forked and not yet reaped, by their pidfd (what the zygote polls): (pid, request id, its network
# namespace or None); emptied in each child.
_CHILDREN = {}
# Network namespaces of children that have ended, for later children (see _take_netns).
_NETNS_FREE = []
_NETNS_KEPT = 16

# <sched.h>, <sys/mount.h>, <sys/prctl.h>, <linux/seccomp.h>, <linux/landlock.h>: the same on every
# architecture Linux runs Python on (the Landlock syscalls have one number everywhere).
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
PR_SET_PDEATHSIG, PR_SET_NAME, PR_CAPBSET_DROP, PR_SET_SECCOMP, PR_CAP_AMBIENT = 1, 15, 24, 22, 47
PR_CAP_AMBIENT_CLEAR_ALL, SECCOMP_MODE_FILTER = 4, 2
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_RULE_PATH_BENEATH = 1
SETUP_FAILED = 125

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long


def _check(rc, what):
    if rc == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return rc


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


# Built once here; each child only hands them to the kernel.
_FILTERS = []
for _hex in _PLAN["seccomp"]:
    _raw = bytes.fromhex(_hex)
    _buf = ctypes.create_string_buffer(_raw, len(_raw))
    _FILTERS.append((_buf, _SockFprog(len(_raw) // 8, ctypes.addressof(_buf))))


def _load_runtime():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cem_runtime.py")
    spec = importlib.util.spec_from_file_location("cem_runtime", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cem_runtime"] = module
    spec.loader.exec_module(module)
    # What the runtime imports lazily in a cold interpreter costs nothing here: load it once.
    module.asyncio.get_event_loop_policy
    module.statistics.mean
    import ast  # noqa: F401  (skill analysis)

    return module


runtime = _load_runtime()
# Everything loaded so far lives as long as the zygote: out of the collector's sight, so a child's garbage
# collections do not write to (and so copy) every page it shares with the zygote.
gc.freeze()


# --- one child ----------------------------------------------------------------------------------


def _mount(source, target, fstype, flags, data=None):
    _check(_libc.mount(source, target, fstype, flags, data), f"mount {target.decode()}")


def _mounts(tmp_mb):
    nosuid_nodev = MS_NOSUID | MS_NODEV
    # Its own /proc: the child is pid 1 of a new pid namespace and sees nothing else.
    _mount(b"proc", b"/proc", b"proc", nosuid_nodev | MS_NOEXEC)
    for path in (b"/proc/sys", b"/proc/sysrq-trigger", b"/proc/irq", b"/proc/bus"):
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | nosuid_nodev | MS_NOEXEC)
    options = b"mode=1777,size=%dm" % max(1, int(tmp_mb))
    # What is bound under /tmp (an interpreter living there) goes back on top of the private /tmp.
    kept = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in _PLAN["tmp_binds"]]
    _mount(b"tmpfs", b"/tmp", b"tmpfs", nosuid_nodev, options)
    for path, fd in kept:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "ab").close()
        # A bind keeps the flags of the mount it copies: read-only stays read-only.
        _mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC)
        os.close(fd)
    _mount(b"tmpfs", b"/dev/shm", b"tmpfs", nosuid_nodev, options)


def _limits(limits):
    mb = 1 << 20
    for which, value in (
        (resource.RLIMIT_AS, limits["memory_mb"] * mb),
        (resource.RLIMIT_FSIZE, limits["file_size_mb"] * mb),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(which, (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 1))


def _drop_capabilities():
    # The launcher left the zygote's bounding set with these alone (plan: the Rust side's list).
    for cap in _PLAN["bounding"]:
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap} from the bounding set")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def _landlock():
    plan = _PLAN["landlock"]
    if not plan:
        return
    abi = plan["abi"]
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", plan["handled_fs"], plan["handled_net"], plan["scoped"])[:size], size)
    ruleset = _check(_libc.syscall(SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(size), ctypes.c_uint32(0)), "landlock ruleset")
    for path, access in plan["rules"]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        rule = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
        _check(_libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, rule, ctypes.c_uint32(0)), f"landlock rule {path}")
        os.close(fd)
    _check(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), "landlock restrict")
    os.close(ruleset)


def _seccomp():
    for _, program in _FILTERS:
        _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(program), 0, 0), "seccomp")


def _take_netns(own_net_ns):
    """A network namespace for one child: one an ended child had, if it is empty, or a new one.

    Making a network namespace costs more than the rest of a fork (and more again when the kernel tears it
    down), so an ended child's is reused. With the network off a sandbox can make only unix sockets
    (seccomp) and cannot configure the namespace (no capability in it), and a namespace goes back to the
    free list only once the child that had it is reaped, which for the pid 1 of a pid namespace means
    that every process in it has ended. A socket can still outlive them all, kept in flight by a cycle of
    descriptors sent over unix sockets until the kernel's collector runs: so a namespace is taken again
    only if it lists no unix socket at all, else it is dropped for a new one. Two children never share
    one, so siblings cannot reach or list each other's abstract sockets.
    """
    while _NETNS_FREE:
        net = _NETNS_FREE.pop()
        if _netns_is_empty(net, own_net_ns):
            return net
        os.close(net)
    _check(_libc.unshare(CLONE_NEWNET), "unshare(net)")
    try:
        return os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        _check(_libc.setns(own_net_ns, CLONE_NEWNET), "setns(net)")


def _netns_is_empty(net, own_net_ns):
    """Whether network namespace `net` holds no unix socket (its /proc/net/unix is the header alone)."""
    _check(_libc.setns(net, CLONE_NEWNET), "setns(net)")
    try:
        # os.open and os.read, not open(): the io objects' allocations and reference counts would write to
        # (and so copy) more of the pages the zygote shares with its children, once for every fork.
        fd = os.open("/proc/thread-self/net/unix", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 4096).count(b"\n") <= 1
        finally:
            os.close(fd)
    except OSError:
        return False  # cannot tell: a new one instead
    finally:
        _check(_libc.setns(own_net_ns, CLONE_NEWNET), "setns(net)")


def _pidfd_open(pid):
    """pidfd_open(2) by its number (434 on every architecture), for interpreters without os.pidfd_open."""
    return _check(_libc.syscall(ctypes.c_long(434), ctypes.c_int(pid), ctypes.c_uint(0)), "pidfd_open")


def _child(request, fds, ctl, net):
    """Runs in the forked child (pid 1 of its own pid namespace); never returns."""
    code = SETUP_FAILED
    _CHILDREN.clear()  # nothing of its siblings
    try:
        stdin_r, stdout_w, stderr_w, hello = fds
        os.dup2(stderr_w, 2)  # set-up errors reach the host
        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")
        _set_name(b"cem-sandbox")
        ctl.detach()
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare(mount, ipc)")
        if net is not None:
            _check(_libc.setns(net, CLONE_NEWNET), "setns(net)")
        _mounts(request["limits"]["tmp_mb"])
        # The host learns our pid from this message (SO_PASSCRED) and moves us into our cgroup.
        with socket.socket(fileno=hello) as hs:
            hs.send(b"r")
            if hs.recv(1) != b"g":
                os._exit(SETUP_FAILED)
        _limits(request["limits"])
        os.dup2(stdin_r, 0)
        os.dup2(stdout_w, 1)
        os.closerange(3, 1 << 20)
        _drop_capabilities()
        _landlock()
        _seccomp()
        code = 1  # set up: from here on a failure is the program's, as in a cold sandbox
        sys.argv = [runtime.__file__]
        sys.modules["__main__"] = runtime
        runtime._warm()
        runtime._attach()
        runtime.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return into the zygote
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _fork(request, fds, ctl, own):
    """Forks one child; (pid, its network namespace, its pidfd). Nothing is left behind on failure: a
    child that was forked is killed and reaped before the error goes on."""
    net = _take_netns(own["net"]) if _PLAN["new_net"] else None
    pid = None
    try:
        _check(_libc.unshare(CLONE_NEWPID), "unshare(pid)")
        try:
            pid = os.fork()
            if pid == 0:
                try:
                    _child(request, fds, ctl, net)
                finally:
                    os._exit(SETUP_FAILED)
        finally:
            # Our own later children (and we) stay in our pid namespace.
            _check(_libc.setns(own["pid"], CLONE_NEWPID), "setns(pid)")
        return pid, net, _pidfd_open(pid)
    except BaseException:
        if pid:
            # Not yet released by the host (it waits for our answer): it has run nothing.
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        _free_netns(net)
        raise


def _free_netns(net):
    if net is None:
        return
    if len(_NETNS_FREE) < _NETNS_KEPT:
        _NETNS_FREE.append(net)
    else:
        os.close(net)


def _send(ctl, message):
    ctl.send(json.dumps(message).encode())


def _send_event(ctl, kind, request_id, status=None):
    """{"type": kind, "id": request_id[, "status": status]}, ids and statuses being integers (checked when the
    request came), formatted by hand: json.dumps makes a function object per call, and every object made
    between two forks writes to pages the zygote shares with its children, which then copy them."""
    if status is None:
        ctl.send(b'{"type":"%s","id":%d}' % (kind, request_id))
    else:
        ctl.send(b'{"type":"%s","id":%d,"status":%d}' % (kind, request_id, status))


def _reap(ctl, pidfd):
    """Reaps a child whose pidfd said it ended and tells the host."""
    pid, request_id, net = _CHILDREN.pop(pidfd)
    os.close(pidfd)
    try:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
    except ChildProcessError:
        code = -signal.SIGKILL
    # Reaped: every process of its pid namespace has ended, and with them its sockets.
    _free_netns(net)
    _send_event(ctl, b"exited", request_id, 128 - code if code < 0 else code)


def _set_name(name):
    """What `ps` and `top` show for the process (its comm)."""
    buf = ctypes.create_string_buffer(name)
    _libc.prctl(PR_SET_NAME, ctypes.addressof(buf), 0, 0, 0)


def main():
    _set_name(b"cem-zygote")
    ctl = _CTL
    own = {ns: os.open(f"/proc/self/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC) for ns in ("pid", "net")}
    # Children are watched through pidfds, not SIGCHLD: no handler for a child to undo after the fork.
    poller = select.poll()
    poller.register(ctl, select.POLLIN)
    _send(ctl, {"type": "ready"})
    while True:
        for fd, _ in poller.poll():
            if fd in _CHILDREN:
                poller.unregister(fd)
                _reap(ctl, fd)
                continue
            message, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 8)
            if not message:
                return  # the host is gone: so are we, and with our pid namespace every child
            request = None
            try:
                request = json.loads(message)
                request_id, limits = request["id"], request["limits"]  # checked before anything is forked
                if len(fds) != 4 or not isinstance(limits, dict) or type(request_id) is not int:
                    raise ValueError(f"expected an integer id, 4 descriptors and limits, got {request_id!r}, "
                                     f"{len(fds)} and {limits!r}")
                pid, net, pidfd = _fork(request, fds, ctl, own)
                _CHILDREN[pidfd] = (pid, request_id, net)
                poller.register(pidfd, select.POLLIN)
                reply = None
            except Exception as e:  # noqa: BLE001 - the host gets the reason, the zygote keeps serving
                reply = {"type": "failed", "id": request.get("id") if isinstance(request, dict) else None,
                         "error": str(e)}
            # Our copies go before the answer: once the host has it, the child holds the only hello socket,
            # so the host can tell from it whether the child (and so its pid) is still there.
            for fd in fds:
                os.close(fd)
            if reply is None:
                _send_event(ctl, b"forked", request_id)
            else:
                _send(ctl, reply)

main()
