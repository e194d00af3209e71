"""``python -m tilewright``: the ``tilewright`` command."""

from .cli.main import main

raise SystemExit(main())
