"""nbgrader settings for Autograd Lab.

`tools/classroom.py student` (make student) copies this file into the nbgrader course directory,
build/nbgrader/, where every nbgrader command reads it (run nbgrader from that directory). To run
the course in a course directory of your own, copy this file there as nbgrader_config.py.
"""

c = get_config()  # noqa: F821 (nbgrader provides it)

c.CourseDirectory.course_id = "autograd-lab"

# What replaces each worked solution (the lines between ### BEGIN SOLUTION and ### END SOLUTION) in the
# student release. The cell keeps its check call, so it shows the learner's feedback; nothing here raises:
# the locked autograder test cell below it fails, with the check's own message ("Your turn: replace the
# ... with ...", or "Not yet: <hint>"), until the answer is right.
c.ClearSolutions.code_stub = {
    "python": (
        "# YOUR ANSWER: replace the ... in the exercise cell above and run it (or write `answer = ...` here),\n"
        "# then run this cell: it shows the check's feedback. The locked cell below grades the same check."
    )
}

# The limit for one cell. The course's notebooks run whole in well under a minute, so 120 s leaves a slow
# laptop room. It also bounds a known stall: now and then nbclient (which nbgrader executes with) receives
# the reply to a widget cell only when this timeout expires, then carries on without error
# (jupyter/nbclient#312); nbgrader's default, 30 s, is too tight for the multi-process notebook on a busy machine.
c.Execute.timeout = 120
