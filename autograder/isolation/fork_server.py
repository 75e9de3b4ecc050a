"""The fork server: checks start as forks of a process that has imported numpy, CuPy and the grader once.

``python -I -m autograder.isolation.worker --serve`` (:func:`autograder.isolation.worker.serve`), started
like a worker (same interpreter, flags and environment, its own session; in the submission's sandbox
when there is one), never reads a request or runs student code: for each order it forks one child that
becomes exactly the process a new worker would be.  This module is the grader's side: starting the
server, ordering a fork, waiting for the child's end.  A server that dies is started again; a check it
dropped is run again as a new worker (:mod:`autograder.isolation.run`).

A process keeps up to two servers: one for CPU checks and, where a sandbox gives GPU checks the GPU's device
nodes, one in that sandbox for GPU checks (a lesson that mixes them does not restart a server at each switch).
A server never initialises CUDA (a child forked after that could not use the GPU): it only imports, and it
refuses to fork once it has the driver's device files open or mapped (:func:`autograder.isolation.worker.serve`).
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from . import leftovers, sandbox as sandbox_module
from .home import private_home


class ServerGone(Exception):
    """The fork server stopped answering (it died, or this process lost it)."""


class NoFork(Exception):
    """The fork server declined this check (it could not import the check, or threads run)."""


SERVER_LOCK = threading.Lock()
#: The ForkServers of this process: "server" for CPU checks (and every check outside a sandbox), "gpu" for GPU
#: checks in a sandbox with the GPU's device nodes (:func:`slot`).
SERVER: dict = {}


def slot(box) -> str:
    """Which of this process's servers starts a check in sandbox ``box``."""
    return "gpu" if box is not None and box.gpu else "server"


def server_for(env: dict, box=None):
    """This process's fork server for workers with environment ``env`` in sandbox ``box`` (started on
    first use, again when either changed or the server died); None when none can be started."""
    name = slot(box)
    server = SERVER.get(name)
    if server is not None and (server.owner != os.getpid() or server.env != env or server.base != box
                               or server.dead()):
        if server.owner == os.getpid():
            server.close()
        server = None
    if server is None:
        try:
            server = SERVER[name] = ForkServer(env, box)
        except OSError:
            return None
    return server


def close_servers_of(box) -> None:
    """Stop this process's servers that live in sandbox ``box`` (whichever of its GPU settings): its end."""
    for server in list(SERVER.values()):
        if server.owner == os.getpid() and server.base is not None \
                and server.base.with_gpu(False) == box.with_gpu(False):
            server.close()


@atexit.register
def stop() -> None:
    """At exit the servers get end-of-file and end; waiting for them keeps their time in this
    process's accounting (``RUSAGE_CHILDREN``) and leaves no zombie."""
    for server in list(SERVER.values()):
        if server.owner != os.getpid():
            continue
        with contextlib.suppress(OSError):
            server.control.close()
        try:
            server.process.wait(timeout=2)
        except Exception:  # noqa: BLE001 - a check still running: the server dies with us anyway
            server.close()


class ForkServer:
    """``python -I -m autograder.isolation.worker --serve``, started like a worker (same interpreter, flags and
    environment, own session), that forks one child per check (:func:`autograder.isolation.worker.serve`)."""

    def __init__(self, env: dict, box=None):
        self.env, self.owner, self.base = dict(env), os.getpid(), box
        # The server's folder: the only one its sandbox may write, where its children's folders are made; in a
        # sandbox the server empties it after each check (and the sandbox's /tmp and /dev/shm), keeping only its
        # own home (the server imports numpy and the grader with an empty home of its own: matplotlib, for one,
        # reads its settings at import; each child then points the variables at its check's home).
        self.home = leftovers.OwnedFolder(leftovers.SERVER_HOME, dir=box.scratch if box is not None else None)
        self.folder = self.home.name
        self.sandbox = None if box is None else dataclasses.replace(box, scratch=self.folder)
        server_home = os.path.join(self.folder, SERVER_OWN_HOME)
        server_env = {**env, **private_home(server_home)}
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            argv = [sys.executable, "-I", "-m", "autograder.isolation.worker", "--serve", str(theirs.fileno())]
            if box is not None:  # the server and every check it forks live in the submission's sandbox
                argv = sandbox_module.command(self.sandbox, argv, env=server_env, cwd=self.folder)
            self.process = subprocess.Popen(
                argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, cwd="/", env=server_env, start_new_session=True)

    def dead(self) -> bool:
        return self.process.poll() is not None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.control.close()
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(Exception):
            self.process.wait(timeout=5)
        self.home.cleanup()
        for name, server in list(SERVER.items()):
            if server is self:
                del SERVER[name]

    def message(self, timeout: float | None) -> dict:
        try:
            self.control.settimeout(timeout)
            data = self.control.recv(65536)
        except socket.timeout:
            raise
        except OSError as error:
            raise ServerGone(str(error)) from None
        if not data:
            raise ServerGone("the fork server closed the connection")
        return json.loads(data)

    def start(self, check_id: str, workdir: str, home: dict, out, err, lock) -> "ForkedWorker":
        stdin, request_pipe = os.pipe()
        order = {"check_id": check_id, "cwd": workdir, "env": home}
        try:
            try:
                socket.send_fds(self.control, [json.dumps(order).encode()], [stdin, out.fileno(), err.fileno()])
            except OSError as error:
                raise ServerGone(str(error)) from None
            finally:
                os.close(stdin)
            try:
                reply = self.message(timeout=60)
            except socket.timeout:
                raise ServerGone("the fork server did not answer") from None
        except BaseException:
            os.close(request_pipe)
            raise
        if "pid" not in reply:
            os.close(request_pipe)
            raise NoFork(reply.get("error"))
        return ForkedWorker(self, reply["pid"], request_pipe, lock)


class ForkedWorker:
    """A worker forked by the fork server, with what run_check uses of subprocess.Popen."""

    def __init__(self, server: ForkServer, pid: int, request_pipe: int, lock):
        self.server, self.pid, self.returncode = server, pid, None
        self._pipe, self._lock = request_pipe, lock

    def communicate(self, request: bytes | None, timeout: float) -> None:
        """Write the request (None: it was written by an earlier call that timed out) and wait for the end."""
        deadline = time.monotonic() + timeout
        if self._pipe is not None:
            pipe, self._pipe, view = self._pipe, None, memoryview(request)
            try:
                while view:  # BrokenPipeError: the worker died before it read the request
                    view = view[os.write(pipe, view):]
            finally:
                os.close(pipe)
        self._wait(max(deadline - time.monotonic(), 0.001), timeout)

    def wait(self) -> int:
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        try:
            return self._wait(None, None)
        except ServerGone:  # after a kill or a broken pipe: the child died with its server
            self.returncode = -signal.SIGKILL
            return self.returncode

    def _wait(self, remaining: float | None, timeout: float | None) -> int:
        if self.returncode is not None:
            return self.returncode
        try:
            reply = self.server.message(remaining)
        except socket.timeout:
            raise subprocess.TimeoutExpired("autograder.isolation.worker", timeout) from None
        except ServerGone:
            self._release()
            self.server.close()
            raise
        self.returncode = int(reply["returncode"])
        self._release()
        return self.returncode

    def kill(self) -> None:
        """Kill what the check left running.  Outside a sandbox: the child's process group.  In one, the
        server's pids are the sandbox's own, so the server has already killed every other process there
        once the check ended; a check still running (a timeout) takes the whole sandbox with it."""
        if self.server.sandbox is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        elif self.returncode is None:
            self.server.close()
            self.returncode = -signal.SIGKILL
            self._release()

    def finish(self) -> None:
        """After run_check: a worker whose end the server never reported (an exception in the
        grader) leaves the server out of step, so that server is not used again."""
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        if self.returncode is None:
            self.server.close()
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


#: The fork server's own home, in its folder (the one thing there that outlives a check).
SERVER_OWN_HOME = "server-home"


def reserve(env: dict, box=None) -> "ForkServer | None":
    """This process's fork server for a check (see :func:`server_for`), held for it until :func:`start_on` or
    the worker's end; None: another thread holds it, or none could start (the caller starts a plain worker)."""
    if not SERVER_LOCK.acquire(blocking=False):  # another thread's check: a plain worker
        return None
    try:
        server = server_for(env, box)
    except BaseException:
        SERVER_LOCK.release()
        raise
    if server is None:
        SERVER_LOCK.release()
    return server


def start_on(server: "ForkServer", check_id: str, workdir: str, home: dict, out, err) -> "ForkedWorker | None":
    """The check's worker forked by ``server`` (reserved: :func:`reserve`), its folders in ``server.folder``; None
    when it could not fork (the reservation is then released and the caller starts a plain worker)."""
    try:
        return server.start(check_id, workdir, home, out, err, SERVER_LOCK)
    except (ServerGone, NoFork) as error:
        if isinstance(error, ServerGone):
            server.close()
    except BaseException:
        SERVER_LOCK.release()
        raise
    SERVER_LOCK.release()
    return None
