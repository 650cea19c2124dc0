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

# Some cells take a few seconds (measurements, the multi-process notebook); nbgrader's default of 30 s per
# cell is tight on a busy laptop. The same limit as the course's nbval runs.
c.Execute.timeout = 300
