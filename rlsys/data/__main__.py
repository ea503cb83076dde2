"""`python -m rlsys.data`: import, export and summarise trajectory shards (see `rlsys.data.digirl_files`)."""

import sys

from rlsys.data.digirl_files import main

sys.exit(main())
