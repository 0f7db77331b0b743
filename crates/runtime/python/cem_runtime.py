"""The code-execution-mcp runtime: runs inside the sandbox, one per interpreter.

It speaks JSON lines with the host over the process's original stdin and
stdout (moved to private descriptors first thing, so agent code writing to
fd 1 cannot corrupt the protocol), runs each request's code in a namespace
that persists for the life of the process (one execution, or one session),
and answers with the seed's fields.
"""

import _ast
import builtins
import importlib.machinery
import importlib.util
import itertools
import select
import threading
import collections
import datetime as _datetime_module
import io
import json
import linecache
import math
import os
import re
import sys
import time
import traceback
import types


def _lazy(name):
    """`name` imported on first use: asyncio alone costs tens of milliseconds of start-up, and every
    fresh interpreter pays its imports while most code never touches it. The module object is the real
    one once anything is looked up on it (importlib's LazyLoader), for the code and for `import name`."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


asyncio = _lazy("asyncio")
statistics = _lazy("statistics")

# The bridge: the descriptors the host's requests arrive on and answers leave
# by, set by _attach() (a zygote imports this module long before it has any).
_BRIDGE_IN = _BRIDGE_OUT = -1
_MAIN_PID = None


def _detach_bridge():
    # A forked child (os.fork, multiprocessing) must never answer for the
    # parent: only the process the host started speaks the protocol.
    for fd in (_BRIDGE_IN, _BRIDGE_OUT):
        try:
            os.close(fd)
        except OSError:
            pass


WORKSPACE = os.getcwd()
CODE_FILENAME = "<code>"


_SEND_LOCK = threading.Lock()
# Made once: json.dumps(default=...) builds a new encoder on every call, and
# json.loads of bytes sniffs their encoding; both cost on every tool call.
_ENCODE = json.JSONEncoder(default=str).encode
_DECODE = json.JSONDecoder().decode


def _send(message):
    if os.getpid() != _MAIN_PID:
        return
    line = _ENCODE(message) + "\n"
    data = memoryview(line.encode("utf-8", "surrogateescape"))
    with _SEND_LOCK:
        while data:
            data = data[os.write(_BRIDGE_OUT, data) :]


# --- the bridge: tool calls answered by the host ---------------------------------

# There is no reader thread: whichever thread waits for a message reads the
# pipe itself while no other thread is, so a synchronous call gets its answer
# without a thread handoff. Answers read for other threads are handed over
# under _LOCK; asyncio calls (and answers nobody waits for any more) are read
# by a pump thread started on first need.
_LOCK = threading.Lock()
_ARRIVED = threading.Condition(_LOCK)  # a message was dispatched, or the pipe is free
_PUMP_WANTED = threading.Condition(_LOCK)  # async calls or abandoned answers are pending
_STATE = {"reading": False, "eof": False, "pump": None}
_REQUESTS = collections.deque()  # host requests ("exec") for the main loop
_ANSWERS = {}  # id -> answer, for synchronous waiters
_CALLBACKS = {}  # id -> callable(answer), for asyncio futures
_ABANDONED = set()  # ids whose caller gave up waiting
_IDS = itertools.count(1)


# How long a synchronous tool call polls for its answer before it sleeps.
# Waking a process that sleeps costs a few microseconds on an idle machine
# but 40 to 50 us on a VM whose idle vCPUs halt (cross-CPU pipe round trip
# 96 us against 8 us on one CPU); while this process polls, the host and the
# upstream also share the other CPU and wake each other cheaply. With one
# CPU the poll would take the CPU they need: no polling.
_SPIN_SECONDS = 0.001 if len(os.sched_getaffinity(0)) > 1 else 0.0
# After this many polls in a row that the answer outlasted (a slow tool),
# poll only every _SPIN_RETRY-th wait, so slow tools cost no CPU.
_SPIN_MISSES, _SPIN_RETRY = 3, 16


class _Lines:
    """Lines from a file descriptor, read with a deadline."""

    def __init__(self, fd):
        self.fd, self.buf, self.scanned = fd, bytearray(), 0
        # Read into one reused buffer: os.read(fd, big) would map and unmap
        # fresh memory on every call.
        self.chunk = bytearray(1 << 16)
        self.view = memoryview(self.chunk)
        # Non-blocking, so a wait can poll before it sleeps in select().
        os.set_blocking(fd, False)
        # Polls the answer outlasted in a row; waits; answers caught polling.
        self.misses, self.waits, self.caught = 0, 0, 0

    def next(self, timeout, spin=False):
        """One line; b"" at end of input; None when `timeout` (seconds) passes first.
        With `spin`, polls briefly before sleeping (an answer expected soon)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            end = self.buf.find(b"\n", self.scanned)
            if end >= 0:
                line = bytes(self.buf[: end + 1])
                del self.buf[: end + 1]
                self.scanned = 0
                return line
            self.scanned = len(self.buf)
            n = self._poll() if spin and _SPIN_SECONDS else None
            while n is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and (left <= 0 or not select.select([self.fd], [], [], left)[0]):
                    return None
                if left is None:
                    select.select([self.fd], [], [])
                try:
                    n = os.readv(self.fd, [self.chunk])
                except BlockingIOError:  # woken with nothing to read: wait again
                    continue
            if not n:
                return b""
            self.buf += self.view[:n]
            spin = False  # the rest of a long line comes at once

    def _poll(self):
        """Bytes read while polling for up to _SPIN_SECONDS; None if none came."""
        self.waits += 1
        if self.misses >= _SPIN_MISSES and self.waits % _SPIN_RETRY:
            return None
        until = time.perf_counter() + _SPIN_SECONDS
        while True:
            try:
                n = os.readv(self.fd, [self.chunk])
                self.misses = 0
                self.caught += 1
                return n
            except BlockingIOError:
                if time.perf_counter() >= until:
                    self.misses += 1
                    return None
                # The host may be queued on this CPU behind the poll: let it run.
                os.sched_yield()


_LINES = None


def _attach():
    """Makes the process's stdin and stdout the bridge: moved to private descriptors, so agent code
    writing to fd 1 cannot corrupt the protocol."""
    global _BRIDGE_IN, _BRIDGE_OUT, _MAIN_PID, _LINES
    _BRIDGE_IN = os.dup(0)
    _BRIDGE_OUT = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # stray writes to fd 1 land in the host's diagnostics, not the protocol
    _MAIN_PID = os.getpid()
    os.register_at_fork(after_in_child=_detach_bridge)
    _LINES = _Lines(_BRIDGE_IN)


class ToolError(Exception):
    """A tool call failed: `server`, `tool` and the upstream's `message`."""

    def __init__(self, server, tool, message):
        self.server, self.tool, self.message = server, tool, message
        where = f"{server}.{tool}" if server else tool
        super().__init__(f"{where}: {message}")


class ToolResultWarning(UserWarning):
    """A tool's result broke the outputSchema the tool declares: it is passed on as it came, not as valid."""


def _dispatch(line):
    # Called with _LOCK held, by the thread that read `line`.
    if not line:
        _STATE["eof"] = True
        _REQUESTS.append({"type": "exit"})
        return
    try:
        message = _DECODE(line.decode("utf-8"))
    except ValueError:
        return
    if message.get("type") != "answer":
        _REQUESTS.append(message)
        return
    request_id = message.get("id")
    callback = _CALLBACKS.pop(request_id, None)
    if callback is not None:
        callback(message)
    elif request_id in _ABANDONED:
        _ABANDONED.discard(request_id)
    else:
        _ANSWERS[request_id] = message


def _wait(take, timeout=None, may_read=None, spin=False):
    """Returns take() (called with _LOCK held) once it is not None, reading
    the pipe when no other thread is (and may_read() allows); None after
    `timeout` seconds or at end of input. `spin`: see _Lines.next."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _LOCK:
            while True:
                got = take()
                if got is not None or _STATE["eof"]:
                    return got
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                if not _STATE["reading"] and (may_read is None or may_read()):
                    _STATE["reading"] = True
                    break
                (_ARRIVED if may_read is None else _PUMP_WANTED).wait(left)
        line = None
        try:
            line = _LINES.next(left, spin)
        finally:
            with _LOCK:
                _STATE["reading"] = False
                try:
                    if line is not None:
                        _dispatch(line)
                finally:
                    # Even when dispatching failed (a MemoryError decoding a
                    # huge answer): someone else must take over reading.
                    _ARRIVED.notify_all()
                    if _CALLBACKS or _ABANDONED:
                        _PUMP_WANTED.notify()


def _pump():
    while not _STATE["eof"]:
        try:
            _wait(lambda: None, may_read=lambda: bool(_CALLBACKS or _ABANDONED))
        except Exception:  # noqa: BLE001 - a bad line must not end the pump
            continue


def _want_pump():
    # With _LOCK held: make sure a thread reads for async calls and abandoned answers.
    if _STATE["pump"] is None or not _STATE["pump"].is_alive():
        _STATE["pump"] = threading.Thread(target=_pump, name="cem-bridge", daemon=True)
        _STATE["pump"].start()
    _PUMP_WANTED.notify()


def _ask(kind, payload, callback=None):
    if os.getpid() != _MAIN_PID:
        raise ToolError("", payload.get("tool", "search_tools"), "tools cannot be called from a forked process; call them from the main process")
    request_id = next(_IDS)
    if callback is not None:
        with _LOCK:
            _CALLBACKS[request_id] = callback
            _want_pump()
    _send({"type": kind, "id": request_id, **payload})
    return request_id


def _answer(request_id, timeout=None):
    """Waits for the answer to a synchronous request; None after `timeout`."""
    try:
        message = _wait(lambda: _ANSWERS.pop(request_id, None), timeout, spin=True)
    except BaseException:
        # Interrupted while waiting (an exception from a signal handler):
        # the answer will come and nobody will wait for it.
        with _LOCK:
            if _ANSWERS.pop(request_id, None) is None:
                _ABANDONED.add(request_id)
                _want_pump()
        raise
    if message is None:
        with _LOCK:
            message = _ANSWERS.pop(request_id, None)
            if message is None:
                _ABANDONED.add(request_id)
                _want_pump()
    return message


def _outcome(message, tool):
    if message.get("ok"):
        if message.get("warning"):
            import warnings

            warnings.warn(ToolResultWarning(f"{tool}: {message['warning']}"), stacklevel=3)
        return message.get("value")
    error = message.get("error") or {}
    server, _, name = tool.replace("__", ".", 1).partition(".")
    raise ToolError(error.get("server") or server, error.get("tool") or name or tool, error.get("message", "failed"))


def call_tool(tool, arguments=None, timeout=None):
    """Calls an upstream tool ("server.tool" or "server__tool") and returns its result."""
    message = _answer(_ask("call", {"tool": tool, "arguments": arguments or {}}), timeout)
    if message is None:
        if _STATE["eof"]:
            raise ToolError("", tool, "the host closed the bridge")
        raise ToolError("", tool, f"no answer within {timeout} s")
    return _outcome(message, tool)


async def call_tool_async(tool, arguments=None):
    """Like call_tool, awaitable: calls gathered with asyncio.gather run concurrently on the host."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def deliver(message):
        try:
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(message))
        except RuntimeError:  # the event loop is closed: nobody waits any more
            pass

    _ask("call", {"tool": tool, "arguments": arguments or {}}, deliver)
    return _outcome(await future, tool)


def _host(kind, arguments, name):
    # A request the host answers itself (search, the PII vault).
    message = _answer(_ask(kind, {"arguments": arguments}))
    if message is None:
        raise ToolError("", name, "the host closed the bridge")
    if not message.get("ok"):
        raise ToolError("", name, (message.get("error") or {}).get("message", "failed"))
    return message.get("value")


# --- packages ----------------------------------------------------------------------
# The host installs; the sandbox only reads. The declared environment is on
# sys.path from the start; a layer asked for on demand is a directory of the
# layer store (bound read-only) that goes in front of it once the host names it.

_PACKAGES_ENV = os.environ.get("CEM_PACKAGES_ENV")
_PACKAGES_LAYERS = os.environ.get("CEM_PACKAGES_LAYERS")
if _PACKAGES_ENV and os.path.isdir(_PACKAGES_ENV):
    sys.path.insert(0, _PACKAGES_ENV)


class InstallError(ImportError):
    """install() could not install what was asked; the message says why and what to do."""


def _add_packages(names):
    added = False
    for name in names or ():
        path = os.path.join(_PACKAGES_LAYERS or "", str(name), "site")
        if _PACKAGES_LAYERS and "/" not in str(name) and os.path.isdir(path) and path not in sys.path:
            sys.path.insert(0, path)
            added = True
    if added:
        importlib.invalidate_caches()


def install(*requirements):
    """Installs packages (e.g. install("pandas", "openpyxl>=3")) for this interpreter, on the host.

    The sandbox keeps no network: the host installs into a read-only layer
    and makes it importable here. Returns the installed "name==version"s.
    Allowed only as the server's config says (sandbox.on_demand)."""
    if len(requirements) == 1 and isinstance(requirements[0], (list, tuple)):
        requirements = tuple(requirements[0])
    if not requirements or not all(isinstance(r, str) for r in requirements):
        raise TypeError('install() takes requirement strings, e.g. install("pandas>=2")')
    try:
        answer = _host("install", {"requirements": list(requirements)}, "install")
    except ToolError as e:
        raise InstallError(e.message) from None
    _add_packages(answer.get("dirs"))
    return answer.get("installed", [])


def search_tools(query, category=None, detail_level="summary", limit=10):
    """Searches the tool catalog: the same answer as the search_tools MCP tool."""
    args = {"query": query, "detail_level": detail_level, "limit": limit}
    if category:
        args["category"] = category
    return _host("search", args, "search_tools")


def report_progress(done, total=None, message=None):
    """Tells the client how far the work is (shown to people by clients that display MCP progress):
    `done` (a number that only grows), `total` if known, and a short `message`. Cheap: call it as often
    as you like; the host forwards a few updates a second at most."""
    if isinstance(done, bool) or not isinstance(done, (int, float)) or not math.isfinite(done):
        raise ValueError("report_progress: done must be a finite number")
    if total is not None and (isinstance(total, bool) or not isinstance(total, (int, float))
                              or not math.isfinite(total)):
        raise ValueError("report_progress: total must be a finite number or None")
    update = {"type": "progress", "done": float(done)}
    if total is not None:
        update["total"] = float(total)
    if message is not None:
        # Lone surrogates would make the line invalid JSON for the host.
        update["message"] = str(message)[:200].encode("utf-8", "replace").decode("utf-8")
    _send(update)


_TOKEN = re.compile(r"\[(?:EMAIL|PHONE|SSN|CREDIT_CARD|IP|IBAN|SECRET)_[1-9][0-9]*\]")


def tokenize_pii(text):
    """Replaces personal data in `text` with this session's tokens ([EMAIL_1], [PHONE_2], ...).
    Returns (sanitized_text, {token: original_value})."""
    value = _host("pii", {"op": "tokenize", "text": str(text)}, "tokenize_pii")
    return value["text"], value["tokens"]


def detokenize_pii(text, tokens=None):
    """Puts the original values back: from `tokens` (as tokenize_pii returned them) or,
    without it, from this session's vault. Unknown tokens stay as they are."""
    if tokens is not None:
        return _TOKEN.sub(lambda m: str(tokens.get(m.group(0), m.group(0))), str(text))
    return _host("pii", {"op": "detokenize", "text": str(text)}, "detokenize_pii")["text"]


# --- skills -------------------------------------------------------------------------

_SKILLS_DIR = os.environ.get("CEM_SKILLS_DIR", "/skills")
_SKILL_MODULE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*\Z")


def analyze_skill(source):
    """Parses skill code without running it: whether it compiles (else the line), the
    upstream tools it names and its public top-level functions."""
    try:
        # Parsed once; compiling the tree still finds what only the compiler
        # does ('return' outside a function, top-level await).
        import ast

        tree = ast.parse(source, "skill.py")
        compile(tree, "skill.py", "exec", dont_inherit=True)
    except SyntaxError as e:
        text = e.text
        if text is None and e.lineno:  # compiler errors carry no source line
            lines = source.splitlines()
            text = lines[e.lineno - 1] if e.lineno <= len(lines) else ""
        return {"ok": False, "line": e.lineno, "column": e.offset, "message": e.msg,
                "text": (text or "").rstrip("\n")}
    except (ValueError, RecursionError, MemoryError) as e:
        return {"ok": False, "line": None, "message": str(e) or type(e).__name__}
    tools = []

    def add(tool):
        if "." not in tool and "__" in tool:
            tool = tool.replace("__", ".", 1)
        if tool not in tools:
            tools.append(tool)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id in ("call_tool", "call_tool_async") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                add(node.args[0].value)
            elif (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute)
                    and isinstance(f.value.value, ast.Name) and f.value.value.id == "tools"):
                add(f"{f.value.attr}.{f.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("servers."):
            server = node.module.split(".", 1)[1]
            for alias in node.names:
                if alias.name != "*" and "." not in server:
                    add(f"{server}.{alias.name}")
    functions = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            prefix = "async " if isinstance(node, ast.AsyncFunctionDef) else ""
            functions.append(f"{prefix}{node.name}({ast.unparse(node.args)})")
    return {"ok": True, "tools": tools, "functions": functions}


def save_skill(name, code, description):
    """Saves `code` as the skill `name` (then `from skills.<name> import ...` works in later
    executions); saving a name again keeps the previous version. Returns its metadata."""
    if not isinstance(code, str):
        raise TypeError("code must be a string of Python source")
    if not isinstance(description, str):
        raise TypeError("description must be a string: what the skill does and when to use it")
    args = {"op": "save", "name": str(name), "code": code, "description": str(description),
            "analysis": analyze_skill(code)}
    return _host("skill", args, "save_skill")


def load_skill(name, version=None):
    """The code of skill `name` (its current version, or `version`), for exec(load_skill(name))."""
    args = {"op": "load", "name": str(name)}
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"version must be a positive int, got {version!r}")
        args["version"] = version
    return _host("skill", args, "load_skill")["code"]


def list_skills():
    """The saved skills: name, description, functions, tools, version."""
    return _host("skill", {"op": "list"}, "list_skills")


class _SkillLoader(importlib.machinery.SourceFileLoader):
    def exec_module(self, module):
        # A skill sees what executed code sees (call_tool, tools, read_file...).
        for key, value in _namespace().items():
            if not key.startswith("__"):
                module.__dict__.setdefault(key, value)
        super().exec_module(module)


class _SkillFinder:
    """`import skills.<name>`: the saved skill's code, from the read-only skills directory."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname == "skills":
            spec = importlib.machinery.ModuleSpec("skills", None, is_package=True)
            spec.submodule_search_locations = []
            return spec
        parent, _, name = fullname.partition(".")
        if parent != "skills" or "." in name:
            return None
        module = name.replace("-", "_")
        file = os.path.join(_SKILLS_DIR, module, "skill.py")
        if not _SKILL_MODULE.match(module) or not os.path.isfile(file):
            raise ModuleNotFoundError(f"no skill named {name!r}; list_skills() shows the saved ones",
                                      name=fullname)
        return importlib.util.spec_from_file_location(fullname, file,
                                                      loader=_SkillLoader(fullname, file))


sys.meta_path.insert(0, _SkillFinder)


class _Server:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, tool):
        if tool.startswith("__"):
            raise AttributeError(tool)

        def invoke(**arguments):
            return call_tool(f"{self._name}.{tool}", arguments)

        invoke.__name__ = tool
        return invoke


class _Tools:
    """tools.<server>.<tool>(**kwargs): any upstream tool, by attribute."""

    def __getattr__(self, server):
        if server.startswith("__"):
            raise AttributeError(server)
        return _Server(server)


tools = _Tools()

# The module the generated /servers wrappers import.
_cem_tools = type(sys)("cem_tools")
_cem_tools.call_tool = call_tool
_cem_tools.call_tool_async = call_tool_async
_cem_tools.search_tools = search_tools
_cem_tools.tokenize_pii = tokenize_pii
_cem_tools.detokenize_pii = detokenize_pii
_cem_tools.save_skill = save_skill
_cem_tools.load_skill = load_skill
_cem_tools.list_skills = list_skills
_cem_tools.analyze_skill = analyze_skill
_cem_tools.ToolError = ToolError
_cem_tools.ToolResultWarning = ToolResultWarning
sys.modules["cem_tools"] = _cem_tools
# The generated wrappers are importable as the package `servers`: at /servers
# in the sandbox; without it (`run --no-sandbox`) where they really are, and
# nothing else of the directory that holds them.
_SERVERS_DIR = os.environ.get("CEM_SERVERS_DIR", "/servers")


class _ServersFinder:
    asked = set()

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "servers":
            return importlib.machinery.PathFinder.find_spec(name, [os.path.dirname(_SERVERS_DIR)])
        server = name[len("servers."):] if name.startswith("servers.") else ""
        if not server or "." in server or server in cls.asked:
            return None
        if not os.path.isdir(os.path.join(_SERVERS_DIR, server)):
            # No wrappers yet (nothing searched since the server was
            # configured): the host lists its tools and writes them.
            try:
                found = _host("wrappers", {"server": server}, "import " + name)
            except ToolError as e:
                # No `name=`: `from servers import x` would drop the reason with it.
                raise ModuleNotFoundError(f"No module named {name!r}: {e.message}") from None
            module = (found or {}).get("module") or server
            if module != server:
                # The host matched another spelling (GitHub -> github,
                # sequential-thinking -> sequential_thinking).
                raise ModuleNotFoundError(
                    f"No module named {name!r}: the server {found.get('server')!r} is imported as "
                    f"'servers.{module}' (module names are lowercase, with '_' for '-')"
                )
            cls.asked.add(server)  # asked once; a failure is asked again on the next import
            importlib.invalidate_caches()
        return None  # the package's own path finds the module


sys.meta_path.insert(0, _ServersFinder)


def _clean_cut(text):
    """Ends text cut at a limit on a word boundary, so that no value cut in
    half (an email, a card number) reaches the model where tokenization can
    no longer recognise it: the unbroken run at the end is dropped."""
    end = max(text.rfind(c) for c in " \n\t,;|")
    return text[: end + 1] if end >= len(text) - 256 else text[: max(0, len(text) - 256)]


class _Capture(io.TextIOBase):
    """Collects printed text up to a limit and counts what was cut."""

    def __init__(self, limit):
        self.limit = limit
        self.parts = []
        self.size = 0
        self.dropped = 0

    def writable(self):
        return True

    def write(self, text):
        if not isinstance(text, str):
            text = str(text)
        room = self.limit - self.size
        if room > 0:
            kept = text[:room]
            self.parts.append(kept)
            self.size += len(kept)
            self.dropped += len(text) - len(kept)
        else:
            self.dropped += len(text)
        return len(text)

    def getvalue(self):
        out = "".join(self.parts)
        if self.dropped:
            out = _clean_cut(out)
            out += (
                f"\n[output truncated: {self.dropped} more characters. "
                "Print less, or write large data to a file with write_file()]"
            )
        return out


# --- the seed's helpers, in scope without import ---------------------------------


def _ws_path(path):
    path = os.fspath(path)
    full = os.path.normpath(os.path.join(WORKSPACE, path))
    if full != WORKSPACE and not full.startswith(WORKSPACE + os.sep):
        raise ValueError(f"{path!r} is outside the workspace; use a relative path")
    return full


def read_file(path):
    """Return the text of a workspace file."""
    with open(_ws_path(path), encoding="utf-8") as f:
        return f.read()


def write_file(path, content):
    """Write text (or JSON for other values) to a workspace file, creating directories."""
    full = _ws_path(path)
    os.makedirs(os.path.dirname(full) or WORKSPACE, exist_ok=True)
    if not isinstance(content, str):
        content = json.dumps(content, indent=2, default=str)
    tmp = full + ".cem-partial"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(content)
    os.replace(tmp, full)
    return f"Written {len(content)} bytes to {path}"


def list_files(subpath="."):
    """Workspace files under `subpath` (relative paths), recursively."""
    base = _ws_path(subpath)
    out = []
    for root, dirs, files in os.walk(base):
        dirs.sort()
        for name in sorted(files):
            out.append(os.path.relpath(os.path.join(root, name), WORKSPACE))
    return out


def delete_file(path):
    """Delete a workspace file."""
    os.remove(_ws_path(path))
    return f"Deleted {path}"


def filter_by_field(data, field, value):
    """Items of `data` (dicts) whose `field` equals `value`."""
    return [item for item in data if isinstance(item, dict) and item.get(field) == value]


def summarize_list(data, limit=10):
    """{"count": len(data), "sample": the first `limit` items}."""
    data = list(data)
    return {"count": len(data), "sample": data[:limit]}


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def aggregate_stats(data, numeric_fields=None):
    """{"count", "<field>_sum", "<field>_avg", "<field>_min", "<field>_max"} for numeric fields.

    `numeric_fields` is a field name, a list of them, or None to use every
    numeric field of the first item. Values that are missing or not numbers
    are left out of that field's figures.
    """
    data = list(data)
    result = {"count": len(data)}
    if not data:
        return result
    if numeric_fields is None:
        first = data[0] if isinstance(data[0], dict) else {}
        numeric_fields = [k for k, v in first.items() if _is_number(v)]
    elif isinstance(numeric_fields, str):
        numeric_fields = [numeric_fields]
    for field in numeric_fields:
        values = [d.get(field) for d in data if isinstance(d, dict) and _is_number(d.get(field))]
        if values:
            result[f"{field}_sum"] = sum(values)
            result[f"{field}_avg"] = sum(values) / len(values)
            result[f"{field}_min"] = min(values)
            result[f"{field}_max"] = max(values)
    return result


def format_output(data, max_chars=5000, format="json"):
    """Data as indented JSON (or "table" for a list of dicts, or "text"), cut to `max_chars`."""
    if format == "table" and isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        columns = list(dict.fromkeys(k for row in data for k in row))
        rows = [[str(row.get(c, "")) for c in columns] for row in data]
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
        line = lambda cells: " | ".join(cell.ljust(w) for cell, w in zip(cells, widths))
        text = "\n".join([line(columns), "-+-".join("-" * w for w in widths), *(line(r) for r in rows)])
    elif format == "text":
        text = str(data)
    else:
        text = json.dumps(data, indent=2, default=str)
    return text[:max_chars]


def _namespace():
    ns = {
        "__name__": "__main__",
        "__builtins__": builtins,
        "json": json,
        "re": re,
        "math": math,
        "statistics": statistics,
        "collections": collections,
        "datetime": _datetime_module.datetime,
        "date": _datetime_module.date,
        "timedelta": _datetime_module.timedelta,
        "asyncio": asyncio,
        "workspace": WORKSPACE,
        "read_file": read_file,
        "write_file": write_file,
        "list_files": list_files,
        "delete_file": delete_file,
        "filter_by_field": filter_by_field,
        "summarize_list": summarize_list,
        "aggregate_stats": aggregate_stats,
        "format_output": format_output,
        "call_tool": call_tool,
        "call_tool_async": call_tool_async,
        "search_tools": search_tools,
        "report_progress": report_progress,
        "install": install,
        "InstallError": InstallError,
        "tokenize_pii": tokenize_pii,
        "detokenize_pii": detokenize_pii,
        "save_skill": save_skill,
        "load_skill": load_skill,
        "list_skills": list_skills,
        "tools": tools,
        "ToolError": ToolError,
        "ToolResultWarning": ToolResultWarning,
        "show": show,
        "table": table,
    }
    return ns


# --- pictures and tables in the answer ---------------------------------------------

_SHOWN = []  # this execution's images: {"path": workspace-relative, "mime": ...}
_SHOWN_FIGURES = set()  # id() of the matplotlib figures shown, so none is shown twice
_LIMITS = {"max_images": 8, "max_image_bytes": 10 << 20}
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png", "png"), (b"\xff\xd8\xff", "image/jpeg", "jpg"))


def _sniff(head):
    """The image type of bytes starting with `head`: PNG, JPEG or SVG, else None."""
    for magic, mime, ext in _MAGIC:
        if head.startswith(magic):
            return mime, ext
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1024].lower()
    if text.startswith((b"<svg", b"<?xml", b"<!--", b"<!doctype svg")) and b"<svg" in head.lower():
        return "image/svg+xml", "svg"
    return None


def _shown_name(name, ext):
    if name is None:
        # Sortable by time; the random part keeps two executions in one second apart.
        return f"shown/{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}.{ext}"
    base = os.path.basename(os.fspath(name))
    stem, dot, given = base.rpartition(".")
    if not dot or given.lower() != ext:
        base = f"{base if not dot else stem}.{ext}"
    return f"shown/{base}"


def _figure_png(fig):
    _SHOWN_FIGURES.add(id(fig))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")  # at the figure's own size and dpi
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(fig)  # shown once: not again when the code ends
    return buffer.getvalue()


def _is_pil_image(obj):
    return (type(obj).__module__ or "").startswith("PIL.") and hasattr(obj, "save") and hasattr(obj, "mode")


def _image_bytes(obj):
    """(bytes, None) for an image object, or (None, workspace path) for a file already in the workspace."""
    module = type(obj).__module__ or ""
    if module.startswith("matplotlib"):
        if hasattr(obj, "savefig"):
            return _figure_png(obj), None
        figure = getattr(obj, "figure", None)  # an Axes or an Artist
        if figure is not None and hasattr(figure, "savefig"):
            return _figure_png(figure), None
    if _is_pil_image(obj):
        buffer = io.BytesIO()
        image = obj if obj.mode in ("RGB", "RGBA", "L", "LA", "P", "1") else obj.convert("RGBA")
        image.save(buffer, format="PNG")
        return buffer.getvalue(), None
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj), None
    if isinstance(obj, dict) and obj.get("type") == "image":
        # An image block a tool answered with: its data as sent, or the file the host saved it to.
        if isinstance(obj.get("path"), str):
            return None, obj["path"]
        if isinstance(obj.get("data"), str):
            import binascii

            try:
                return binascii.a2b_base64(obj["data"]), None
            except binascii.Error as e:
                raise ValueError(f"show(): the image block's data is not base64 ({e})") from None
    if isinstance(obj, (str, os.PathLike)):
        return None, obj
    raise TypeError(
        f"show() takes a matplotlib figure or axes, a PIL image, PNG/JPEG/SVG bytes, a workspace path "
        f"or a tool's image block, not {type(obj).__name__}"
    )


def show(obj=None, name=None):
    """Hands an image to this execution's answer: a matplotlib figure or axes (None: the current figure),
    a PIL image, PNG/JPEG/SVG bytes, a workspace path, or an image block a tool returned (a list of
    blocks shows each image in it). The image is saved in the workspace under shown/ (as `name` when
    given) and sent as an image. Returns its workspace path."""
    if obj is None or obj is sys.modules.get("matplotlib.pyplot"):
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None or not pyplot.get_fignums():
            raise ValueError("show() with no argument shows the current matplotlib figure, and there is none")
        obj = pyplot.gcf()
    if isinstance(obj, list):
        images = [b for b in obj if isinstance(b, dict) and b.get("type") == "image"]
        if not images:
            raise TypeError("show() was given a list with no image block in it")
        return [show(b) for b in images]
    if len(_SHOWN) >= _LIMITS["max_images"]:
        raise ValueError(
            f"show(): this execution already shows {len(_SHOWN)} images, the most answers.max_images allows; "
            "combine them into one figure (subplots), or save the rest with savefig() and name their paths"
        )
    data, path = _image_bytes(obj)
    limit = _LIMITS["max_image_bytes"]
    if path is not None:
        full = _ws_path(path)
        try:
            size = os.path.getsize(full)
            with open(full, "rb") as f:
                head = f.read(2048)
        except OSError as e:
            raise ValueError(f"show(): cannot read {os.fspath(path)!r} in the workspace ({e.strerror})") from None
        relative = os.path.relpath(full, WORKSPACE)
    else:
        size, head = len(data), data[:2048]
    if size > limit:
        raise ValueError(
            f"show(): the image is {size:,} bytes, over answers.max_image_bytes ({limit:,}); "
            "save it smaller (a lower dpi, or JPEG) and show that"
        )
    kind = _sniff(head)
    if kind is None:
        raise ValueError(
            f"show(): {head[:8]!r}... is not a PNG, JPEG or SVG image; save it as PNG "
            "(matplotlib: fig.savefig(path, format='png'); PIL: image.save(path, 'PNG')) and show that"
        )
    mime, ext = kind
    if data is not None:
        relative = _shown_name(name, ext)
        os.makedirs(os.path.join(WORKSPACE, "shown"), exist_ok=True)
        with open(os.path.join(WORKSPACE, relative), "wb") as f:
            f.write(data)
    _SHOWN.append({"path": relative, "mime": mime})
    return relative


def _show_open_figures(answer):
    """Shows the figures the code left open (closing one says not to), then closes them all."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        if answer["success"]:
            for number in pyplot.get_fignums():
                figure = pyplot.figure(number)
                if figure.axes or figure.images:
                    show(figure)
    except Exception as e:  # noqa: BLE001 - a figure that cannot be drawn is said, the run stands
        answer["note"] = f"an open figure was not shown: {type(e).__name__}: {e}"
    finally:
        pyplot.close("all")


class Table(list):
    """Rows the answer shows as a table: `table(rows, columns=None)`."""

    def __init__(self, rows, columns):
        super().__init__(rows)
        self.columns = columns


def table(rows, columns=None):
    """Marks `rows` as a table for the answer: dicts (columns: their keys, or those named) or sequences
    (columns then name each position). As `result`, the model reads a Markdown table and the whole rows
    come back as data."""
    rows = list(rows)
    if columns is not None:
        columns = [str(c) for c in columns]
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            out.append({str(k): v for k, v in row.items()} if columns is None else {c: row.get(c) for c in columns})
        elif isinstance(row, (list, tuple)):
            if columns is None:
                raise ValueError("table(): rows that are sequences need columns=[...] to name their values")
            if len(row) != len(columns):
                raise ValueError(f"table(): row {i} has {len(row)} values for {len(columns)} columns")
            out.append(dict(zip(columns, row)))
        else:
            raise TypeError(f"table(): row {i} is a {type(row).__name__}; rows are dicts or sequences")
    if columns is None:
        columns = list(dict.fromkeys(k for row in out for k in row))
    return Table(out, columns)


def _frame_rows(value):
    """A pandas DataFrame or Series as (rows, columns), with a named or non-default index as columns."""
    frame = value.to_frame() if hasattr(value, "to_frame") and not hasattr(value, "columns") else value
    index = frame.index
    default = type(index).__name__ == "RangeIndex" and index.start == 0 and index.step == 1 and index.name is None
    if not default:
        frame = frame.reset_index()
    frame = frame.copy(deep=False)
    frame.columns = [str(c) if not isinstance(c, tuple) else ".".join(map(str, c)) for c in frame.columns]
    rows = json.loads(frame.to_json(orient="records", date_format="iso", default_handler=str))
    return rows, list(frame.columns)


def _is_flat_rows(value):
    scalar = (str, int, float, bool, type(None))
    return (
        isinstance(value, list)
        and value
        and all(isinstance(r, dict) and r and all(isinstance(v, scalar) for v in r.values()) for r in value)
    )


def _table_of(value):
    """(rows, columns) when `value` is a table result: a table(), a DataFrame or Series, flat dicts."""
    if isinstance(value, Table):
        return list(value), value.columns
    module = type(value).__module__ or ""
    if module.startswith("pandas") and type(value).__name__ in ("DataFrame", "Series"):
        return _frame_rows(value)
    if _is_flat_rows(value):
        return value, list(dict.fromkeys(k for row in value for k in row))
    return None


def _table_result(rows, columns, limit):
    """The rows that fit in `limit` characters of JSON, the table's marker, and a note when some were left."""
    size, kept = 2, 0
    for row in rows:
        size += len(_ENCODE(row)) + 2
        if size > limit:
            break
        kept += 1
    marker = {"columns": [str(c) for c in columns], "rows": len(rows)}
    note = None
    if kept < len(rows):
        note = (
            f"the table has {len(rows)} rows; the first {kept} fit in the answer. Return a summary, "
            "or write the rows to a file (df.to_csv('rows.csv')) and read them there"
        )
    return rows[:kept], marker, note


# --- running code ----------------------------------------------------------------


def _agent_traceback(exc):
    """The traceback limited to the agent's own frames, with its line numbers."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == CODE_FILENAME]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def _is_picture(value):
    module = type(value).__module__ or ""
    figure = module.startswith("matplotlib") and (hasattr(value, "savefig") or hasattr(value, "figure"))
    return figure or _is_pil_image(value)


def _jsonable_result(value, limit, answer):
    if value is None:
        return None, None
    if _is_picture(value):
        # A picture as the result is shown (once), not returned as its repr.
        figure = getattr(value, "figure", value)
        if id(figure) not in _SHOWN_FIGURES:
            try:
                show(value)
            except (TypeError, ValueError) as e:
                return None, f"the result is a picture that was not shown: {e}"
        return None, None
    try:
        found = _table_of(value)
    except Exception as e:  # noqa: BLE001 - a frame pandas cannot write is returned as its repr
        found, value = None, value if not hasattr(value, "to_string") else value.to_string()
        answer["note"] = f"the table could not be converted ({type(e).__name__}: {e}); its text is returned"
    if found is not None:
        rows, marker, note = _table_result(*found, limit)
        answer["table"] = marker
        return rows, note
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)[:limit], "result is not JSON-serialisable; its repr() is returned"
    if len(text) > limit:
        return (
            _clean_cut(text[:limit]),
            f"result is {len(text)} characters as JSON, over the {limit} limit; it is cut. "
            "Return a summary, or write the data to a file with write_file()",
        )
    return value, None


def _run(request, ns):
    limit = int(request.get("max_output_chars", 20000))
    for key in _LIMITS:
        if isinstance(request.get(key), int):
            _LIMITS[key] = request[key]
    _SHOWN.clear()
    _SHOWN_FIGURES.clear()
    capture = _Capture(limit)
    answer = {"type": "result", "success": True}
    _add_packages(request.get("packages"))
    ns.update(request.get("context_vars") or {})
    ns.pop("result", None)
    source = request["code"]
    if request.get("argv") is not None:
        # A script run by `code-execution-mcp run`: its own argv and name.
        sys.argv = [request.get("script_name") or "script.py", *request["argv"]]
        ns["__file__"] = sys.argv[0]
    linecache.cache[CODE_FILENAME] = (len(source), None, source.splitlines(True), CODE_FILENAME)
    old_out, old_err = sys.stdout, sys.stderr
    # A script (run) keeps stderr apart, as a program would; snippets merge them.
    errors = _Capture(limit) if request.get("argv") is not None else capture
    sys.stdout, sys.stderr = capture, errors
    try:
        code = compile(source, CODE_FILENAME, "exec", flags=_ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        if code.co_flags & 0x80:  # CO_COROUTINE: the code awaits at top level
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(eval(code, ns))
            finally:
                loop.close()
        else:
            exec(code, ns)
    except SystemExit as e:
        if e.code not in (None, 0):
            code = e.code if isinstance(e.code, int) else 1
            if not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
            answer.update(success=False, error=f"SystemExit: {code}", traceback=_agent_traceback(e), exit_code=code)
    except MemoryError as e:
        answer.update(
            success=False,
            error=f"MemoryError: the memory limit ({request.get('memory_mb')} MB) was reached",
            traceback=_agent_traceback(e),
        )
    except BaseException as e:  # noqa: BLE001 - everything the code raises is the agent's to see
        answer.update(success=False, error=f"{type(e).__name__}: {e}", traceback=_agent_traceback(e))
        name = getattr(e, "name", None) if type(e) is ModuleNotFoundError else None
        if isinstance(name, str) and name.partition(".")[0] not in ("skills", "servers"):
            answer["missing_module"] = name
    finally:
        sys.stdout, sys.stderr = old_out, old_err
    _show_open_figures(answer)
    result, note = _jsonable_result(ns.get("result"), limit, answer)
    answer["result"] = result
    if note:
        answer["note"] = f"{answer['note']}; {note}" if answer.get("note") else note
    if _SHOWN:
        answer["images"] = list(_SHOWN)
    answer["output"] = capture.getvalue()
    if errors is not capture:
        answer["stderr"] = errors.getvalue()
    return answer


def _warm():
    """Runs a trivial execution of our own once, in a throwaway namespace, before the first request: an
    interpreter forked from the zygote shares its memory copy-on-write, and the first execution's reference
    counting would otherwise copy hundreds of pages while the caller waits."""
    _ENCODE(_run({"type": "exec", "code": "result = [None]", "max_output_chars": 100}, _namespace()))
    _DECODE('{"type": "exec", "code": ""}')


def main():
    ns = _namespace()
    _send({"type": "ready", "pid": os.getpid()})
    while True:
        request = _wait(lambda: _REQUESTS.popleft() if _REQUESTS else None) or {"type": "exit"}
        kind = request.get("type")
        if kind == "exec":
            _send(_run(request, ns))
        elif kind == "exit":
            break


if __name__ == "__main__":
    _attach()
    main()
