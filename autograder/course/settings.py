"""Settings of this course: the facts that several tools and every GPU notebook share, each written once."""
from __future__ import annotations

#: The students' repository of the course (what `course publish` writes is pushed there): the notebooks'
#: install cell and "Open in Colab" links point to it.  `course publish OUT --repository URL` writes another
#: one into the published copy (this line, the notebooks, README), so the course's own notebooks keep this one.
COURSE_REPOSITORY = "https://github.com/COURSE-ORG/llm-inference-module07"
#: The owner in COURSE_REPOSITORY until an instructor writes a real one: `course publish` refuses an address of this
#: owner (the published notebooks' Colab links and install cell would lead nowhere).
PLACEHOLDER_OWNER = "COURSE-ORG"
#: True only in the package copy of the students' repository (`course publish` writes it): there `course` offers
#: only `check`.  The course's checkout and an instructor's plain `pip install` of the package keep every command.
STUDENTS_EDITION = False


def colab_url(lesson: str, branch: str = "main", repository: str | None = None) -> str:
    """The "Open in Colab" address of a student notebook in the course repository."""
    path = (repository or COURSE_REPOSITORY).removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{path}/blob/{branch}/notebooks/{lesson}/{lesson}.ipynb"


#: The placeholders a lesson's text source holds where its notebook has the Colab badge (a line of the first
#: markdown cell) and the install cell (a code cell of this line alone); the build writes them from here.
COLAB_BADGE_MARK = "{{COLAB_BADGE}}"
INSTALL_CELL_MARK = "# {{COURSE_INSTALL}}"


def colab_badge(lesson: str, repository: str | None = None) -> str:
    """The "Open in Colab" badge of a GPU lesson's notebook (one markdown line)."""
    return ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({colab_url(lesson, repository=repository)})")


def install_cell(repository: str | None = None) -> str:
    """The source of a GPU lesson's install cell: in Colab or a bare environment it installs the course package
    from the course repository (and what a GPU check needs beyond CuPy); in the course's environment, nothing."""
    repository = repository or COURSE_REPOSITORY
    return "\n".join([
        "# Colab и чистые окружения: ставим пакет курса, если его нет (в собранном окружении курса ничего не делает).",
        "import importlib, importlib.util, subprocess, sys",
        "",
        f'COURSE_REPOSITORY = "{repository}"',
        'if importlib.util.find_spec("autograder") is None:',
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", f"git+{COURSE_REPOSITORY}"], check=True)',
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "cloudpickle", "cuda-bindings", "nvidia-cuda-nvrtc"],',
        "                   check=True)",
        "    importlib.invalidate_caches()"])
