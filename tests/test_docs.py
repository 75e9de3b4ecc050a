"""Do the docs name only commands that exist, links that lead somewhere, and the lessons there are?

The docs are README.md, docs/*.md and student/README.md (the README of the students' repository that
``course publish`` writes; its ``make`` is student/Makefile's, its ``course`` the same command).

* A command is read from code only (inline code spans and fenced blocks), where it stands as a command: at the
  start of a span or a line, after ``&&``, ``;``, ``|``, ``(``, ``:`` or ``=``, or as ``.../bin/course``; the
  subcommand follows after one space.  Prose and tree diagrams ("the course tools") are not commands.
* ``course SUB`` exists when ``course SUB --help`` exits 0 (the real command line, so a subcommand the parser
  lacks fails as a student would see it fail).
* ``make TARGET`` exists when the Makefile has a rule for TARGET.  The Makefile is parsed rather than asked with
  ``make -n``: a dry run expands the recipes, and a target that needs a variable (``make test-lesson L=NN``)
  would fail for want of it, not for want of a rule; a name in ``.PHONY`` without a rule (the old ``bench``)
  is no target.
"""
from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.course import paths as course

ROOT = course.ROOT
STUDENT_README = ROOT / "student" / "README.md"
#: Each doc and the Makefile its ``make`` commands run.
DOCS = {path: (ROOT / "student" / "Makefile" if path == STUDENT_README else ROOT / "Makefile")
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), STUDENT_README]}
#: Targets another change of this issue adds to the Makefile (the test tiers, docs/developer.md): the docs
#: describe them already.  Once they are rules, :func:`test_pending_targets_are_still_pending` fails: empty this.
PENDING_TARGETS: set[str] = set()

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
#: Where a command may start inside a line of code.
START = r"(?:^|&&|;|\||\(|:|=)[ \t]*(?:\$[ \t]+)?"
COURSE = re.compile(START + r"(?:[\w./$()-]*/)?course ([a-z][a-z-]*)", re.MULTILINE)
COURSE_BIN = re.compile(r"bin/course ([a-z][a-z-]*)")
MAKE = re.compile(START + r"make (?:-\S+ )*([a-z][a-z0-9_-]*)", re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def code_of(markdown: str) -> list[str]:
    """The doc's code: every fenced block and every inline code span outside them."""
    blocks = FENCE.findall(markdown)
    prose = FENCE.sub("", markdown)
    return blocks + SPAN.findall(prose)


def commands(markdown: str) -> tuple[set[str], set[str]]:
    """(``course`` subcommands, ``make`` targets) the doc names."""
    subcommands, targets = set(), set()
    for code in code_of(markdown):
        subcommands |= set(COURSE.findall(code)) | set(COURSE_BIN.findall(code))
        targets |= set(MAKE.findall(code))
    return subcommands, targets


def makefile_targets(makefile: Path) -> set[str]:
    """The targets the Makefile has a rule for (not variables, not special targets like .PHONY)."""
    found = set()
    for line in makefile.read_text(encoding="utf-8").splitlines():
        rule = re.match(r"([^\s#:=][^:=#]*?)[ \t]*::?(?!=)", line)
        if rule:
            found |= {name for name in rule.group(1).split() if not name.startswith(".")}
    return found


@functools.cache
def course_has(subcommand: str) -> bool:
    command = Path(sys.executable).parent / "course"
    done = subprocess.run([str(command), subcommand, "--help"], capture_output=True, text=True, timeout=120)
    return done.returncode == 0


def missing(doc: Path) -> list[str]:
    """The commands ``doc`` names that do not exist."""
    subcommands, targets = commands(doc.read_text(encoding="utf-8"))
    rules = makefile_targets(DOCS[doc])
    return ([f"course {s}" for s in sorted(subcommands) if not course_has(s)]
            + [f"make {t} ({DOCS[doc].relative_to(ROOT)} has no such target)"
               for t in sorted(targets - rules - PENDING_TARGETS)])


@pytest.mark.parametrize("doc", list(DOCS), ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_command_a_doc_names_exists(doc):
    """Does every `course SUB` and `make TARGET` this doc names exist?"""
    assert missing(doc) == []


def test_a_command_that_does_not_exist_is_caught(tmp_path, monkeypatch):
    """Would a doc naming `course new` or `make nosuch` fail, and prose or a path not count as a command?"""
    doc = tmp_path / "doc.md"
    doc.write_text("Run `course new 02` then `.venv/bin/course grade x.ipynb`.\n\n"
                   "```bash\nmake release && make nosuch\ncd ../x && .venv/bin/course publish ../x\n```\n\n"
                   "```\ncourse      the course tools (autograder/course/cli.py)\n```\n"
                   "The course tools; `autograder.course.paths`; `--course .`.\n", encoding="utf-8")
    monkeypatch.setitem(DOCS, doc, ROOT / "Makefile")
    assert commands(doc.read_text(encoding="utf-8")) == ({"new", "grade", "publish"}, {"release", "nosuch"})
    assert missing(doc) == ["course new", "make nosuch (Makefile has no such target)"]


def test_pending_targets_are_still_pending():
    """Is every target the docs name ahead of the Makefile still missing there (else: empty PENDING_TARGETS)?"""
    assert PENDING_TARGETS.isdisjoint(makefile_targets(ROOT / "Makefile"))


# --- links ----------------------------------------------------------------------------------------------

def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#{1,6} +(.+?) *$", FENCE.sub("", markdown), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", list(DOCS), ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_relative_link_leads_to_a_file_and_heading(doc):
    """Does every relative link of this doc name a file that is there, and a heading that is in it?

    student/README.md is published as the root README of the students' repository: its links start there."""
    base = ROOT if doc == STUDENT_README else doc.parent
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (base / path) if path else doc
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(target)
    assert broken == []


# --- the lessons tables ---------------------------------------------------------------------------------

def lessons_table(readme: Path) -> tuple[list[str], list[str]]:
    """(header cells, row lines) of the table under the heading «## Уроки»."""
    text = readme.read_text(encoding="utf-8")
    section = text.split("\n## Уроки\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return header, lines[2:]


def test_both_lessons_tables_list_the_lessons_alike():
    """Do README.md and student/README.md list exactly the course's lessons, in order, in the same rows,
    with «да» in the GPU column exactly for a GPU lesson?

    One source, tested rather than generated: README.md's table is the source, and student/README.md's must be
    the same rows, word for word.  The students' README is a template published on its own (their repository
    has no README.md of the course to link to), so it must hold the table itself; splicing the table in at
    publish time would hide it from whoever edits the template and move a doc fact into code.  The same rows,
    not a subset of columns: a student of either repository needs the same four columns.  The lessons come from
    ``autograder.course.paths.lessons()`` (the folders of solutions/) and the GPU column from ``is_gpu_lesson``
    (a check of the lesson needs a GPU), so a new lesson, or a lesson that gains a GPU part, fails here until
    both tables say so.
    """
    header, rows = lessons_table(ROOT / "README.md")
    student_header, student_rows = lessons_table(STUDENT_README)
    assert student_header == header and student_rows == rows
    cells = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
    assert [row[0] for row in cells] == [f"`{lesson}`" for lesson in course.lessons()]
    gpu = header.index("ядра CUDA")
    assert {row[0].strip("`"): "да" in row[gpu] for row in cells} == \
        {lesson: course.is_gpu_lesson(lesson) for lesson in course.lessons()}


def test_the_students_guide_links_every_gpu_lesson_to_colab():
    """Does docs/student.md link exactly the GPU lessons to Colab, at the address the notebooks use?"""
    from autograder.course import settings

    text = (ROOT / "docs" / "student.md").read_text(encoding="utf-8")
    links = re.findall(r"\((https://colab\.research\.google\.com/[^)\s]+)\)", text)
    assert links == [settings.colab_url(lesson) for lesson in course.lessons() if course.is_gpu_lesson(lesson)]
