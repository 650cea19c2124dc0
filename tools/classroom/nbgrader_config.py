"""nbgrader settings for Autograd Lab.

`tools/classroom student` (make student) writes the nbgrader course directory, build/nbgrader/, whose
nbgrader_config.py loads this file (run nbgrader from that directory). To run the course in a course
directory of your own, copy this file there as nbgrader_config.py.
"""

c = get_config()  # noqa: F821 (nbgrader provides it)

c.CourseDirectory.course_id = "autograd-lab"

# What replaces each worked solution (the lines between ### BEGIN SOLUTION and ### END SOLUTION) in the
# student release. The cell keeps the exercise's own lines above it (``answer = ...``) and its check call
# below, so it shows the learner's feedback; nothing here raises: the locked autograder test cell below it
# fails, with the check's own message ("Your turn: replace the ... with ...", or "Not yet: <hint>"), until
# the answer is right.
c.ClearSolutions.code_stub = {
    "python": (
        "# YOUR ANSWER goes above: replace the ... and run this cell; the line below shows the check's feedback.\n"
        "# The locked cell after this one grades the same check."
    )
}

# The limit for one cell, with room for a slow laptop; nbgrader's default, 30 s, is tight for the
# multi-process notebook on a busy machine.
c.Execute.timeout = 120

# How autograde starts its kernels: over IPC and polling the shell channel in short steps (jupyter/nbclient#312:
# with widget cells one long poll can sit idle for the whole timeout above). Both live in tools/kernels.py,
# which `make notebooks` and `make bench` use too. This file lies in tools/classroom/ (the course directory's
# nbgrader_config.py loads it from there); a copy elsewhere runs nbgrader's own Execute instead.
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from nbgrader.converters.autograde import Autograde  # noqa: E402
from nbgrader.preprocessors import Execute  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: the tools package
try:
    from tools.kernels import SteadyKernel
except ImportError:
    SteadyKernel = None

if SteadyKernel is not None:

    class SteadyExecute(SteadyKernel, Execute):
        """nbgrader's Execute, its kernel on IPC with steady shell polls (autograde takes the sync way in)."""

    c.Autograde.autograde_preprocessors = [
        SteadyExecute if pp is Execute else pp for pp in Autograde.class_traits()["autograde_preprocessors"].default()
    ]
