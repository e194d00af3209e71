"""``python -m tilewright.autodd FILE --err-msg MSG -o OUT``."""

import sys

from .core import main

if __name__ == "__main__":
    sys.exit(main())
