"""Feedback HTML (`nbgrader generate_feedback`) that wraps long lines of cell outputs and code.

nbgrader's feedback template shows outputs in <pre> blocks that never wrap, so the end of a long
grader message (the hint) lies beyond the right edge of the page.  This preprocessor runs after
nbconvert's CSSHTMLHeaderPreprocessor and adds one CSS rule to the styles the template inlines
(`resources["inlining"]["css"]`); :func:`autograder.nbgrader.pipeline.feedback_preprocessors` puts it last.
"""
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

WRAP_OUTPUT_CSS = """
/* Module 07: wrap long lines of outputs (the grader's messages) and of code instead of cutting them off. */
div.output_area pre, div.output_subarea pre, div.output_text pre, div.output_error pre, div.input_area pre {
  white-space: pre-wrap;
  overflow-wrap: anywhere;
  word-break: normal;
}
"""


class WrapLongOutputLines(Preprocessor):
    """Adds WRAP_OUTPUT_CSS to the CSS that the feedback page inlines (once, even where nbgrader reads
    the config file twice and so registers this preprocessor twice)."""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        inlining = resources.setdefault("inlining", {})
        css = list(inlining.get("css", []))
        if WRAP_OUTPUT_CSS not in css:
            css.append(WRAP_OUTPUT_CSS)
        inlining["css"] = css
        return nb, resources
