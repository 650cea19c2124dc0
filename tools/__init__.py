"""The maintainer's tools, one command line: ``python -m tools COMMAND [ARGS]`` from the repository root.

The Makefile calls them; README says which target does what. (``tools/python_check.py`` alone runs as a
plain script, before any virtual environment exists.)
"""
