"""``course publish OUT``: the students' repository, without a single answer or hidden test.

What OUT gets, and nothing else of the course:

    notebooks/        the released student notebooks (this repository's notebooks/, as they are) and
                      the glossary notebooks/GLOSSARY.md that the lessons and messages follow
    autograder/       the package: the grade() cells of the notebooks run their visible checks with it
    pyproject.toml    the package with the base dependencies and the gpu extra (no dev extra, no tests)
    environment.yml   the same pins for conda / Binder
    .jupyter/         the lab's settings (Russian UI, the Validate dialog, nbgrader's instructor panels off)
    README.md, Makefile, .gitignore   the students' own (templates in student/ of this repository)
    benchmarks/results/   the measurements the lesson texts cite (data with device, date and command; no script)

Never: solutions/, tests/ (the banks hold answers), the benchmark scripts (several run the reference solutions),
nbgrader_config.py, a gradebook.
The course repository's address (:data:`autograder.course.settings.COURSE_REPOSITORY`, or ``--repository``) is
written into the copy: the notebooks' install cell and "Open in Colab" links, the package's
constant and the README's Colab links.

OUT may be a clone of the published repository: the paths above are replaced, everything else
(``.git``) is kept.  Before anything is written, OUT is refused if it is (or holds) a course checkout.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import re
import shutil
import tomllib
from pathlib import Path

import nbformat

from . import paths as course
from . import settings

#: The templates of the student repository's own files (README.md: {{COLAB_LINKS}} is filled in).
TEMPLATES = "student"
#: What the student's lab needs of .jupyter/ (the rest there is the instructor's own lab state).
LAB_SETTINGS = ("labconfig/default_setting_overrides.json", "labconfig/page_config.json", "custom/custom.css",
                "jupyter_server_config.json", "student/labconfig/page_config.json")
#: Every top-level path that publish writes (and replaces in OUT).
PUBLISHED = ("notebooks", "autograder", ".jupyter", "pyproject.toml", "environment.yml",
             "README.md", "Makefile", ".gitignore", "benchmarks")
#: How a lesson text cites a committed measurement.
CITED_RESULT = re.compile(r"benchmarks/results/[A-Za-z0-9_.-]+\.json")

_GITHUB = re.compile(r"https://github\.com/([A-Za-z0-9][A-Za-z0-9-]*)/([A-Za-z0-9._-]+?)(?:\.git)?/?")


def repository_path(url: str) -> str:
    """``https://github.com/OWNER/NAME`` -> ``OWNER/NAME`` (Colab opens notebooks from GitHub only)."""
    match = _GITHUB.fullmatch(url.strip())
    if not match:
        raise ValueError(f"адрес репозитория должен быть вида https://github.com/OWNER/NAME, а не {url!r}")
    return f"{match.group(1)}/{match.group(2)}"


def repository_address(url: str) -> str:
    """The students' repository address to publish for: ``https://github.com/OWNER/NAME``; never the placeholder of
    settings.py (the published Colab links and install cell must lead to a real repository)."""
    path = repository_path(url)
    if path.split("/")[0] == settings.PLACEHOLDER_OWNER:
        raise ValueError(f"{url} — заглушка, а не репозиторий студентов (ссылки Colab в нём не откроются): укажите "
                         "--repository https://github.com/ORG/REPO (или впишите адрес в autograder/course/settings.py: "
                         "COURSE_REPOSITORY)")
    return f"https://github.com/{path}"


def rewrite_repository(text: str, new: str, old: str = settings.COURSE_REPOSITORY) -> str:
    """``text`` (a student notebook's file) with what settings.py writes there for the repository ``old`` written
    for ``new``: the Colab badge's address (``settings.colab_url``) and the install cell's lines
    (``settings.install_cell``).  Nothing else is rewritten: the notebooks hold the address only where the
    build put it from settings.py."""
    for before, after in zip(settings.install_cell(old).split("\n"), settings.install_cell(new).split("\n")):
        if before != after:
            text = text.replace(_json_text(before), _json_text(after))
    url = re.escape(_json_text(settings.colab_url("LESSON", repository=old)))
    pattern = url.replace("LESSON", r"(?P<lesson>[\w.-]+)", 1).replace("LESSON", "(?P=lesson)")
    return re.sub(pattern, lambda m: _json_text(settings.colab_url(m["lesson"], repository=new)), text)


def _json_text(line: str) -> str:
    """``line`` as it stands inside a string of a notebook's JSON (nbformat writes non-ASCII as it is)."""
    return json.dumps(line, ensure_ascii=False)[1:-1]


def publish(out: Path, repository: str = settings.COURSE_REPOSITORY, root: Path = course.ROOT) -> list[Path]:
    """Write the students' repository for ``repository`` into ``out`` from the course checkout ``root``; returns the
    top-level paths written."""
    out = Path(out).resolve()
    repository = repository_address(repository)
    require_course_checkout(root)
    _refuse_course_checkout(out, root)
    out.mkdir(parents=True, exist_ok=True)
    for name in PUBLISHED:
        target = out / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()

    for lesson in course.lessons(root):
        released = course.student_notebook(lesson, root)
        target = out / course.RELEASE / lesson / released.name
        target.parent.mkdir(parents=True)
        target.write_text(rewrite_repository(released.read_text(encoding="utf-8"), repository), encoding="utf-8")
    for name in course.RELEASE_FILES:
        shutil.copy(root / course.RELEASE / name, out / course.RELEASE / name)
    _copy_package(root / "autograder", out / "autograder", repository)
    for name in LAB_SETTINGS:
        (out / ".jupyter" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / ".jupyter" / name, out / ".jupyter" / name)
    (out / "pyproject.toml").write_text(student_pyproject(root), encoding="utf-8")
    (out / "environment.yml").write_text(student_environment(root), encoding="utf-8")
    (out / "README.md").write_text(student_readme(root, repository), encoding="utf-8")
    for name in ("Makefile", ".gitignore"):
        shutil.copy(root / TEMPLATES / name, out / name)
    for name in cited_results(root):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / name, out / name)

    leaks = [f"{path}: {s.kind} ({s.lesson}): {s.text[:80]}"
             for path, s in secrets_in(out / course.RELEASE, course_secrets(root))]
    if leaks:
        shutil.rmtree(out / course.RELEASE)
        raise RuntimeError("в студенческих ноутбуках нашлись решения или скрытые тесты (notebooks/ убрана "
                           "из публикации); выполните make release:\n" + "\n".join(leaks))
    return [out / name for name in PUBLISHED]


def cited_results(root: Path = course.ROOT) -> list[str]:
    """The measurement files (``benchmarks/results/*.json``) that the lesson texts cite, as repository paths."""
    cited = {match for lesson in sorted((root / course.TEXT_SOURCES).glob("*.py"))
             for match in CITED_RESULT.findall(lesson.read_text(encoding="utf-8"))}
    missing = sorted(name for name in cited if not (root / name).is_file())
    if missing:
        raise RuntimeError("уроки ссылаются на замеры, которых нет в репозитории курса: " + ", ".join(missing))
    return sorted(cited)


def require_course_checkout(root: Path) -> None:
    """Publish from a course checkout (it has solutions/): not from a students' repository, not from elsewhere."""
    if not (Path(root) / course.SOLUTIONS).is_dir():
        raise ValueError(f"в {Path(root).resolve()} нет {course.SOLUTIONS}/: публикуют из папки курса (клона его "
                         "репозитория): запустите course publish в ней или укажите --course ПАПКА_КУРСА")


def _refuse_course_checkout(out: Path, root: Path) -> None:
    """Publish from a course checkout, never into one (this one or another): its notebooks/ and
    autograder/ would be replaced."""
    root = root.resolve()
    if out == root or root.is_relative_to(out):
        raise ValueError(f"{out}: это папка курса (или папка над ней); укажите отдельную папку")
    for marker in (course.SOLUTIONS, "nbgrader_config.py", "gradebook.db"):
        if (out / marker).exists():
            raise ValueError(f"{out} содержит {marker}: это похоже на папку курса, а не на репозиторий студентов")


def _copy_package(source: Path, target: Path, repository: str) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    constants = target / "course" / "settings.py"
    text, count = re.subn(r'^COURSE_REPOSITORY = ".*"$', f'COURSE_REPOSITORY = "{repository}"',
                          constants.read_text(encoding="utf-8"), flags=re.MULTILINE)
    if count != 1:
        raise RuntimeError(f"{constants}: нет единственной строки COURSE_REPOSITORY, которую можно заменить")
    text, count = re.subn(r"^STUDENTS_EDITION = False$", "STUDENTS_EDITION = True", text, flags=re.MULTILINE)
    if count != 1:
        raise RuntimeError(f"{constants}: нет единственной строки STUDENTS_EDITION = False, которую можно заменить")
    constants.write_text(text, encoding="utf-8")


def _project(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def student_pyproject(root: Path = course.ROOT) -> str:
    """The package as students install it: this repository's project, its base dependencies and
    the gpu extra, without the dev extra and the test settings."""
    project = _project(root)
    extras = "".join(f"{name} = {_toml_list(items)}\n" for name, items in project["optional-dependencies"].items()
                     if name != "dev")
    scripts = "".join(f"{name} = {json.dumps(entry)}\n" for name, entry in project["scripts"].items())
    return (
        "# The course package as students install it (written by `course publish`; pins as in the course).\n"
        "[build-system]\n"
        'requires = ["setuptools>=68"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        f"name = {json.dumps(project['name'])}\n"
        f"version = {json.dumps(project['version'])}\n"
        f"description = {json.dumps(project['description'], ensure_ascii=False)}\n"
        'readme = "README.md"\n'
        f"requires-python = {json.dumps(project['requires-python'])}\n"
        f"dependencies = {_toml_list(project['dependencies'])}\n\n"
        f"[project.optional-dependencies]\n{extras}\n"
        f"[project.scripts]\n{scripts}\n"
        "[tool.setuptools.packages.find]\n"
        'include = ["autograder*"]\n')


def _toml_list(items: list[str]) -> str:
    """A TOML array of strings, one a line (a JSON string is a TOML basic string)."""
    return "[\n" + "".join(f"    {json.dumps(item, ensure_ascii=False)},\n" for item in items) + "]"


def student_environment(root: Path = course.ROOT) -> str:
    """This repository's environment.yml without the dev extra's pins."""
    dev = set(_project(root)["optional-dependencies"].get("dev", []))
    lines = (root / "environment.yml").read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if line.strip().removeprefix("- ").strip() not in dev
            and not line.startswith("#")]
    return ("# Conda / Binder environment of the course (written by `course publish`; the same pins as pyproject.toml).\n"
            + "\n".join(kept) + "\n")


def student_readme(root: Path, repository: str) -> str:
    links = "\n".join(f"- [{lesson} в Colab]({settings.colab_url(lesson, repository=repository)})"
                      for lesson in course.lessons(root) if course.is_gpu_lesson(lesson))
    return (root / TEMPLATES / "README.md").read_text(encoding="utf-8").replace("{{COLAB_LINKS}}", links)


# --- what must never be published ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Secret:
    """A piece of a source notebook that students must never see, as a whitespace-normalised text."""

    lesson: str
    kind: str  # "solution" (a BEGIN/END SOLUTION region) or "hidden cases" (from a HIDDEN TESTS block)
    text: str


def marked_regions(source: str, begin: str, end: str) -> list[str]:
    """The text between lines holding ``begin`` and ``end`` (nbgrader's rule for its delimiters:
    ``### BEGIN SOLUTION`` and ``// ### BEGIN SOLUTION`` alike)."""
    regions, current = [], None
    for line in source.splitlines():
        if current is None and begin in line:
            current = []
        elif current is not None and end in line:
            regions.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return regions


def normalized(text: str) -> str:
    return " ".join(text.split())


def course_secrets(root: Path = course.ROOT) -> list[Secret]:
    """Every solution region and every hidden case of every source notebook.  A hidden case is
    looked for as the block's ``cases=[...]`` and, one by one, as a dict literal, its JSON and a
    ``dict(...)`` call, wherever it might be copied to."""
    secrets = []
    for lesson in course.lessons(root):
        for cell in nbformat.read(course.source_notebook(lesson, root), as_version=4).cells:
            secrets += [Secret(lesson, "solution", normalized(region))
                        for region in marked_regions(cell.source, "BEGIN SOLUTION", "END SOLUTION")]
            for block in marked_regions(cell.source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
                for node in ast.walk(ast.parse(block)):
                    if not (isinstance(node, ast.keyword) and node.arg == "cases"):
                        continue
                    cases = ast.get_source_segment(block, node.value)
                    secrets.append(Secret(lesson, "hidden cases", normalized(f"cases={cases}")))
                    for case in ast.literal_eval(node.value):
                        spelled = ", ".join(f"{key}={value!r}" for key, value in case.items())
                        secrets += [Secret(lesson, "hidden cases", normalized(text))
                                    for text in (repr(case), json.dumps(case), f"dict({spelled})")]
    return [s for s in dict.fromkeys(secrets) if s.text]


def readable_text(path: Path) -> str:
    """What a reader of the file sees: a notebook's every string (cells, outputs, metadata), or the text."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".ipynb":
        return text
    strings = []

    def walk(node) -> None:
        if isinstance(node, str):
            strings.append(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for item in node.values():
                walk(item)

    walk(json.loads(text))
    return "\n".join(strings)


def secrets_in(folder: Path, secrets: list[Secret]) -> list[tuple[str, Secret]]:
    """(path relative to ``folder``, secret) for every secret found in a file under ``folder``."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and ".git" not in p.relative_to(folder).parts):
        text = normalized(readable_text(path))
        found += [(str(path.relative_to(folder)), s) for s in secrets if s.text in text]
    return found
