"""The gradebook, opened in one place: nbgrader's own ``Gradebook``, with its sqlalchemy warnings silenced
(they are about nbgrader's own use of its session, not ours, and a warning on stderr of a test cell's
process would cost the cell its points)."""
from __future__ import annotations

import contextlib
import warnings

from nbgrader.api import Gradebook


@contextlib.contextmanager
def quiet():
    """nbgrader's sqlalchemy warnings are about nbgrader's own session use, not ours."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def open_gradebook(db_url: str):
    """``with open_gradebook(url) as gradebook:`` nbgrader's Gradebook, quietly."""
    with quiet(), Gradebook(db_url) as gradebook:
        yield gradebook
