"""``python -m memharness.cli``: the ``memharness`` command (the tests and the demo spawn it)."""

import sys

from memharness.cli.main import main

sys.exit(main())
