"""The selection of `make test-fast`: ``python tests/touched_lessons.py [BASE]`` prints a pytest ``-m`` expression.

The fast tier is every test that is not end to end (marker ``e2e``) and, of the bank entries (marker ``bank``,
tests/test_banks.py), those of the lessons touched: changed since the branch left BASE (``git diff
BASE...HEAD``, BASE by default ``main``), or changed in the working tree, or new and not ignored.

* Lesson NN is touched by lessons/NN_*.py, solutions/NN_*/, notebooks/NN_*/, autograder/lessons/lessonNN/,
  tests/banks/bank_NN_*.py and tests/test_lessonNN_*.py; the GPU lessons by tests/test_gpu_lessons.py and
  tests/test_gpu.py (:data:`SHARED_LESSON_FILES`).
* Every lesson is touched by what all banks run on: autograder/checks/, autograder/gpu/ (but its emulator),
  the shared modules autograder/lessons/*.py, tests/bank.py, tests/test_banks.py and tests/banks/__init__.py;
  and when git cannot tell (no repository, no BASE).
* The PTX emulator's tests (marker ``emulator``: tests/test_emulator*.py, about 700 tests and 2 minutes of 2
  cores) run when the emulator is touched (:data:`EMULATOR_PATHS`: autograder/gpu/emulator/, the CuPy stand-in,
  their tests, golden data and bank runner) or when git cannot tell; otherwise only the emulated bank entries
  of the lessons touched.

The lessons chosen, and why, go to stderr.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LESSON_PATHS = [re.compile(p) for p in (r"^lessons/(\d\d)_[^/]*\.py$", r"^solutions/(\d\d)_", r"^notebooks/(\d\d)_",
                                        r"^autograder/lessons/lesson(\d\d)/", r"^tests/banks/bank_(\d\d)_",
                                        r"^tests/test_lesson(\d\d)_")]
#: Files of several lessons' tests: the lessons they touch.
SHARED_LESSON_FILES = {"tests/test_gpu_lessons.py": {"06", "07", "08", "09", "11"},  # the GPU banks
                       "tests/test_gpu.py": {"06", "07", "08", "11"}}  # their kernels compile (marked bank)
EMULATOR_PATHS = re.compile(r"^(autograder/gpu/emulator/|autograder/gpu/emulated_cupy\.py$|tests/test_emulator|"
                            r"tests/emulated_banks\.py$|tests/golden/)")
CORE_PATHS = re.compile(r"^(autograder/checks/|autograder/gpu/(?!emulator/|emulated_cupy\.py$)|"
                        r"autograder/lessons/[^/]+\.py$|tests/bank\.py$|"
                        r"tests/test_banks\.py$|tests/banks/__init__\.py$)")


def changed_files(base: str) -> list[str] | None:
    """Paths changed since the branch left ``base``, in the working tree, or new; None if git cannot say."""
    found = set()
    for command in (["git", "diff", "--name-only", f"{base}...HEAD"], ["git", "diff", "--name-only", "HEAD"],
                    ["git", "ls-files", "--others", "--exclude-standard"]):
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0:
            return None
        found.update(line.strip() for line in done.stdout.splitlines() if line.strip())
    return sorted(found)


def emulator_touched(files: list[str] | None) -> bool:
    """Whether the change reaches the PTX emulator (or git cannot tell)."""
    return files is None or any(EMULATOR_PATHS.match(f) for f in files)


def touched(files: list[str] | None) -> tuple[set[str] | None, str]:
    """(the lessons touched, or None for all of them; why)."""
    if files is None:
        return None, "git не может сравнить с базой"
    core = [f for f in files if CORE_PATHS.match(f)]
    if core:
        return None, f"изменено общее ядро проверок: {', '.join(core[:3])}{' …' if len(core) > 3 else ''}"
    lessons = {m.group(1) for f in files for p in LESSON_PATHS if (m := p.match(f))}
    lessons |= {n for f in files for n in SHARED_LESSON_FILES.get(f, ())}
    return lessons, "изменены уроки: " + (", ".join(sorted(lessons)) if lessons else "нет")


def expression(lessons: set[str] | None, emulator: bool = True) -> str:
    """The ``-m`` expression: no end-to-end test; the banks of ``lessons`` (None: all); the PTX emulator's
    tests when ``emulator``, else only its bank entries (marked ``bank`` too) of ``lessons``."""
    parts = ["not e2e"]
    if lessons is not None:
        keep = ["not bank", *(f"lesson(n='{n}')" for n in sorted(lessons)), *(["emulator"] if emulator else [])]
        parts.append(keep[0] if len(keep) == 1 else "(" + " or ".join(keep) + ")")
    if not emulator:
        parts.append("(not emulator or bank)")
    return " and ".join(parts)


def main(argv: list[str]) -> int:
    base = argv[0] if argv else "main"
    files = changed_files(base)
    lessons, why = touched(files)
    emulator = emulator_touched(files)
    which = "банки всех уроков" if lessons is None else "банки уроков " + ", ".join(sorted(lessons)) if lessons \
        else "без банков"
    which += ", тесты эмулятора PTX" if emulator else ", без тестов эмулятора PTX (он не изменён)"
    print(f"make test-fast: {which} ({why}; сравнение с {base})", file=sys.stderr)
    print(expression(lessons, emulator))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
