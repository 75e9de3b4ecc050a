"""``course``: the course's command line, one subcommand per action.

    course release                 regenerate notebooks/ from solutions/ (nbgrader)
    course check-release           fail when notebooks/ is stale or a notebook carries outputs
    course grade NOTEBOOK          self-study: grade one notebook with the full hidden tests
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from . import course


def cmd_release(args) -> int:
    for path in course.release(only=args.lesson or None):
        print(f"written {path.relative_to(course.ROOT)}")
    return 0


def notebooks_with_outputs(root: Path = course.ROOT) -> list[str]:
    """Notebooks tracked by git whose code cells carry outputs or execution counts."""
    listed = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=root, capture_output=True, text=True)
    bad = []
    for name in listed.stdout.split():
        nb = nbformat.read(root / name, as_version=4)
        if any(c.cell_type == "code" and (c.outputs or c.execution_count) for c in nb.cells):
            bad.append(name)
    return bad


def cmd_check_release(args) -> int:
    problems = course.stale_release() + [f"{n} carries outputs" for n in notebooks_with_outputs()]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("run `make release` and commit notebooks/ (and clear outputs)", file=sys.stderr)
        return 1
    print("notebooks/ is current and no notebook carries outputs")
    return 0


def cmd_grade(args) -> int:
    path = Path(args.notebook).resolve()
    lesson = args.lesson or path.stem
    if lesson not in course.lessons():
        print(f"Неизвестный урок {lesson!r}; уроки: {', '.join(course.lessons())}", file=sys.stderr)
        return 2
    submission = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="course-grade-") as scratch:
        print(f"Проверяю {path.name} всеми тестами урока {lesson} (с дополнительными скрытыми)…")
        grades = course.autograde(lesson, {"me": submission}, Path(scratch))["me"]
    print(course.score_table(grades))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("release", help="regenerate notebooks/ from solutions/")
    p.add_argument("lesson", nargs="*")
    p.set_defaults(run=cmd_release)
    p = sub.add_parser("check-release", help="fail when notebooks/ is stale or has outputs")
    p.set_defaults(run=cmd_check_release)
    p = sub.add_parser("grade", help="grade one notebook with the full hidden tests")
    p.add_argument("notebook")
    p.add_argument("--lesson", help="lesson id when the file name differs")
    p.set_defaults(run=cmd_grade)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
