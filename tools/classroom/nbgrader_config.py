"""nbgrader settings for Autograd Lab.

`tools/classroom.py student` (make student) copies this file into the nbgrader course directory,
build/nbgrader/, where every nbgrader command reads it (run nbgrader from that directory). To run
the course in a course directory of your own, copy this file there as nbgrader_config.py.
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

# The limit for one cell. The course's notebooks run whole in well under a minute, so 120 s leaves a slow
# laptop room; nbgrader's default, 30 s, is tight for the multi-process notebook on a busy machine.
c.Execute.timeout = 120

# jupyter/nbclient#312: with widget cells, the wait for a cell's reply sometimes wakes only when its poll
# times out, although the reply is there, so one grading run can sit idle for the whole timeout above.
# Autograde executes with this subclass of nbgrader's Execute, which polls in short steps up to the same
# deadline and picks the reply up at once (tools/execute_notebooks.py does the same for `make notebooks`).
import time  # noqa: E402
from queue import Empty  # noqa: E402

from nbgrader.converters.autograde import Autograde  # noqa: E402
from nbgrader.preprocessors import Execute  # noqa: E402


class SteadyExecute(Execute):
    poll_s = 0.5

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        one_poll = kc.shell_channel.get_msg

        async def get_msg(timeout=None):
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = self.poll_s if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    return await one_poll(timeout=min(self.poll_s, left))
                except Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise

        kc.shell_channel.get_msg = get_msg
        return kc


c.Autograde.autograde_preprocessors = [
    SteadyExecute if pp is Execute else pp for pp in Autograde.class_traits()["autograde_preprocessors"].default()
]
