"""JupyterHub for the course on one machine: local Unix users, nbgrader's exchange in a local folder.

Started as root by `make hub` (JupyterHub's own LocalProcessSpawner runs each user's server as that Unix user).
Who is who, by Unix group (COURSE_ID from deploy/jupyter/nbgrader_config.py, "module07" by default):
  COURSE_ID-instructors  the course folder (COURSE_DIR, this checkout by default) with nbgrader's Formgrader
  COURSE_ID-students     the students' lab in their home; Assignment List fetches and submits through the exchange
Users log in with their Unix password (PAM).  Every server is started by deploy/course-singleuser, which gives
it the lab of `make lab` (the repository's .jupyter/).  This is nbgrader's documented "one class, one grader"
setup (https://nbgrader.readthedocs.io, "Using nbgrader with JupyterHub").

What stays private on a machine the students share: every user's home is closed to the others as their server
starts (autograder.course.hub.close_home), everything the hub creates is its owner's alone (umask 077), and the
course folder's answers (solutions/, lessons/, tests/, .git, the gradebook ...) are closed to
other users at start; students read only what `course publish` would give them, and the environment.

Environment (all optional): COURSE_DIR (the instructor's course folder), COURSE_HUB_STATE (the hub's database
and cookie secret; default .hub/ in this checkout), COURSE_ID and COURSE_EXCHANGE (read through
deploy/jupyter/nbgrader_config.py).
"""
import os
import sys
from pathlib import Path

from traitlets.config.loader import PyFileConfigLoader

from autograder.course.hub import close_home, close_private_paths, closed_to_others, members

c = get_config()  # noqa: F821 (provided by JupyterHub)

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
COURSE_DIR = Path(os.environ.get("COURSE_DIR", CHECKOUT)).resolve()
STATE = Path(os.environ.get("COURSE_HUB_STATE", CHECKOUT / ".hub")).resolve()

# The course id and the exchange: one place, the file every user's server reads.
_exchange = PyFileConfigLoader("nbgrader_config.py", str(HERE / "jupyter")).load_config()
COURSE_ID = _exchange.CourseDirectory.course_id
EXCHANGE = Path(_exchange.Exchange.root)
INSTRUCTORS = f"{COURSE_ID}-instructors"
STUDENTS = f"{COURSE_ID}-students"


def prepare_machine() -> None:
    """Refuse to start where the users could not run the course's Python; the exchange (world-writable with the
    sticky bit, as nbgrader's docs set it up), the hub's own state folder, the course folder's private parts closed."""
    closed = closed_to_others(CHECKOUT / ".venv" / "bin" / "python")
    if closed is not None:
        sys.exit(f"JupyterHub курса не запущен: Python окружения .venv лежит в {closed}, куда другим пользователям "
                 f"нет входа, и их серверы не запустятся. Пересоздайте окружение из системного Python: "
                 f"rm -rf .venv && make .venv/.installed PYTHON=/usr/bin/python3")
    # jupyter_core's one-time migration of IPython 3 settings would write its marker into the shared .jupyter/
    # (every user's JUPYTER_CONFIG_DIR, read-only for them): marked done once, here.
    (CHECKOUT / ".jupyter" / "migrated").touch()
    EXCHANGE.mkdir(parents=True, exist_ok=True)
    EXCHANGE.chmod(0o1777)
    STATE.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in close_private_paths(COURSE_DIR):
        print(f"course hub: {path} closed to other users", file=sys.stderr)


os.umask(0o077)  # every user's server and what it writes: its owner's alone (the exchange sets its own modes)
prepare_machine()

# --- who may log in, and as what ---------------------------------------------------------------------------
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {INSTRUCTORS, STUDENTS}
# JupyterHub's own roles: instructors see the class in the hub's admin page and may start, stop and open the
# students' servers; students have the default "user" role (their own server only).  The hub's groups are
# read from the Unix groups at start (restart the hub after adding an instructor).
c.JupyterHub.load_groups = {"instructors": {"users": sorted(members(INSTRUCTORS))},
                            "students": {"users": sorted(members(STUDENTS))}}
c.JupyterHub.load_roles = [{
    "name": "instructor",
    "description": "the course's instructors: the class's servers",
    "scopes": ["admin-ui", "list:users", "read:users", "admin:servers!group=students",
               "access:servers!group=students"],
    "groups": ["instructors"],
}]

# --- every user's server: the course's lab -----------------------------------------------------------------
c.Spawner.cmd = [str(HERE / "course-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120  # a first start imports the lab's extensions: on a loaded machine, a minute


def before_start(spawner) -> None:
    """The user's home closed to the other users (useradd makes it 755), and COURSE_ROLE for
    deploy/course-singleuser: instructor for the instructors' group, else student."""
    closed = close_home(spawner.user.name, passed_through=(CHECKOUT, COURSE_DIR, EXCHANGE))
    if closed is not None:
        spawner.log.info("course hub: %s closed to other users", closed)
    instructor = spawner.user.name in members(INSTRUCTORS)
    spawner.environment.update({"COURSE_ROLE": "instructor" if instructor else "student",
                                "COURSE_DIR": str(COURSE_DIR), "COURSE_ID": COURSE_ID,
                                "COURSE_EXCHANGE": str(EXCHANGE)})


c.Spawner.pre_spawn_hook = before_start

# --- idle servers stopped: a class of 200 does not keep 200 servers (and their kernels' memory) all night -------
#: Seconds without activity after which a user's server is stopped (its files stay; the next login starts it
#: again). COURSE_IDLE_TIMEOUT overrides; 0 turns the culler off.
IDLE_TIMEOUT_S = int(os.environ.get("COURSE_IDLE_TIMEOUT", 3600))
if IDLE_TIMEOUT_S > 0:
    c.JupyterHub.services = [{"name": "idle-culler", "command": [
        sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={IDLE_TIMEOUT_S}",
        f"--cull-every={max(10, min(300, IDLE_TIMEOUT_S // 4))}"]}]
    c.JupyterHub.load_roles = [*c.JupyterHub.load_roles, {
        "name": "idle-culler", "description": "stops the servers idle for COURSE_IDLE_TIMEOUT seconds",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"]}]

# --- the hub itself ----------------------------------------------------------------------------------------
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.command = [str(CHECKOUT / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
