"""`python -m behavioral.cli` is `empathy-gap` (what torchrun and accelerate launch)."""

import sys

from behavioral.cli.commands import main

sys.exit(main())
