"""``python -m ingestd.cli``: the same as the ``ingestd`` command."""

import sys

from ingestd.cli.main import main

sys.exit(main())
