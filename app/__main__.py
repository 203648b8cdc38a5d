"""`python -m app` opens the Hearth window."""

import sys

from app.main import main

if __name__ == "__main__":
    sys.exit(main(exit_process=True))
