"""`python -m gptlib ...`: hand-written plumbing that hands over to `gptlib.cli`."""

from gptlib.cli import main

raise SystemExit(main())
