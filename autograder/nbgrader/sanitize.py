"""The first sanitising step: a submission's graded cells become exactly the gradebook's.
"""
from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from . import submission
from .gradebook import open_gradebook


class SanitizeStructure(NbGraderPreprocessor):
    """First sanitising step: the submission's graded cells become exactly the gradebook's.

    Deleted graded cells come back, copies and unknown ids stop being graded cells, known cells
    get their metadata from the gradebook (:func:`autograder.nbgrader.submission.repair`).  What was
    repaired is logged as warnings that start with ``autograder:``, and kept in
    ``resources["autograder_anomalies"]``.  nbgrader 0.9.6 alone scores a deleted test cell as
    "needs manual grading", leaves a notebook with a new or renamed grade cell ungraded, and stops
    the whole class run on a copied one.
    """

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with open_gradebook(info["db_url"]) as gradebook:
            cells = submission.source_cells(gradebook, info["notebook"], info["assignment"])
        anomalies = submission.repair(nb, cells)
        for anomaly in anomalies:
            self.log.warning("autograder: %s/%s: %s", info["student"], info["assignment"], anomaly)
        resources.setdefault("autograder_anomalies", []).extend(anomalies)
        return nb, resources
