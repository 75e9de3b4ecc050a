"""The course tools: the lessons on disk, release, grading (self-study and a class), status, report,
publish and the ``course`` command line.
"""
