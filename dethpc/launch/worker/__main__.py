"""Entry point: ``python -m dethpc.launch.worker`` (see ``dethpc.launch.worker.main``)."""

import sys

from dethpc.launch.worker.main import main

sys.exit(main())
