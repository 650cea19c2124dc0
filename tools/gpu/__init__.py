"""The course checked on a lent GPU machine that has Python, a CUDA build of torch and pytest, but no network and
no Jupyter stack: ``wheels`` downloads here what that machine lacks (``make gpu-wheels``, into ``.whl/``, which git
ignores), and ``check.sh`` runs there: it installs them, then ``make test-cuda``'s suites and ``make bench``'s
CUDA part, and leaves their logs and figures in ``$OUT``.
"""
