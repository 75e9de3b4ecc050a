"""``course check``: the student's own test command (``make test`` of the published repository).

Two parts; neither changes the student's files:

* the environment: this Python and every base dependency of the installed ``autograder``
  distribution at its pinned version and importable;
* each lesson: its notebook run top to bottom in a fresh kernel (a copy in memory, in the
  notebook's folder) by the same Execute step as ``nbgrader autograde`` (:class:`IsolatedExecute`:
  a test cell's checks run from this process, a dead kernel is restarted), and the verdict of every
  check of the lesson read as data from the cell that calls it (:mod:`autograder.checks.verdicts`): the
  visible checks only (the hidden ones are the instructor's).

A notebook is the student's to edit: nothing is compared with the released one.  A deleted check
cell is reported as such, an added cell is just run.  The exit status is 1 only when the environment
is broken; failed checks are what the report is for.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import platform
import sys
from pathlib import Path

import nbformat
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from ..checks import verdicts as verdicts_module
from ..nbgrader.cells import parse_grade_cell
from ..checks.core import FAIL_MARK, PASS_MARK, SKIP_MARK, Check, all_checks, format_points

DISTRIBUTION = "autograder"
CELL_TIMEOUT_S = 120
MESSAGE_LINES = 4  # of a failed check's message


# --- the environment ---------------------------------------------------------------------------------

def environment_problems(distribution: str = DISTRIBUTION) -> list[str]:
    """What is wrong with this environment, in Russian (empty when all is as pinned)."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return [f"пакет курса {distribution} не установлен: выполните make test (он ставит всё нужное)"]
    problems = []
    python = platform.python_version()
    needed = dist.metadata.get("Requires-Python")
    if needed and not SpecifierSet(needed).contains(python):
        problems.append(f"Python {python}, а нужен {needed}")
    modules = _modules_of_distributions()
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue  # an extra (gpu): optional
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{requirement.name}: не установлен (нужен {requirement})")
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement.name}: установлена версия {version}, нужна {requirement.specifier}")
        module = _main_module(requirement.name, modules.get(canonicalize_name(requirement.name), []))
        if module:
            try:
                importlib.import_module(module)
            except Exception as error:  # noqa: BLE001 (any failure to import is the finding)
                problems.append(f"{requirement.name}: не импортируется ({module}: {type(error).__name__}: {error})")
    return problems


def _modules_of_distributions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            found.setdefault(canonicalize_name(dist), []).append(module)
    return found


def _main_module(name: str, modules: list[str]) -> str | None:
    """The module that stands for a distribution: the one of its name, else its shortest public one."""
    public = sorted((m for m in modules if not m.startswith("_") and not m.endswith("_launcher")), key=len)
    wanted = name.replace("-", "_").lower()
    return next((m for m in public if m.lower() == wanted), public[0] if public else None)


# --- a lesson -----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Verdict:
    """One check of a lesson as the student's run of the notebook left it."""

    check: Check
    passed: bool
    skipped: bool = False  # an untouched bonus: not attempted, no failure
    message: str = ""

    @property
    def score(self) -> float:
        return self.check.points if self.passed else 0.0

    def lines(self, seen: dict[str, str] | None = None, where: str = "") -> list[str]:
        """The verdict's lines: a failure with its message (a message already shown in this run, ``seen``: one
        line that refers to it), a pass with its warnings (a compile warning: «ВНИМАНИЕ, строка …»)."""
        if self.skipped:
            return [f"{SKIP_MARK} {self.check.title}: не выполнен (бонус, необязательно)"]
        mark = PASS_MARK if self.passed else FAIL_MARK
        points = f"{format_points(self.score)} из {format_points(self.check.points)}"
        head = f"{mark} {self.check.title}: " + (f"+{points} (бонус)" if self.check.bonus else points)
        if self.passed:
            return [head] + ["     " + line for line in self.message.splitlines() if line.startswith(WARNING)]
        body = self.message.splitlines()[:MESSAGE_LINES]
        text = "\n".join(body)
        if seen is not None and text:
            if text in seen:
                return [head, f"     {_opening(body[0])} — то же сообщение, что выше у {seen[text]}"]
            seen[text] = f"«{self.check.title}» ({where})" if where else f"«{self.check.title}»"
        return [head] + ["     " + line for line in body]


#: How a passing check's message begins a warning that ``course check`` shows (autograder/gpu/nvrtc.py).
WARNING = "ВНИМАНИЕ"


def _opening(line: str, limit: int = 60) -> str:
    """A message's first sentence, at most ``limit`` characters: what a repeated message is known by."""
    first = line.split(". ")[0]
    return first if len(first) <= limit else first[:limit - 1] + "…"


@dataclasses.dataclass(frozen=True)
class LessonReport:
    lesson: str
    verdicts: list[Verdict]
    problem: str = ""  # the notebook could not be read or its kernel died: what happened

    def text(self, seen: dict[str, str] | None = None) -> str:
        """The lesson's lines; ``seen``: the failure messages shown so far in this run (a repeated one is one
        line that refers to the first), updated."""
        main = [v for v in self.verdicts if not v.check.bonus]
        bonus = sum(v.score for v in self.verdicts if v.check.bonus)
        total = f"{format_points(sum(v.score for v in main))} из {format_points(sum(v.check.points for v in main))}"
        lines = [f"== {self.lesson}: {total}" + (f" и бонус +{format_points(bonus)}" if bonus else "")]
        lines += self.parts(main)
        if self.problem:
            lines.append(f"   ! {self.problem}")
        lines += ["   " + line for v in self.verdicts for line in v.lines(seen, self.lesson)]
        return "\n".join(lines)


    def parts(self, main: list[Verdict]) -> list[str]:
        """A lesson with a NumPy part and a GPU part (11): a subtotal of each, so that a student without a GPU
        sees the NumPy part complete (the GPU part on the emulator, its timed checks «нужен GPU»). The lesson
        says which checks make its GPU part: ``GPU_PART`` (check names) in its checks.py."""
        gpu_part = getattr(_lesson_module(self.lesson), "GPU_PART", None)
        if not gpu_part:
            return []
        numpy = [v for v in main if v.check.id.split(".", 1)[1] not in gpu_part]
        gpu = [v for v in main if v.check.id.split(".", 1)[1] in gpu_part]
        if not numpy or not gpu:
            return []

        def subtotal(verdicts: list[Verdict]) -> str:
            done, top = sum(v.score for v in verdicts), sum(v.check.points for v in verdicts)
            return f"{format_points(done)} из {format_points(top)}" + (" — готова" if done == top else "")

        return [f"   NumPy-часть: {subtotal(numpy)}; GPU-часть: {subtotal(gpu)}"]


def _lesson_module(lesson: str):
    """The lesson's checks module (``autograder.lessons.lessonNN.checks``), None if it has none."""
    try:
        return importlib.import_module(f"autograder.lessons.lesson{lesson[:2]}.checks")
    except ImportError:
        return None


def lesson_checks(lesson: str) -> list[Check]:
    """The registered checks of a lesson folder ``NN_name``: ids ``lessonNN.*``."""
    return list(all_checks(f"lesson{lesson[:2]}.").values())


def run_notebook(path: Path, timeout_s: float = CELL_TIMEOUT_S) -> tuple[nbformat.NotebookNode, str]:
    """The notebook executed in memory in its own folder, as autograde executes it, and what stopped
    it ("" when nothing did)."""
    from ..nbgrader.execute import GraderError, IsolatedExecute

    nb = nbformat.read(path, as_version=4)
    # The student's own notebook on the student's own machine, visible checks only: nothing to keep from
    # it, so no OS sandbox (which a laptop may not have; grading a class requires one).
    execute = IsolatedExecute(timeout=timeout_s, interrupt_on_timeout=True, allow_errors=True,
                              kernel_name="python3", sandbox="off")
    try:
        execute.preprocess(nb, {"metadata": {"path": str(path.parent)}})
    except GraderError as error:
        return nb, f"проверку не удалось выполнить (сбой проверяющей системы, а не вашего решения): {error}"
    return nb, ""


def verdicts(nb: nbformat.NotebookNode, checks: list[Check]) -> list[Verdict]:
    """Each check's verdict from the last code cell calling it (nbgrader's rule for copies)."""
    cells, order = {}, {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            for call in parse_grade_cell(cell.source) or []:
                cells[call.check_id], order[call.check_id] = cell, index
    in_notebook_order = sorted(checks, key=lambda c: order.get(c.id, len(nb.cells)))
    return [_verdict(check, cells.get(check.id)) for check in in_notebook_order]


def _verdict(check: Check, cell) -> Verdict:
    if cell is None:
        return Verdict(check, False, message="в ноутбуке нет ячейки с этой проверкой (удалена?)")
    found = [v for v in verdicts_module.of_cell(cell) if v["check_id"] == check.id]
    if not found:
        return Verdict(check, False, message="ячейка проверки не выполнилась (ноутбук остановился раньше?)")
    failed = [v for v in found if not v["passed"]]
    if not failed:
        return Verdict(check, True, message="\n".join(v.get("message") or "" for v in found))
    if all(v.get("skipped") for v in failed):
        return Verdict(check, False, skipped=True)
    return Verdict(check, False, message=next(v["message"] for v in failed if not v.get("skipped")))


def check_lesson(path: Path) -> LessonReport:
    lesson = path.parent.name
    checks = lesson_checks(lesson)
    try:
        nb, problem = run_notebook(path)
    except Exception as error:  # noqa: BLE001 (an unreadable notebook is reported, the next lesson goes on)
        return LessonReport(lesson, [Verdict(c, False) for c in checks],
                            f"ноутбук не запустился: {type(error).__name__}: {error}")
    return LessonReport(lesson, verdicts(nb, checks), problem)


# --- the command ------------------------------------------------------------------------------------

def lesson_notebooks(folder: Path, lessons: list[str] | None = None) -> list[Path]:
    """``folder/NN_name/NN_name.ipynb`` of the given (or all) lessons; an unknown lesson is a ValueError."""
    found = {p.name: p / f"{p.name}.ipynb" for p in sorted(folder.iterdir())
             if (p / f"{p.name}.ipynb").exists()} if folder.is_dir() else {}
    unknown = [lesson for lesson in lessons or [] if lesson not in found]
    if unknown or not found:
        raise ValueError(f"в {folder} нет урока {', '.join(unknown) or '(ни одного)'}; уроки: {', '.join(found) or 'нет'}")
    return [found[lesson] for lesson in lessons] if lessons else list(found.values())


def main(lessons: list[str] | None = None, folder: Path = Path("notebooks"), out=None) -> int:
    out = out or sys.stdout
    notebooks = lesson_notebooks(folder, lessons)
    problems = environment_problems()
    if problems:
        print("Окружение не такое, как задано в pyproject.toml:", *("  ✗ " + p for p in problems), sep="\n", file=out)
        print("Пересоздайте его: rm -rf .venv && make test", file=out)
        return 1
    print(f"{PASS_MARK} Окружение: Python {platform.python_version()}, все пакеты курса установлены "
          "в нужных версиях и импортируются.", file=out)
    print(f"Запускаю ноутбуки сверху вниз (как кнопка Validate; сами ноутбуки не меняются): "
          f"{len(notebooks)} шт.\n", file=out, flush=True)
    total = top = 0.0
    seen: dict[str, str] = {}  # a failure's message -> the check that showed it first
    for path in notebooks:
        report = check_lesson(path)
        print(report.text(seen) + "\n", file=out, flush=True)
        main_checks = [v for v in report.verdicts if not v.check.bonus]
        total += sum(v.score for v in main_checks)
        top += sum(v.check.points for v in main_checks)
    print(f"ИТОГО по видимым проверкам: {format_points(total)} из {format_points(top)}.\n"
          "Это самопроверка: при выставлении оценки преподаватель добавит скрытые проверки "
          "с другими размерами и seed.", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
