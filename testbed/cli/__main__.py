"""``python -m testbed.cli``: the ``netsense`` command; the rootless mode re-executes this."""

import sys

from testbed.cli.app import main

sys.exit(main())
