"""Build hook: the wheel carries the course itself, the notebooks and their worked solutions.

Everything else about the package is in pyproject.toml. When a wheel is built, the course's files
(autograd_lab.course.COURSE_FILES, from notebooks/) are copied into the package as autograd_lab/notebooks,
where ``autograd-lab`` makes the learner's copy from. An editable install copies nothing: it reads the
repository's notebooks/ directly. An sdist includes notebooks/ (MANIFEST.in), so a wheel built from it
carries the course too.
"""

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "helpers"))
from autograd_lab.course import MAP, course_files  # noqa: E402 (the standard library only: no torch to build)


class BuildPyWithCourse(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        source = ROOT / "notebooks"
        names = course_files(source)
        if MAP not in names:
            sys.exit(f"setup.py: {source} holds no {MAP}, so the wheel would carry no course. Build from a clone "
                     "of the repository, or from an sdist made from one (MANIFEST.in brings notebooks/).")
        target = Path(self.build_lib) / "autograd_lab" / "notebooks"
        shutil.rmtree(target, ignore_errors=True)  # a notebook removed from the course leaves the wheel too
        for name in names:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, target / name)


setup(cmdclass={"build_py": BuildPyWithCourse})
