"""nbgrader's exchange for every user's server on the course's JupyterHub (deploy/jupyterhub_config.py puts this
folder first on each server's JUPYTER_CONFIG_PATH; in the container image it is there too).

The one place of the course id and of the exchange folder: the hub config reads them from this file.  The
instructor's course folder has its own nbgrader_config.py (the course: solutions/, notebooks/, the grader);
nbgrader reads that one on top of this.
"""
import os

c = get_config()  # noqa: F821 (provided by nbgrader)

# One course on this hub; COURSE_ID names it (and the Unix groups of its instructors and students on one
# machine: COURSE_ID-instructors, COURSE_ID-students).
c.CourseDirectory.course_id = os.environ.get("COURSE_ID", "module07")
# nbgrader's own exchange: a folder every user's server sees (on one machine a local folder, on Kubernetes a
# ReadWriteMany volume mounted here).  It is world-writable with the sticky bit; nbgrader keeps each
# student's submissions apart.
c.Exchange.root = os.environ.get("COURSE_EXCHANGE", "/srv/nbgrader/exchange")
