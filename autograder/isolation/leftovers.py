"""Temporary folders that outlive a killed grader: each is locked by the process that made it, and a later
grader removes those whose lock nobody holds.

A grader stopped by SIGKILL, the OOM killer or a power cut runs no cleanup, and a grading machine is used all term:
without this, every such stop left its folders in TMPDIR — a submission's scratch folder (a copy of the student's
files, the kernel's connection file), the home template, an unsandboxed fork server's home.  :class:`OwnedFolder`
makes a folder and, beside it, a lock file that its process keeps locked (``flock``: the kernel releases it when
the process ends, however it ends); :func:`remove_abandoned` removes this user's folders of :data:`PREFIXES` whose
lock is free.  No process id is trusted (another PID namespace may share TMPDIR), and a folder without a lock file
(being made, or made before locks) is left alone.  ``course autograde``'s own scratch folder has its reaper
(:mod:`autograder.course.autograde`).
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import stat
import tempfile
import weakref

#: The prefixes of the grader's owned folders in TMPDIR.
SANDBOX_SCRATCH = "autograder-sandbox-"
HOME_TEMPLATE = "autograder-home-template-"
SERVER_HOME = "autograder-server-"
PREFIXES = (SANDBOX_SCRATCH, HOME_TEMPLATE, SERVER_HOME)


def lock_of(folder: str) -> str:
    """The lock file of an owned folder: beside it, not in it (a sandbox that can write into the folder never sees
    its lock)."""
    return folder + ".lock"


class OwnedFolder:
    """``tempfile.TemporaryDirectory`` with a lock its process holds until :meth:`cleanup` (or its exit): the lock
    file is locked under another name and then renamed into place, so a lock file is never seen unlocked while
    its maker lives."""

    def __init__(self, prefix: str, dir: str | None = None):
        self.name = tempfile.mkdtemp(prefix=prefix, dir=dir)
        fd, pending = tempfile.mkstemp(prefix=".pending-lock-", dir=os.path.dirname(self.name))
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(pending, lock_of(self.name))
        self._finalizer = weakref.finalize(self, _remove, self.name, fd, os.getpid())

    def cleanup(self) -> None:
        self._finalizer()


def _remove(folder: str, fd: int, maker: int) -> None:
    if os.getpid() == maker:  # not in a forked child: the folder is its parent's
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(lock_of(folder))
    with contextlib.suppress(OSError):
        os.close(fd)


def remove_abandoned(prefixes: tuple[str, ...] = PREFIXES) -> int:
    """Remove this user's folders in TMPDIR named with ``prefixes`` whose lock is free (their process ended), with
    their locks; how many were removed."""
    removed = 0
    for prefix in prefixes:
        for lock in glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), glob.escape(prefix) + "*.lock")):
            folder = lock[:-len(".lock")]
            with contextlib.suppress(OSError):
                info = os.lstat(lock)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                    continue
                fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError (an OSError): in use
                    if os.path.isdir(folder) and not os.path.islink(folder) and os.lstat(folder).st_uid == os.getuid():
                        shutil.rmtree(folder, ignore_errors=True)
                        removed += 1
                    os.unlink(lock)
                finally:
                    os.close(fd)
    return removed
