"""The ``tilewright-sdk`` command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .scaffold import ScaffoldError, new_backend


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tilewright-sdk",
                                     description="tools for tilewright backend authors")
    sub = parser.add_subparsers(dest="command", required=True)
    new = sub.add_parser("new-backend", help="scaffold a new backend distribution")
    new.add_argument("name", help="backend name: lower case letters, digits, '_' or '-'; the "
                                  "distribution is tilewright-NAME")
    new.add_argument("--dir", default=".", help="parent folder of the new distribution "
                                                "(default: the current folder)")
    report = sub.add_parser("report", help="rebuild index.html of a report folder: one "
                                           "report across every backend run into it")
    report.add_argument("folder", help="a --tilewright-report folder")
    args = parser.parse_args(argv)
    if args.command == "report":
        from .conformance.report import rebuild_index

        folder = Path(args.folder)
        if not any(folder.glob("*.json")):
            print(f"tilewright-sdk: error: {folder} holds no conformance or fuzz JSON "
                  "report", file=sys.stderr)
            return 2
        print(f"wrote {rebuild_index(folder)}")
        return 0
    try:
        folder = new_backend(args.name, Path(args.dir))
    except ScaffoldError as exc:
        print(f"tilewright-sdk: error: {exc}", file=sys.stderr)
        return 2
    print(f"created {folder}\nnext: pip install -e {folder} && pytest {folder}/tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
