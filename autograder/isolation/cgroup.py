"""A control group around everything one submission runs under grading: its memory and its processes, as a whole.

Per-process limits (``RLIMIT_AS``, ``RLIMIT_NPROC``) leave three costs unbounded: two processes of one submission
together may take twice a process's cap, root is exempt from ``RLIMIT_NPROC`` (a fork bomb), and the sandbox's
private ``/tmp`` is a tmpfs that bubblewrap before 0.9 cannot cap.  One cgroup per submission bounds all three: its
memory limit counts every process's pages *and* the tmpfs pages its processes wrote (the kernel charges shared
memory to the cgroup of the writer), its pids limit holds for root too.

The sandbox's command joins the group before bubblewrap runs (:func:`enter`: a shell that writes its pid into the
groups' ``cgroup.procs`` and then ``exec``\\ s), so nothing of the submission runs outside it.  Made where the grader
may write a cgroup of its own: cgroup v1 (``memory`` and ``pids`` hierarchies) or cgroup v2 (a parent whose
``cgroup.subtree_control`` has ``memory`` and ``pids``), below the grader's own cgroup — as root, or in a
delegated subtree (``systemd-run --user --scope -p Delegate=yes``).  Elsewhere :func:`create` returns None and
:func:`status` says why; the per-process limits still hold.
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import shlex
import signal
import time

ROOT = "/sys/fs/cgroup"

#: Memory of one submission's processes together, its private /tmp included (IsolatedExecute.sandbox_memory_gib).
MEMORY_GIB = 12.0
#: Processes and threads of one submission together (IsolatedExecute.sandbox_processes).
PROCESSES = 1024


@dataclasses.dataclass(frozen=True)
class Group:
    """One submission's cgroup: a folder per hierarchy (v1: memory and pids; v2: one)."""

    folders: tuple[str, ...]
    version: int

    @property
    def procs(self) -> tuple[str, ...]:
        return tuple(os.path.join(folder, "cgroup.procs") for folder in self.folders)

    def peak_memory(self) -> int | None:
        """The most memory the group has held, bytes (v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak``)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        for folder in self.folders:
            try:
                with open(os.path.join(folder, name)) as handle:
                    return int(handle.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        return None


def _own(hierarchy: str) -> str | None:
    """This process's cgroup path in a v1 hierarchy (``memory``, ``pids``), or in v2 for ``""``."""
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                number, controllers, path = line.rstrip("\n").split(":", 2)
                if (hierarchy and hierarchy in controllers.split(",")) or (not hierarchy and number == "0"):
                    return path
    except OSError:
        return None
    return None


def _layout() -> tuple[int, dict[str, str]] | tuple[None, str]:
    """(version, {what: parent folder}) where this process may make a group, or (None, why not)."""
    v1 = {name: os.path.join(ROOT, name) for name in ("memory", "pids")}
    if all(os.path.isfile(os.path.join(folder, "cgroup.procs")) for folder in v1.values()):
        parents = {}
        for name, mount in v1.items():
            own = _own(name)
            parent = os.path.join(mount, (own or "/").lstrip("/"))
            parents[name] = parent if os.path.isdir(parent) else mount
        if all(os.access(parent, os.W_OK) for parent in parents.values()):
            return 1, parents
        return None, "нет прав создавать cgroup (v1: memory и pids)"
    if os.path.isfile(os.path.join(ROOT, "cgroup.controllers")):
        own = _own("")
        parent = os.path.join(ROOT, (own or "/").lstrip("/"))
        try:
            with open(os.path.join(parent, "cgroup.subtree_control")) as handle:
                enabled = handle.read().split()
        except OSError:
            return None, "не читается cgroup.subtree_control (cgroup v2)"
        if not {"memory", "pids"} <= set(enabled):
            return None, ("в cgroup v2 у родительской группы не включены контроллеры memory и pids: запустите "
                          "проверку через systemd-run --user --scope -p Delegate=yes или от root")
        if not os.access(parent, os.W_OK):
            return None, "нет прав создавать cgroup (v2)"
        return 2, {"both": parent}
    return None, "нет cgroup v1 (memory, pids) и cgroup v2 в /sys/fs/cgroup"


def status() -> tuple[bool, str]:
    """(True, "cgroup v1") where a group can be made here, else (False, why not) in Russian."""
    version, found = _layout()
    return (True, f"cgroup v{version}") if version else (False, found)


def create(memory_bytes: int = int(MEMORY_GIB * 2**30), processes: int = PROCESSES) -> Group | None:
    """A new, empty group with these limits; None where none can be made (see :func:`status`)."""
    version, parents = _layout()
    if version is None:
        return None
    name = f"autograder-{os.getpid()}-{secrets.token_hex(4)}"
    folders = []
    try:
        for what, parent in parents.items():
            folder = os.path.join(parent, name)
            os.mkdir(folder)
            folders.append(folder)
            limits = {"memory": {"memory.limit_in_bytes": memory_bytes}, "pids": {"pids.max": processes},
                      "both": {"memory.max": memory_bytes, "memory.swap.max": 0, "pids.max": processes}}[what]
            for file, value in limits.items():
                _write(os.path.join(folder, file), str(value), required=file != "memory.swap.max")
        if version == 1:  # no swap beyond the limit where the kernel accounts it (memsw)
            _write(os.path.join(folders[0], "memory.memsw.limit_in_bytes"), str(memory_bytes), required=False)
    except OSError:
        remove(Group(tuple(folders), version))
        return None
    return Group(tuple(folders), version)


def _write(path: str, value: str, *, required: bool) -> None:
    try:
        with open(path, "w") as handle:
            handle.write(value)
    except OSError:
        if required:
            raise


def enter(group: Group | None, argv: list[str]) -> list[str]:
    """``argv`` started inside ``group``: a shell joins it, then becomes ``argv`` (nothing runs outside it)."""
    if group is None:
        return list(argv)
    joins = " && ".join(f"echo $$ > {shlex.quote(path)}" for path in group.procs)
    return ["/bin/sh", "-c", f'{joins} && exec "$@"', "autograder-cgroup", *argv]


def remove(group: Group | None) -> None:
    """Kill whatever still runs in the group, then remove it."""
    if group is None:
        return
    for _ in range(50):
        alive = _members(group)
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)
    for folder in group.folders:
        try:
            os.rmdir(folder)
        except OSError:
            pass


def _members(group: Group) -> set[int]:
    found = set()
    for path in group.procs:
        try:
            with open(path) as handle:
                found |= {int(line) for line in handle if line.strip()}
        except (OSError, ValueError):
            continue
    return found
