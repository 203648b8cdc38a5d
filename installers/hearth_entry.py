"""The bundled program's entry point: the `hearth` command (no arguments opens the window)."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
