"""`python -m tracejudge`: the `tracejudge` command, for when the console script is not on PATH.

This folder is installed as the top of the `tracejudge` namespace (pyproject's package-dir) and
holds nothing else: the import names live in models/, judges/, streams/, prompts/ and client/.
"""

from tracejudge.streams.cli.entry import main

raise SystemExit(main())
