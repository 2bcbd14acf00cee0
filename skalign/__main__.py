"""``python -m skalign``: the command line of :mod:`skalign.cli`.

With no command (or only demo options) it runs the demo (:mod:`skalign.demo`);
``python -m skalign fit|translate|evaluate|demo ...`` is the same as ``skalign ...``.
"""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], default_command="demo"))
