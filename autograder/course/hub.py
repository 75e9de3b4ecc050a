"""The course's JupyterHub on one machine (deploy/jupyterhub_config.py): who is an instructor, what of the course
folder other users may read, and whether they can run the course's environment at all.
"""
from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from .publish import PUBLISHED

#: What of the course folder every user's server reads: what `course publish` gives students (without the
#: benchmark scripts: they run the reference solutions), the environment and the deployment's own folder.
#: Everything else at the top of the course folder is closed to other users.
SHARED = (set(PUBLISHED) - {"benchmarks"}) | {".venv", "deploy"}


def members(group: str) -> set[str]:
    """The Unix users of ``group``: its listed members and those whose primary group it is (none if no such group)."""
    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return set()
    return set(entry.gr_mem) | {user.pw_name for user in pwd.getpwall() if user.pw_gid == entry.gr_gid}


def close_private_paths(course: Path) -> list[Path]:
    """Others may pass through the course folder but not list it, and reach only :data:`SHARED` in it; returns
    the paths closed now (those that were open to others)."""
    course.chmod((course.stat().st_mode & ~(stat.S_IROTH | stat.S_IWOTH)) | stat.S_IXOTH)
    closed = []
    for path in sorted(course.iterdir()):
        if path.name in SHARED or path.is_symlink():
            continue
        mode = path.stat().st_mode
        if mode & stat.S_IRWXO:
            path.chmod(mode & ~stat.S_IRWXO)
            closed.append(path)
    return closed


def close_home(user: str, passed_through: tuple[Path, ...] = ()) -> Path | None:
    """The user's home closed to everyone else as the hub starts their server: ``useradd --create-home`` makes it
    755, and what nbgrader fetches into it keeps the exchange's 644, so another student could read the answers from
    a terminal.  Mode 700 at most; 711 (others pass through, list nothing) where one of ``passed_through`` (the
    course's checkout, its folder, the exchange: every server needs them) lies inside it.  Returns the home if it
    was open more than that; None if not, if it is missing or if it is not the user's own (a shared folder stays)."""
    try:
        entry = pwd.getpwnam(user)
        home = Path(entry.pw_dir).resolve()
        status = home.stat()
    except (KeyError, OSError):
        return None
    if status.st_uid != entry.pw_uid:
        return None
    inside = any(home == Path(p).resolve() or home in Path(p).resolve().parents for p in passed_through)
    allowed = stat.S_IRWXU | (stat.S_IXGRP | stat.S_IXOTH if inside else 0)
    mode = stat.S_IMODE(status.st_mode)
    if not mode & ~allowed & (stat.S_IRWXG | stat.S_IRWXO):
        return None
    home.chmod(mode & (allowed | stat.S_ISVTX | stat.S_ISGID))
    return home


def closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to ``path`` (symlinks resolved) that users other than its owner cannot enter,
    or ``path`` itself if they cannot run it; None if every user can."""
    path = Path(os.path.realpath(path))
    for folder in reversed(path.parents):
        if not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None if path.stat().st_mode & stat.S_IXOTH else path
