"""Do the docs' lists of lessons («уроки 01–05 и 10», «06–09 и 11») say what the course holds?

The lessons tables of README.md and student/README.md are checked in tests/test_docs.py (both list the lessons of
``autograder.course.paths.lessons()``, alike).  Here: the sentences that name lessons by number, without a GPU or
with one (and so the lessons with an "Open in Colab" link), agree with ``is_gpu_lesson``; a new lesson, or a lesson
that gains a GPU part, fails here until the sentences say so.
"""
from __future__ import annotations

import re

import pytest

from autograder.course import paths as course

ROOT = course.ROOT
NUMBERS = r"\d\d(?:–\d\d)?(?:(?:, | и )\d\d(?:–\d\d)?)*"


def numbers(lessons: list[str]) -> list[str]:
    return [lesson[:2] for lesson in lessons]


def phrase(lessons: list[str]) -> str:
    """Lesson numbers as the docs write them: runs as «06–09», the last joined by «и»: «01–05 и 10»."""
    values = sorted(int(n) for n in numbers(lessons))
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    parts = [f"{r[0]:02d}–{r[-1]:02d}" if len(r) > 2 else ", ".join(f"{v:02d}" for v in r) for r in runs]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " и " + parts[-1]


def listed(text: str) -> list[str]:
    """The lesson numbers a phrase such as «01–05 и 10» names."""
    result = []
    for part in re.split(r", | и ", text):
        first, _, last = part.partition("–")
        result += [f"{n:02d}" for n in range(int(first), int(last or first) + 1)]
    return result


def prose(path: str) -> str:
    return " ".join((ROOT / path).read_text(encoding="utf-8").split())


GPU = [lesson for lesson in course.lessons() if course.is_gpu_lesson(lesson)]
CPU = [lesson for lesson in course.lessons() if not course.is_gpu_lesson(lesson)]


def test_the_phrase_is_the_docs_form():
    assert phrase(["01_a", "02_b", "03_c", "04_d", "05_e", "10_f"]) == "01–05 и 10"
    assert phrase(["06_a", "07_b", "08_c", "09_d", "11_e"]) == "06–09 и 11"
    assert listed("06–09 и 11") == ["06", "07", "08", "09", "11"]


@pytest.mark.parametrize("path", ["student/README.md", "docs/student.md"])
def test_the_lessons_without_a_gpu_and_with_one_are_the_course_lessons(path):
    match = re.search(rf"\*\*Без GPU\*\* уроки (?P<cpu>{NUMBERS}) проходятся целиком, а ядра CUDA уроков "
                      rf"(?P<gpu>{NUMBERS}) и GPU-части урока (?P<part>\d\d) запускаются на \*\*эмуляторе GPU\*\*",
                      prose(path))
    assert match, (f"{path}: нет фразы «**Без GPU** уроки ... проходятся целиком, а ядра CUDA уроков ... и GPU-части "
                   "урока NN запускаются на **эмуляторе GPU**»")
    assert match["cpu"] == phrase(CPU)
    assert sorted(listed(match["gpu"]) + [match["part"]]) == numbers(GPU)


@pytest.mark.parametrize("path, before", [("docs/student.md", "«Open in Colab» в начале уроков "),
                                          ("docs/instructor.md", "«Open in Colab» ноутбуков ")])
def test_the_lessons_with_a_colab_link_are_the_gpu_lessons(path, before):
    match = re.search(re.escape(before) + f"(?P<lessons>{NUMBERS})", prose(path))
    assert match, f"{path}: нет «{before}...»"
    assert match["lessons"] == phrase(GPU)


def test_the_lessons_in_brief_name_every_lesson_in_order():
    """docs/student.md «Коротко об уроках»: one item per lesson (or per run of lessons, «**07, 08**»), in order."""
    text = (ROOT / "docs/student.md").read_text(encoding="utf-8")
    section = text.split("## Коротко об уроках", 1)[1].split("\n## ", 1)[0]
    heads = re.findall(r"^- \*\*(\d\d(?:, \d\d)*)\*\*", section, flags=re.MULTILINE)
    assert [n for head in heads for n in head.split(", ")] == numbers(course.lessons()), \
        "docs/student.md, «Коротко об уроках»: по строке `- **NN** — ...` на урок, по порядку"


def test_the_colab_links_are_one_per_gpu_lesson():
    """docs/student.md «Без GPU и в Colab»: the "Open in Colab" link of each GPU lesson, as the notebooks' badges
    have it (autograder/course/settings.py: the repository address is written there once)."""
    from autograder.course.settings import colab_url

    text = (ROOT / "docs/student.md").read_text(encoding="utf-8")
    linked = re.findall(r"^- \[(\d\d_\w+) в Colab\]\(([^)]*)\)", text, flags=re.MULTILINE)
    assert [name for name, _ in linked] == GPU, "docs/student.md: по ссылке «- [NN_name в Colab](...)» на GPU-урок"
    for name, url in linked:
        assert url == colab_url(name), f"docs/student.md: ссылка на {name} должна быть {colab_url(name)}"
