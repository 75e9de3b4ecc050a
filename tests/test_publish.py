"""`course publish OUT`: is the students' repository complete, working, and free of answers?

* OUT holds exactly the student's files: notebooks, the package, environment, lab settings, README, Makefile;
* no solution region and no hidden case of any source notebook is anywhere in OUT (the whole
  tree is scanned, notebooks as what a reader sees);
* the repository address given to publish is in the notebooks, the package and the README;
* the published `make test` (OUT's own Makefile, OUT's package in OUT/.venv) checks the
  environment and grades a student's edited notebook with the visible checks.
"""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import nbformat
import pytest

from autograder.course import paths as course, publish, selfcheck

from autograder.course import grading, release
from autograder.course import settings
from test_environment import pins

REPOSITORY = "https://github.com/acme/module07-students"
LESSON = "02_fused_rmsnorm"
#: Solution regions that the grader itself contains: the check computes its expected value with
#: the same one-line formula (what the visible check needs, in the package that runs it).
GRADER_FORMULAS = {
    ("autograder/lessons/lesson01/checks.py", "return heads * n * n * bytes_per_element"),
    ("autograder/lessons/lesson04/checks.py", "return -np.inf, 0.0, np.zeros(d)"),
}


@pytest.fixture(scope="session")  # once per worker: xdist interleaves modules, which would rebuild a module fixture
def out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("published") / "students"
    publish.publish(folder, REPOSITORY)
    return folder


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_the_published_tree_is_the_students_repository_and_nothing_else(out):
    assert sorted(p.name for p in out.iterdir()) == sorted(publish.PUBLISHED)
    lessons = course.lessons()
    assert [p.name for p in sorted((out / "notebooks").iterdir()) if p.is_dir()] == lessons
    assert files(out / "notebooks") == sorted([f"{lesson}/{lesson}.ipynb" for lesson in lessons]
                                              + list(course.RELEASE_FILES))
    package = course.ROOT / "autograder"
    assert files(out / "autograder") == sorted(str(p.relative_to(package)) for p in package.rglob("*")
                                               if p.is_file() and "__pycache__" not in p.parts)
    assert files(out / ".jupyter") == sorted(publish.LAB_SETTINGS)
    # The measurements the lessons cite, and not a benchmark script (several run the reference solutions).
    assert [f"benchmarks/{name}" for name in files(out / "benchmarks")] == publish.cited_results() != []
    names = {part for path in files(out) if not path.startswith("benchmarks/") for part in Path(path).parts}
    assert not names & {"solutions", "source", "tests", "benchmarks", "gradebook.db", "nbgrader_config.py",
                        "submitted", "autograded", "feedback", ".ci", "__pycache__"}


def test_the_lab_settings_published_are_all_that_the_course_tracks():
    tracked = subprocess.run(["git", "ls-files", ".jupyter"], cwd=course.ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert sorted(f".jupyter/{name}" for name in publish.LAB_SETTINGS) == sorted(tracked)


def test_the_scanner_finds_every_solution_and_hidden_case_in_the_sources(tmp_path):
    """The scan below means something only if it finds every secret where they are: in solutions/."""
    secrets = publish.course_secrets()
    for lesson in course.lessons():
        kinds = {s.kind for s in secrets if s.lesson == lesson}
        assert kinds == {"solution", "hidden cases"}, lesson
    shutil.copytree(course.ROOT / course.SOLUTIONS, tmp_path / course.SOLUTIONS)
    found = {s for _, s in publish.secrets_in(tmp_path, secrets)}
    # A case is in the sources as its cases=[...] and its dict literal; the JSON and dict(...) spellings are
    # for copies elsewhere.
    missed = [s for s in secrets if s not in found and not s.text.startswith(("{\"", "dict("))]
    assert not missed, missed[:5]


def test_no_solution_and_no_hidden_case_is_published(out):
    """Every solution region and every hidden case of every source notebook, looked for in every
    published file (notebooks as their every string, whitespace ignored)."""
    found = publish.secrets_in(out, publish.course_secrets())
    unexpected = [(path, s.lesson, s.kind, s.text[:120]) for path, s in found if (path, s.text) not in GRADER_FORMULAS]
    assert not unexpected


def test_the_repository_address_is_the_one_given_everywhere(out):
    old = publish.repository_path(settings.COURSE_REPOSITORY)
    assert REPOSITORY != settings.COURSE_REPOSITORY
    assert [path for path in files(out) if old in (out / path).read_text(encoding="utf-8")] == []
    readme = (out / "README.md").read_text(encoding="utf-8")
    for lesson in course.lessons():
        if not course.is_gpu_lesson(lesson):
            continue
        cells = nbformat.read(out / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4).cells
        assert settings.colab_url(lesson, repository=REPOSITORY) in cells[0].source
        assert f'COURSE_REPOSITORY = "{REPOSITORY}"' in cells[1].source
        assert settings.colab_url(lesson, repository=REPOSITORY) in readme
    published_settings = (out / "autograder" / "course" / "settings.py").read_text()
    assert f'COURSE_REPOSITORY = "{REPOSITORY}"' in published_settings
    assert "\nSTUDENTS_EDITION = True\n" in published_settings and not settings.STUDENTS_EDITION  # course --help: check only


def test_the_notebooks_are_the_released_ones(out):
    for lesson in course.lessons():
        released = course.student_notebook(lesson).read_text(encoding="utf-8")
        published = (out / "notebooks" / lesson / f"{lesson}.ipynb").read_text(encoding="utf-8")
        assert published == publish.rewrite_repository(released, REPOSITORY)
        assert (published == released) == (not course.is_gpu_lesson(lesson))


def test_the_environment_files_pin_the_base_dependencies_only(out):
    ours = tomllib.loads((course.ROOT / "pyproject.toml").read_text())["project"]
    theirs = tomllib.loads((out / "pyproject.toml").read_text())
    assert theirs["project"]["dependencies"] == ours["dependencies"]
    assert theirs["project"]["optional-dependencies"] == {"gpu": ours["optional-dependencies"]["gpu"]}
    assert theirs["project"]["scripts"] == ours["scripts"] and "tool" in theirs and "pytest" not in theirs["tool"]
    import yaml

    environment = yaml.safe_load((out / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    assert pins([r for r in pip_section if not r.startswith("-e")]) == pins(ours["dependencies"])


def test_the_glossary_is_published_and_the_readme_links_it(out):
    """Do the students get the glossary the lessons follow, linked from their README?"""
    assert (out / "notebooks" / "GLOSSARY.md").read_text(encoding="utf-8") == \
        (course.ROOT / "notebooks" / "GLOSSARY.md").read_text(encoding="utf-8")
    assert "notebooks/GLOSSARY.md" in (out / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_the_students(out):
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "make lab" in readme and "make test" in readme and "{{" not in readme
    for lesson in course.lessons():
        assert f"`{lesson}`" in readme
    for instructor_only in ("solutions", "gradebook", "nbgrader autograde", "course grade", "make release", "INSTRUCTOR"):
        assert instructor_only not in readme


def test_publish_refuses_a_course_checkout_and_keeps_a_clones_history(tmp_path):
    with pytest.raises(ValueError, match="это папка курса"):
        publish.publish(course.ROOT, REPOSITORY)
    with pytest.raises(ValueError, match="это папка курса"):
        publish.publish(course.ROOT.parent, REPOSITORY)
    lookalike = tmp_path / "other-course"
    (lookalike / course.SOLUTIONS).mkdir(parents=True)
    with pytest.raises(ValueError, match="похоже на папку курса"):
        publish.publish(lookalike, REPOSITORY)
    with pytest.raises(ValueError, match="https://github.com/OWNER/NAME"):
        publish.publish(tmp_path / "x", "https://gitlab.com/acme/module07")

    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    (clone / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (clone / "notebooks" / "99_removed").mkdir(parents=True)
    (clone / "Makefile").write_text("stale\n")
    publish.publish(clone, REPOSITORY)
    assert (clone / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert not (clone / "notebooks" / "99_removed").exists()
    assert (clone / "Makefile").read_text() == (course.ROOT / "student" / "Makefile").read_text()


# --- the lab: this course's and the published one -----------------------------------------------------

def make_dry_run(folder: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(["make", "-s", "-n", "-o", ".venv/.installed", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_lab_opens_the_notebooks_for_students_and_the_course_for_the_instructor(out):
    student = make_dry_run(course.ROOT, "lab")
    assert f'--ServerApp.root_dir="{course.ROOT / "notebooks"}"' in student and ".jupyter/student" in student
    instructor = make_dry_run(course.ROOT, "lab", "INSTRUCTOR=1")
    assert f'--ServerApp.root_dir="{course.ROOT}"' in instructor and ".jupyter/student" not in instructor
    # The published repository starts the very same lab as the course's student `make lab`.
    published = make_dry_run(out, "lab", "PORT=8890", "NO_BROWSER=1")
    assert published.replace(str(out), "ROOT") == make_dry_run(course.ROOT, "lab", "PORT=8890", "NO_BROWSER=1") \
        .replace(str(course.ROOT), "ROOT")


# --- the published `make test` -----------------------------------------------------------------------

def student_venv(out: Path) -> Path:
    """OUT/.venv as the published Makefile leaves it, without installing the dependencies again: a venv
    whose packages are this environment's (a .pth line; their own .pth files, this checkout's editable
    install among them, are not read) and OUT's package installed in it, editable, as the Makefile's
    `pip install -e .` does."""
    venv = out / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz_course_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(out)],
                          cwd=out, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})  # setuptools: pip's cache or PyPI
    assert done.returncode == 0, done.stderr[-3000:]
    (venv / ".installed").touch()
    return venv


def test_the_published_make_test_grades_an_edited_notebook_with_the_published_package(tmp_path):
    out = tmp_path / "students"
    publish.publish(out, REPOSITORY)
    venv = student_venv(out)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    where = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", "import autograder.isolation.worker; print(autograder.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(out / "autograder")), where  # what the check workers (python -I) import

    # The student: the reference answers, a cell of their own, a check cell deleted.
    nb = grading.fill_answers(LESSON, grading.reference_answers(LESSON), root=out)
    nb.cells.insert(3, nbformat.v4.new_code_cell("import autograder\nopen('where.txt', 'w').write(autograder.__file__)"))
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_lesson02_dtype"]
    nbformat.write(nb, out / "notebooks" / LESSON / f"{LESSON}.ipynb")
    before = (out / "notebooks" / LESSON / f"{LESSON}.ipynb").read_bytes()

    done = subprocess.run(["make", "test", f"LESSON={LESSON}"], cwd=out, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = done.stdout
    assert "✓ Окружение" in report
    assert f"== {LESSON}: 11 из 12 и бонус +3" in report, report
    assert "✗ Выход float32 формы (T, D): 0 из 1" in report and "нет ячейки с этой проверкой" in report
    assert "✓ Эквивалентность с эталоном float64: 3 из 3" in report
    kernel_package = (out / "notebooks" / LESSON / "where.txt").read_text()
    assert kernel_package.startswith(str(out / "autograder")), kernel_package  # the student's kernel: OUT's package
    assert (out / "notebooks" / LESSON / f"{LESSON}.ipynb").read_bytes() == before  # run in memory only


def test_a_broken_environment_fails_the_check_and_says_what_is_wrong(monkeypatch, tmp_path):
    real = selfcheck.importlib.metadata.version
    monkeypatch.setattr(selfcheck.importlib.metadata, "version",
                        lambda name: "1.0.0" if name == "numpy" else real(name))
    problems = selfcheck.environment_problems()
    assert problems == ["numpy: установлена версия 1.0.0, нужна ==2.4.6"]
    (tmp_path / LESSON).mkdir()
    shutil.copy(course.student_notebook(LESSON), tmp_path / LESSON)
    printed = io.StringIO()
    assert selfcheck.main([LESSON], tmp_path, out=printed) == 1
    assert "numpy: установлена версия 1.0.0" in printed.getvalue() and "Запускаю" not in printed.getvalue()


def test_course_check_knows_its_lessons(tmp_path):
    with pytest.raises(ValueError, match="нет урока 99_nothing"):
        selfcheck.lesson_notebooks(course.ROOT / "notebooks", ["99_nothing"])
    assert [p.parent.name for p in selfcheck.lesson_notebooks(course.ROOT / "notebooks")] == course.lessons()


def test_the_instructors_commands_in_the_students_repository_say_why_they_cannot_work(out):
    """OUT's package has no solutions/ beside it: `course --help` offers only `check`, and every other command
    (grade with hidden tests, release, check-release, publish, ...) is refused with one Russian line that says
    what to do, never a traceback or a hint at the course's dev extra."""
    def course_command(*args):
        code = f"import sys; from autograder.course import cli; sys.exit(cli.main({list(args)!r}))"
        return subprocess.run([sys.executable, "-c", code], cwd=out, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(out)})

    shown = course_command("--help")
    assert shown.returncode == 0 and "course check" in shown.stdout, shown.stdout + shown.stderr
    for instructors in ("grade", "release", "check-release", "publish", "autograde", "report", "lesson-text", "merge",
                        "export", "jobs"):
        assert instructors not in shown.stdout, (instructors, shown.stdout)
    assert "скрыт" not in shown.stdout, shown.stdout
    graded = course_command("grade", f"notebooks/{LESSON}/{LESSON}.ipynb")
    assert graded.returncode == 2 and "скрытых тестов здесь нет" in graded.stderr, graded.stderr
    for command in (["release"], ["release", LESSON], ["check-release"], ["publish", str(out.parent / "again")],
                    ["autograde"], ["report"], ["lesson-text", LESSON], ["merge", "x"], ["export"],
                    ["jobs", "slurm", "--shards", "2"], ["nonsense"]):
        refused = course_command(*command)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, (command, refused.stderr)
        assert "make test" in lines[0] and "Traceback" not in refused.stderr and "[dev]" not in refused.stderr
    assert "только в репозитории курса" in course_command("release").stderr
    assert not (out / "solutions").exists() and not (out.parent / "again").exists()


def test_course_publish_refuses_notebooks_older_than_their_text_sources(tmp_path, monkeypatch, capsys):
    """`course publish` never ships a build that lessons/ no longer gives: it says what is stale and writes nothing."""
    from autograder.course import cli

    monkeypatch.setattr(release, "stale_release", lambda root=course.ROOT: ["02_fused_rmsnorm: notebooks/… не совпадает"])
    assert cli.main(["publish", str(tmp_path / "students"), "--repository", REPOSITORY]) == 1
    assert not (tmp_path / "students").exists()
    assert "Публикация отменена: собранные ноутбуки устарели" in capsys.readouterr().err


def never_called(*args, **kwargs):
    raise AssertionError("refused before the freshness check (a minute) and before writing anything")


def test_course_publish_refuses_the_placeholder_repository_in_one_line(tmp_path, monkeypatch, capsys):
    """Without --repository, settings.py's placeholder (COURSE-ORG) would give students Colab links that lead
    nowhere: `course publish` refuses at once, in one Russian line that names the option and its form."""
    from autograder.course import cli

    assert publish.repository_path(settings.COURSE_REPOSITORY).split("/")[0] == settings.PLACEHOLDER_OWNER
    monkeypatch.setattr(release, "stale_release", never_called)
    for argv in ([], ["--repository", "https://github.com/COURSE-ORG/anything"]):
        assert cli.main(["publish", str(tmp_path / "students"), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--repository https://github.com/ORG/REPO" in err[0], err
    with pytest.raises(ValueError, match="заглушка"):
        publish.publish(tmp_path / "students")
    assert not (tmp_path / "students").exists()
    assert publish.repository_address(REPOSITORY + ".git") == REPOSITORY


def test_course_publish_without_the_authors_tools_says_what_to_install(tmp_path):
    """An install without jupytext (an instructor's base install): `course publish` and `course check-release`
    each print one line naming jupytext and the install command, no traceback, and write nothing."""
    for command in (["publish", str(tmp_path / "students"), "--repository", REPOSITORY], ["check-release"]):
        code = ("import sys; sys.modules['jupytext'] = None; from autograder.course import cli; "
                f"sys.exit(cli.main({command!r}))")
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (command, done.stderr)
        assert "jupytext" in lines[0] and "pip install -e '.[dev]'" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "students").exists()


def test_course_publish_works_from_an_install_outside_the_checkout(tmp_path, monkeypatch, capsys):
    """The package installed elsewhere (site-packages: no solutions/ beside it), run in a course clone: it publishes
    that clone; run anywhere else, it says to run it in the course folder or pass --course."""
    from autograder.course import cli

    monkeypatch.setattr(course, "ROOT", tmp_path / "site-packages")
    monkeypatch.setattr(release, "stale_release", lambda root: [] if root == course.checkout() else never_called())
    monkeypatch.chdir(tmp_path)
    assert cli.main(["publish", str(tmp_path / "students"), "--repository", REPOSITORY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--course" in err[0] and not (tmp_path / "students").exists(), err
    checkout = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(checkout)
    assert course.checkout() == checkout
    assert cli.main(["publish", str(tmp_path / "students"), "--repository", REPOSITORY]) == 0
    assert (tmp_path / "students" / "notebooks" / LESSON / f"{LESSON}.ipynb").is_file()
    assert cli.main(["publish", str(tmp_path / "again"), "--repository", REPOSITORY, "--course", str(checkout)]) == 0


def test_course_check_shows_warnings_once_each_repeated_message_and_the_parts_of_lesson_11():
    """Does `course check` show a passing check's compile warning, print a failure message repeated across
    checks once (later: one line that refers to it), and give lesson 11's NumPy and GPU parts a subtotal each?"""
    from autograder.checks.core import get_check

    need_gpu = "нужен GPU: CuPy не установлен. Эта проверка измеряет время ядра.\nЗапустите на GPU."
    warning = "компилируется для sm_75, sm_90.\nВНИМАНИЕ, строка 7: __syncthreads() внутри if/else. Вынесите барьер."
    first = selfcheck.LessonReport("07_cupy_rmsnorm", [
        selfcheck.Verdict(get_check("lesson07.compiles"), True, message=warning),
        selfcheck.Verdict(get_check("lesson07.speed"), False, message=need_gpu)])
    second = selfcheck.LessonReport("11_flash_decoding", [
        selfcheck.Verdict(check, not check.id.split(".")[1].startswith("gpu_"),
                          message="" if not check.id.split(".")[1].startswith("gpu_") else need_gpu)
        for check in selfcheck.lesson_checks("11_flash_decoding")])
    seen: dict[str, str] = {}
    text = first.text(seen) + "\n" + second.text(seen)
    assert "ВНИМАНИЕ, строка 7: __syncthreads() внутри if/else" in text
    assert text.count("Эта проверка измеряет время ядра") == 1, text
    gpu_checks = sum(check.id.split(".")[1].startswith("gpu_") for check in selfcheck.lesson_checks("11_flash_decoding"))
    assert text.count("то же сообщение, что выше у «GPU: не меньше чем в 2 раза") == gpu_checks, text
    assert "   NumPy-часть: 10 из 10 — готова; GPU-часть: 0 из 9" in text, text
    assert "NumPy-часть" not in first.text()


def test_course_check_prints_no_english_kernel_warning(tmp_path):
    """Does the students' `course check` start its kernels without ipykernel's English «Kernel is running over
    TCP» warning on the terminal (IsolatedExecute: the ipc transport)?"""
    (tmp_path / LESSON).mkdir()
    shutil.copy(course.student_notebook(LESSON), tmp_path / LESSON)
    code = f"import sys; from autograder.course import selfcheck; sys.exit(selfcheck.main([{LESSON!r}], __import__('pathlib').Path({str(tmp_path)!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and f"== {LESSON}:" in done.stdout, done.stdout + done.stderr
    assert "TCP" not in done.stderr and "WARNING" not in done.stderr, done.stderr
