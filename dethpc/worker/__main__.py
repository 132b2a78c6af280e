"""Entry point: ``python -m dethpc.worker`` (see ``dethpc.worker.main``)."""

import sys

from dethpc.worker.main import main

sys.exit(main())
