"""nbgrader on the course's JupyterHub, for everyone (students and instructors).

Found through JUPYTER_CONFIG_PATH, which the hub sets for every user's server (tools/hub/hub.py); the
AUTOGRAD_LAB_* variables come from there too. The course itself (its id, the release's code stub, grading
settings) is the classroom kit's nbgrader_config.py, loaded first so that it has one home.
"""

import os

c = get_config()  # noqa: F821 (nbgrader provides it)
load_subconfig(os.environ["AUTOGRAD_LAB_CLASSROOM_CONFIG"])  # noqa: F821 (traitlets provides it)

# The exchange: release puts assignments there, fetch and submit use it, collect takes submissions from it.
c.Exchange.root = os.environ["AUTOGRAD_LAB_EXCHANGE"]

if os.environ.get("AUTOGRAD_LAB_ROLE") == "student":
    # A submission is filed under the student's id. nbgrader takes the Unix user's name, which is the same
    # for everyone under the hub's local spawner; the hub's user name tells the students apart.
    c.CourseDirectory.student_id = os.environ["JUPYTERHUB_USER"]
elif os.environ.get("AUTOGRAD_LAB_COURSE"):
    # The instructor: the formgrader and every nbgrader command work on the course directory.
    c.CourseDirectory.root = os.environ["AUTOGRAD_LAB_COURSE"]
    # collect compares a submission's Unix owner with the student id: one Unix user here, so it would
    # warn about every submission.
    c.ExchangeCollect.check_owner = False
