"""Does the course's JupyterHub (deploy/jupyterhub_config.py) carry a class through nbgrader's exchange?

The real thing, nothing mocked: Unix users made by the test (an instructor and three students, in the Unix groups
the hub config reads), JupyterHub from the venv started as root on deploy/jupyterhub_config.py, its proxy from
npm (package.json), every user's server started through the hub's REST API and spawned as that Unix user by
deploy/course-singleuser.  Each user acts in their own server, with a token of their own: the instructor through
nbgrader's Formgrader API (generate, release, due date, collect, autograde, feedback), the students through
nbgrader's Assignment List API (fetch, submit, fetch feedback) and the Jupyter contents API (their answers).

- `make test` (:func:`test_a_student_submits_and_the_instructor_grades_on_the_hub`): the hub starts, the
  instructor releases lesson 02, one student fetches, answers right and submits, the instructor collects and
  autogrades (in the OS sandbox), and the grade equals `course grade` of the same notebook;
- `make test-full` (:func:`test_a_class_on_the_hub`, COURSE_FULL_AUTOGRADE=1): a right and a wrong answer, a
  third student submitting after the due date (graded, with the late flag), feedback generated and released,
  each student's feedback showing their own checks and no hidden test, every grade equal to `course grade`, and
  one student pressing Validate in their hub lab in headless Chromium (the course's lab: Russian UI).

Skipped only where it cannot run: not root (it creates Unix users, and JupyterHub's spawner switches to them).
Where the venv's Python lies under a folder only root may enter (a pyenv under /root), the test opens that
folder to pass through while it runs (:func:`python_for_every_user`).
"""
from __future__ import annotations

import csv
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest

from autograder.course import folder as course_folder, grading, nbgrader_cli, status
from autograder.course import paths as course
from autograder.course.hub import closed_to_others
from autograder.nbgrader import cells
from autograder.nbgrader.gradebook import open_gradebook
from bank import banks
from helpers import assert_feedback_hides_hidden_tests, free_port, full_only

LESSON = "02_fused_rmsnorm"
HUB_CONFIG = course.ROOT / "deploy" / "jupyterhub_config.py"
PROXY = course.ROOT / "node_modules" / ".bin" / "configurable-http-proxy"
#: The test's own course id (so its Unix groups and users never meet a real course's on the same machine).
COURSE_ID = f"hubtest{os.getpid() % 100000}"
INSTRUCTOR = f"{COURSE_ID}i"
#: student -> what they hand in: the reference answers (solutions/), or a known mistake of the bank.
SAMPLE_STUDENT = f"{COURSE_ID}a"
RIGHT, WRONG, LATE = f"{COURSE_ID}b", f"{COURSE_ID}c", f"{COURSE_ID}d"
WRONG_ENTRY = "eps_outside_root"
PASSWORD = secrets.token_urlsafe(12)
ARTIFACTS = course.ROOT / "artifacts"

VENV_PYTHON = course.ROOT / ".venv" / "bin" / "python"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (run the suite as root, e.g. sudo .ci/run): the test "
                                                 "creates Unix users and JupyterHub's spawner runs as root to "
                                                 "switch to each of them"),
]


def answers(student: str) -> dict[str, str]:
    """The answer cells a student writes: the reference answers, one student a known mistake of the bank."""
    reference = grading.reference_answers(LESSON)
    if student == WRONG:
        entry = next(e for e in banks()[LESSON].WRONG if e.name == WRONG_ENTRY)
        return {**reference, **entry.answers}
    return reference


def run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True)


class Hub:
    """A running JupyterHub: its REST API with the test service's token, and each user's server with theirs."""

    def __init__(self, url: str, token: str, log: Path):
        self.url, self.token, self.log = url, token, log
        self.tokens: dict[str, str] = {}

    def request(self, method: str, url: str, token: str, body=None, timeout: float = 60, parse: bool = True):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Authorization": f"token {token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                text = reply.read().decode()
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{method} {url}: {error.code} {error.read().decode(errors='replace')[:3000]}"
                                 f"\n--- hub log (end) ---\n{self.log_tail()}") from error
        return json.loads(text) if parse and text.strip() else text

    def api(self, method: str, path: str, body=None):
        return self.request(method, f"{self.url}/hub/api/{path}", self.token, body)

    def server(self, user: str, method: str, path: str, body=None, timeout: float = 120, parse: bool = True, **query):
        """A call to ``user``'s own server, with ``user``'s own token (``parse``: the reply is JSON)."""
        url = f"{self.url}/user/{user}/{urllib.parse.quote(path)}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        return self.request(method, url, self.tokens[user], body, timeout, parse)

    def start(self, *users: str, timeout_s: float = 180) -> None:
        """Start the users' servers through the hub and wait until each is ready; a token for each user."""
        for user in users:
            self.api("POST", f"users/{user}/server")
            self.tokens[user] = self.api("POST", f"users/{user}/tokens", {"note": "tests/test_hub.py"})["token"]
        deadline = time.monotonic() + timeout_s
        for user in users:
            while not (self.api("GET", f"users/{user}")["servers"].get("", {}).get("ready")):
                assert time.monotonic() < deadline, f"{user}'s server did not start\n{self.log_tail()}"
                time.sleep(0.5)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


def formgrader(hub: Hub, path: str, method: str = "POST", body=None, timeout: float = 300) -> dict:
    """The instructor's Formgrader API (what its buttons call); an action's reply must say it succeeded."""
    reply = hub.server(INSTRUCTOR, method, f"formgrader/api/{path}", body, timeout=timeout)
    if isinstance(reply, dict) and "success" in reply:
        assert reply["success"], f"formgrader {path}: {reply.get('error') or reply}\n{reply.get('log', '')[-3000:]}"
    return reply


def assignment_list(hub: Hub, student: str, action: str):
    """A student's Assignment List action (fetch, submit, fetch_feedback) in the student's own server."""
    reply = hub.server(student, "POST", f"assignments/{action}", assignment_id=LESSON, course_id=COURSE_ID)
    assert not (isinstance(reply, dict) and reply.get("success") is False), f"{student} {action}: {reply}"
    return reply


def hand_in(hub: Hub, student: str) -> None:
    """The student fetches the lesson, writes their answers into the fetched notebook and submits it."""
    assignment_list(hub, student, "fetch")
    path = f"api/contents/{LESSON}/{LESSON}.ipynb"
    model = hub.server(student, "GET", path, content=1)
    nb = nbformat.from_dict(model["content"])
    mine = answers(student)
    written = {cells.grade_id(c) for c in nb.cells if cells.grade_id(c) in mine}
    for cell in nb.cells:
        if cells.grade_id(cell) in mine:
            cell.source = mine[cells.grade_id(cell)]
    assert written == set(grading.reference_answers(LESSON)), written  # the fetched notebook is the lesson's
    hub.server(student, "PUT", path, {"type": "notebook", "format": "json", "content": nb})
    assignment_list(hub, student, "submit")


def assert_private_to(student: str, inbound: Path, *, other: str) -> None:
    """Another student, from a terminal of their own (a shell as that Unix user), can neither list nor read the
    student's home (the fetched notebook with the answers) nor list the exchange's inbound.  The submission in it is
    readable by nbgrader's design (644, so that the instructor collects it) but named with nbgrader's 12 random
    characters (72 bits): nobody who cannot list the folder finds it."""
    import pwd

    notebook = Path(pwd.getpwnam(student).pw_dir) / LESSON / f"{LESSON}.ipynb"
    submitted = list(inbound.glob(f"{student}+{LESSON}+*"))
    assert notebook.is_file() and len(submitted) == 1, (notebook, submitted)
    assert re.fullmatch(r"[A-Za-z0-9_-]{12}", submitted[0].name.rsplit("+", 1)[1]), submitted[0].name
    for argv in (["ls", str(notebook.parent.parent)], ["cat", str(notebook)], ["ls", str(inbound)]):
        done = subprocess.run(["runuser", "-u", other, "--", *argv], capture_output=True, text=True)
        assert done.returncode != 0 and "Permission denied" in done.stderr, (argv, done.stdout[:300], done.stderr)


def in_terminal(hub: Hub, user: str, command: str, timeout_s: float = 60) -> str:
    """What ``command`` prints in a new JupyterLab terminal of ``user``'s server (terminado's websocket, as the lab's
    terminal panel talks to it), up to the line the test marks its end with."""
    import asyncio

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    name = hub.server(user, "POST", "api/terminals")["name"]
    url = f"{hub.url.replace('http', 'ws', 1)}/user/{user}/terminals/websocket/{name}"
    mark = f"END-{secrets.token_hex(4)}"

    async def talk() -> str:
        socket = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {hub.tokens[user]}"}))
        socket.write_message(json.dumps(["stdin", f"{command}; echo {mark[:4]}''{mark[4:]}\r"]))
        seen = ""
        while mark not in seen:
            message = await socket.read_message()
            assert message is not None, f"the terminal closed: {seen[-2000:]}"
            kind, *text = json.loads(message)
            if kind == "stdout":
                seen += text[0]
        socket.close()
        return seen[:seen.index(mark)]

    try:
        return asyncio.run(asyncio.wait_for(talk(), timeout_s))
    finally:
        hub.server(user, "DELETE", f"api/terminals/{name}", parse=False)


def gradebook_grades(course_dir: Path, students: list[str]) -> dict[str, list[grading.CellGrade]]:
    return grading.read_grades(course_dir, LESSON, students)


def score(grades: list[grading.CellGrade]) -> float:
    return sum(g.score for g in grades if not g.bonus)


def full_marks(grades: list[grading.CellGrade]) -> float:
    return sum(g.max_score for g in grades if not g.bonus)


def course_grade(course_dir: Path, students: list[str], scratch: Path) -> dict[str, list[grading.CellGrade]]:
    """What `course grade NOTEBOOK` gives each submitted notebook (the same nbgrader run, the same arguments)."""
    submitted = {s: nbformat.read(course_dir / "submitted" / s / LESSON / f"{LESSON}.ipynb", as_version=4)
                 for s in students}
    return grading.grade_notebooks(LESSON, submitted, scratch, extra_args=grading.SELF_STUDY_ARGS)


@pytest.fixture(scope="module")
def python_for_every_user():
    """Let every user pass through the folders on the way to the venv's Python that only their owner may enter,
    for this test only: the usual venv's Python is a pyenv one under /root (mode 700 on CI and here), which the
    test users' servers could not run (the hub refuses to start then, as it should on a real machine).  Only
    o+x (pass through, not list), put back when the test ends."""
    opened = []
    try:
        while (folder := closed_to_others(VENV_PYTHON)) is not None and folder.is_dir():
            mode = stat.S_IMODE(folder.stat().st_mode)
            folder.chmod(mode | stat.S_IXOTH)
            opened.append((folder, mode))
        assert closed_to_others(VENV_PYTHON) is None, f"other users cannot run {os.path.realpath(VENV_PYTHON)}"
        yield
    finally:
        for folder, mode in reversed(opened):
            folder.chmod(mode)


@pytest.fixture(scope="module")
def hub(python_for_every_user):
    """Unix users and groups, a course folder for the instructor, the exchange, and JupyterHub on them."""
    assert PROXY.exists(), "configurable-http-proxy missing: `make test` installs it (package.json)"
    users = {INSTRUCTOR: "instructors", SAMPLE_STUDENT: "students", RIGHT: "students", WRONG: "students",
             LATE: "students"}
    # Under /tmp, not pytest's tmp_path: every user must pass through to the exchange (pytest's is root's alone).
    base = Path(tempfile.mkdtemp(prefix="hubtest-"))
    base.chmod(0o755)
    created_users, created_groups = [], []
    started = time.monotonic()
    server = log = None
    try:
        for role in ("instructors", "students"):
            run("groupadd", f"{COURSE_ID}-{role}")
            created_groups.append(f"{COURSE_ID}-{role}")
        for user, role in users.items():
            run("useradd", "--create-home", "--shell", "/bin/bash", "--groups", f"{COURSE_ID}-{role}", user)
            created_users.append(user)
        subprocess.run(["chpasswd"], input=f"{RIGHT}:{PASSWORD}\n", check=True, text=True)
        course_dir = nbgrader_cli.new_course(base / "course", only=[LESSON])
        with (course_dir / "nbgrader_config.py").open("a") as config:  # the late student loses 10 % (a day begun)
            config.write("\nc.LatePenalty.percent_per_day = 10\n")
        run("chown", "-R", f"{INSTRUCTOR}:", str(course_dir))

        port, token = free_port(), secrets.token_hex(16)
        (base / "test_config.py").write_text(
            f"load_subconfig({str(HUB_CONFIG)!r})\n"
            f"c.JupyterHub.services = list(c.JupyterHub.services) + [{{'name': 'hub-test', 'api_token': {token!r}}}]\n"
            "c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{'name': 'hub-test', 'services': ['hub-test'],"
            " 'scopes': ['admin:users', 'admin:servers', 'tokens', 'list:services', 'read:services']}]\n")
        env = {**os.environ, "COURSE_ID": COURSE_ID, "COURSE_EXCHANGE": str(base / "exchange"),
               "COURSE_DIR": str(course_dir), "COURSE_HUB_STATE": str(base / "state"),
               "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
        log = open(base / "hub.log", "wb")
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "jupyterhub"), "-f", str(base / "test_config.py"),
             f"--JupyterHub.bind_url=http://127.0.0.1:{port}", f"--JupyterHub.hub_bind_url=http://127.0.0.1:{free_port()}",
             f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{free_port()}"],
            cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        running = Hub(f"http://127.0.0.1:{port}", token, base / "hub.log")
        deadline = time.monotonic() + 90
        while True:
            try:
                running.api("GET", "")
                break
            except (AssertionError, OSError):
                assert server.poll() is None and time.monotonic() < deadline, f"no hub:\n{running.log_tail()}"
                time.sleep(0.5)
        running.course_dir, running.base, running.started = course_dir, base, started
        yield running
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)  # the hub stops the servers it spawned and its proxy
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        if log is not None:
            log.close()
            ARTIFACTS.mkdir(exist_ok=True)  # for CI to keep
            shutil.copy(base / "hub.log", ARTIFACTS / "hub.log")
        for user in created_users:
            subprocess.run(["userdel", "--force", "--remove", user], capture_output=True)
        for group in created_groups:
            subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def released(hub):
    """The instructor's server started (with the sample student's, at once: each start is seconds of imports),
    and lesson 02 generated and released to the exchange from it."""
    hub.start(INSTRUCTOR, SAMPLE_STUDENT)
    formgrader(hub, f"assignment/{LESSON}/assign")
    formgrader(hub, f"assignment/{LESSON}/release")
    return hub


def assert_the_course_lab(hub: Hub, user: str, student: bool) -> None:
    """The user's server has the lab of `make lab` (the repository's .jupyter/): Russian, the Validate dialog's
    wrapping CSS; a student's has no instructor panels but the Assignment List (the hub's exchange)."""
    css = hub.server(user, "GET", "custom/custom.css", parse=False)
    assert css == (course.ROOT / ".jupyter" / "custom" / "custom.css").read_text()
    translation = hub.server(user, "GET", "lab/api/settings/@jupyterlab/translation-extension:plugin")
    locale = translation["schema"]["properties"]["locale"]["default"]  # the course's override of the default
    assert locale == "ru_RU" and "locale" not in translation["settings"], translation["settings"]
    page = hub.server(user, "GET", "lab", parse=False)
    config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, re.DOTALL).group(1))
    disabled = set(config["disabledExtensions"])
    instructor_panels = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                         "@jupyter/nbgrader:course-list"}
    assert (instructor_panels <= disabled) == student, disabled
    assert "@jupyter/nbgrader:assignment-list" not in disabled, disabled


def test_a_student_submits_and_the_instructor_grades_on_the_hub(released, tmp_path):
    """One student, through the hub: fetch, a right answer, submit; the instructor collects and autogrades; is the
    grade what `course grade` gives the same notebook?  Both servers have the course's lab."""
    hub = released
    culler = hub.api("GET", "services")["idle-culler"]  # deploy/jupyterhub_config.py: idle servers are stopped
    assert culler["command"][-2:] == ["--timeout=3600", "--cull-every=300"] and culler["pid"], culler
    os.kill(culler["pid"], 0)  # running
    assert_the_course_lab(hub, SAMPLE_STUDENT, student=True)
    assert_the_course_lab(hub, INSTRUCTOR, student=False)
    venv_bin = str(Path(sys.executable).parent)
    found = in_terminal(hub, INSTRUCTOR, "command -v nbgrader course")
    assert f"{venv_bin}/nbgrader" in found and f"{venv_bin}/course" in found, found  # a login shell reset PATH
    hand_in(hub, SAMPLE_STUDENT)
    assert_private_to(SAMPLE_STUDENT, hub.base / "exchange" / COURSE_ID / "inbound", other=RIGHT)
    formgrader(hub, f"assignment/{LESSON}/collect")
    collected = hub.course_dir / "submitted" / SAMPLE_STUDENT / LESSON
    assert (collected / "submission_secret.txt").is_file()  # nbgrader's own file: no «лишний файл» for it
    assert status.anomalies(course_folder.load(hub.course_dir), LESSON, SAMPLE_STUDENT) == []
    formgrader(hub, f"submission/{LESSON}/{SAMPLE_STUDENT}/autograde")
    graded = gradebook_grades(hub.course_dir, [SAMPLE_STUDENT])
    assert graded == course_grade(hub.course_dir, [SAMPLE_STUDENT], tmp_path)
    assert score(graded[SAMPLE_STUDENT]) == full_marks(graded[SAMPLE_STUDENT])  # the reference
    print(f"hub sample: {time.monotonic() - hub.started:.0f} s from creating the users")


@full_only("the whole class on the hub (three students, feedback, a late submission, the browser; about two minutes)",
           "its sample, test_a_student_submits_and_the_instructor_grades_on_the_hub")
def test_a_class_on_the_hub(released, tmp_path):
    """A right and a wrong answer, a late submission, feedback: does every student get their own grade (equal to
    `course grade`), the late one flagged, feedback without hidden tests, and the course's lab in the browser?"""
    hub = released
    started = time.monotonic()
    students = [RIGHT, WRONG, LATE]
    hub.start(*students)
    hand_in(hub, RIGHT)
    hand_in(hub, WRONG)
    # The due date (whole seconds, as the Formgrader sets it) falls after these two submissions, before the third.
    due = (datetime.now(timezone.utc) + timedelta(seconds=1)).replace(microsecond=0)
    formgrader(hub, f"assignment/{LESSON}", "PUT",
               {"duedate_notimezone": due.strftime("%Y-%m-%dT%H:%M:%S"), "duedate_timezone": "UTC"})
    time.sleep(max(0.0, (due - datetime.now(timezone.utc)).total_seconds()) + 0.5)
    hand_in(hub, LATE)

    formgrader(hub, f"assignment/{LESSON}/collect")
    for student in students:
        formgrader(hub, f"submission/{LESSON}/{student}/autograde")
    graded = gradebook_grades(hub.course_dir, students)
    assert graded == course_grade(hub.course_dir, students, tmp_path)
    totals = {s: score(grades) for s, grades in graded.items()}
    full = full_marks(graded[RIGHT])
    assert totals[RIGHT] == totals[LATE] == full and 0 < totals[WRONG] < full, totals
    with open_gradebook(f"sqlite:///{hub.course_dir / 'gradebook.db'}") as gradebook:
        found = {s: gradebook.find_submission(LESSON, s) for s in students}
        late = {s: (sub.total_seconds_late, sub.late_submission_penalty, sub.score) for s, sub in found.items()}
    assert late[LATE][0] > 0 and late[RIGHT][:2] == late[WRONG][:2] == (0, 0), late
    assert late[LATE][1] == pytest.approx(0.1 * late[LATE][2]), late  # c.LatePenalty.percent_per_day = 10
    from autograder.course import export_csv

    export_csv.export_files(course_folder.load(hub.course_dir), tmp_path / "export")
    exported = {r["student_id"]: r for r in csv.DictReader(open(tmp_path / "export" / "grades.csv", encoding="utf-8"))}
    assert float(exported[LATE]["late_submission_penalty"]) == pytest.approx(late[LATE][1]) \
        and float(exported[LATE]["score"]) == pytest.approx(0.9 * late[LATE][2]), exported[LATE]

    formgrader(hub, f"assignment/{LESSON}/generate_feedback")
    formgrader(hub, f"assignment/{LESSON}/release_feedback")
    for student in (RIGHT, WRONG):
        assignment_list(hub, student, "fetch_feedback")
        folder = hub.server(student, "GET", f"api/contents/{LESSON}/feedback", content=1)["content"]
        (timestamp,) = [entry["name"] for entry in folder if entry["type"] == "directory"]
        page = hub.server(student, "GET", f"api/contents/{LESSON}/feedback/{timestamp}/{LESSON}.html",
                          content=1, type="file", format="text")["content"]
        text = assert_feedback_hides_hidden_tests(page, LESSON, student)
        assert "Эквивалентность с эталоном float64" in text, text[:2000]  # their own checks
        assert ("eps прибавлен вне корня" in text) == (student == WRONG), student  # and their own mistake

    validate_in_the_browser(hub, RIGHT)
    print(f"hub class: {time.monotonic() - started:.0f} s; all: {time.monotonic() - hub.started:.0f} s")


def validate_in_the_browser(hub: Hub, student: str) -> None:
    """The student logs in with their Unix password, opens the submitted lesson in their hub lab and presses
    Validate: nbgrader's verdict, in the course's lab (Russian menus)."""
    from test_browser import lab_page, validate

    with lab_page(hub.log) as page:
        page.goto(f"{hub.url}/hub/login")
        page.fill("input#username_input", student)
        page.fill("input#password_input", PASSWORD)
        page.click("#login_submit")
        page.wait_for_url(re.compile(r"/user/"), timeout=120_000)
        page.goto(f"{hub.url}/user/{student}/lab/tree/{LESSON}/{LESSON}.ipynb")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        menus = [m.strip() for m in page.locator(".lm-MenuBar-itemLabel").all_text_contents()]
        assert "Файл" in menus and "Выполнить" in menus and "File" not in menus, menus
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Nbgrader$")).click()
        nbgrader_menu = [m.strip() for m in page.locator(".lm-Menu-itemLabel").all_text_contents() if m.strip()]
        assert nbgrader_menu == ["Assignment List"], nbgrader_menu  # the exchange, no instructor panel
        page.keyboard.press("Escape")
        text = validate(page)
        page.screenshot(path=str(ARTIFACTS / "hub-validate.png"), full_page=False)
    assert "Validation Results" in text and "Success" in text, text[:3000]
