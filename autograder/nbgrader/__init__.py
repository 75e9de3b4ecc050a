"""The nbgrader integration: this course's plugins for nbgrader's converters and its gradebook.
"""
