"""Settings of this course: the facts that several tools and every GPU notebook share, each written once."""
from __future__ import annotations

#: The students' repository of the course (what `course publish` writes is pushed there): the notebooks'
#: install cell and "Open in Colab" links point to it.  `course publish OUT --repository URL` writes another
#: one into the published copy (this line, the notebooks, README), so the course's own notebooks keep this one.
COURSE_REPOSITORY = "https://github.com/COURSE-ORG/llm-inference-module07"


def colab_url(lesson: str, branch: str = "main", repository: str | None = None) -> str:
    """The "Open in Colab" address of a student notebook in the course repository."""
    path = (repository or COURSE_REPOSITORY).removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{path}/blob/{branch}/notebooks/{lesson}/{lesson}.ipynb"
