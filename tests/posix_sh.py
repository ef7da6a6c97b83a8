"""The shell the tests run fastpath's shell programs under: dash, a POSIX sh without bash's extensions, since a job
image's sh may be no more (and may have no bash at all)."""

import shutil

import pytest

DASH = shutil.which("dash")
needs_dash = pytest.mark.skipif(DASH is None, reason="dash is not installed (apt-get install dash): the shell programs are tested under a POSIX sh")
