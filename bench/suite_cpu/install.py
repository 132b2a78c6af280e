"""Install or remove the CPU ledger's ``.pth`` in a venv (bench/suite_cpu).

``python bench/suite_cpu/install.py [--remove]`` with the venv's own Python: writes
``zz_dethpc_cpu_ledger.pth`` into its site-packages; the line runs ``ledger.py`` in
every Python process of that venv where ``DETHPC_CPU_LEDGER`` is set, and does nothing
(one environment lookup) where it is not.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

NAME = "zz_dethpc_cpu_ledger.pth"


def main(argv: list[str]) -> int:
    target = Path(sysconfig.get_paths()["purelib"]) / NAME
    if "--remove" in argv:
        target.unlink(missing_ok=True)
        print(f"removed {target}")
        return 0
    ledger = Path(__file__).resolve().with_name("ledger.py")
    target.write_text(
        "import os; os.environ.get('DETHPC_CPU_LEDGER') and "
        f"exec(compile(open({str(ledger)!r}).read(), {str(ledger)!r}, 'exec'), "
        "{'__name__': 'dethpc_cpu_ledger'})\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
