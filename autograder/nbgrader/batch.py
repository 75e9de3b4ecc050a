"""Several nbgrader commands in one Python process: ``python -m autograder.nbgrader.batch JSON``.

``course grade`` runs ``nbgrader generate_assignment`` and then ``nbgrader autograde`` in a
scratch course.  As two ``nbgrader`` processes, each spent seconds importing nbgrader (jsonschema,
which nbformat imports, built an IRI grammar at import: ``autograder/__init__.py`` stops that now)
before doing anything, and the first one started a third process, ``alembic heads``, to learn the
gradebook schema version.  Here the commands run one after another through nbgrader's own command line
(:class:`NbGraderApp`, the same config files, the same arguments), with the version read in this
process from the same alembic scripts.  The first command that fails stops the batch; the exit
status is its own.  ``--scratch``: the course is a throwaway copy (``course grade``), so its
gradebook's commits do not wait for the disk.

    python -m autograder.nbgrader.batch [--scratch] '[["generate_assignment", "02_fused_rmsnorm", "--force"],
                                                      ["autograde", "02_fused_rmsnorm", "--force"]]'
"""
from __future__ import annotations

import json
import sys


def alembic_head() -> str:
    """The gradebook schema version nbgrader stamps a new gradebook with: what its
    ``get_alembic_version`` reads from ``alembic heads`` in a subprocess, read in this one."""
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    script = ScriptDirectory(ALEMBIC_DIR)
    return [revision.revision for revision in script.get_revisions(script.get_heads())][0]


def _forget_apps() -> None:
    """Drop the singleton apps of the command that just ran, so the next one starts afresh."""
    from traitlets.config import Application

    pending = [Application]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "_instance" in vars(cls):
            cls._instance = None


def run(argv: list[str]) -> int:
    """One nbgrader command line (without the leading ``nbgrader``); its exit status."""
    from nbgrader.apps.nbgraderapp import NbGraderApp

    try:
        NbGraderApp.launch_instance(argv)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    finally:
        _forget_apps()
    return 0


def _no_fsync() -> None:
    """SQLite commits without waiting for the disk (``PRAGMA synchronous=OFF``): for a scratch
    course's gradebook, which nobody keeps, and whose every commit otherwise costs a few fsyncs."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def connect(dbapi_connection, _record):
        if type(dbapi_connection).__module__.startswith("sqlite3"):
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA synchronous=OFF")
            cursor.close()


def main(commands: list[list[str]], scratch: bool = False) -> int:
    import nbgrader.api  # quick: without rfc3987_syntax (autograder/__init__.py)

    nbgrader.api.get_alembic_version = alembic_head
    if scratch:
        _no_fsync()
    for argv in commands:
        status = run([str(a) for a in argv])
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[-1]), scratch=sys.argv[1:2] == ["--scratch"]))
