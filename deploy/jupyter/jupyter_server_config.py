"""The terminal of every user's server on the course's JupyterHub (this folder is on each server's
JUPYTER_CONFIG_PATH: deploy/course-singleuser, and the container image).

A server a spawner starts has no terminal, so JupyterLab's terminal would start a login shell, and Debian's
/etc/profile sets PATH anew: `nbgrader` and `course` were «not found» in it.  The login shell still runs (the
user's profile as ever), then hands over to an interactive shell with the course's environment first on PATH.
"""
import os
import shlex
import sys

c = get_config()  # noqa: F821 (provided by Jupyter Server)

COURSE_BIN = os.path.dirname(sys.executable)  # the course's environment: the server runs on its Python
c.ServerApp.terminado_settings = {"shell_command": [
    "/bin/sh", "-lc", f'PATH={shlex.quote(COURSE_BIN)}:"$PATH"; export PATH; exec "${{SHELL:-/bin/sh}}" -i']}
