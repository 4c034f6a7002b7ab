"""`python -m tracejudge.streams.cli`: the same as the `tracejudge` command."""

import sys

from tracejudge.streams.cli.entry import main

sys.exit(main())
