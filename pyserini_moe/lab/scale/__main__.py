"""``python -m pyserini_moe.lab.scale``: the scale check (``make scale-check``)."""

import sys

from pyserini_moe.lab.scale.runner import main

sys.exit(main())
