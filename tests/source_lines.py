"""Source lines of a test file, found by the ``# <marker>`` comments that end them, for tests
that check an error names the user's line."""

from __future__ import annotations

import pathlib


class Markers:
    def __init__(self, test_file: str):
        self.path = pathlib.Path(test_file)
        self._lines = self.path.read_text().splitlines()

    def line_of(self, marker: str) -> int:
        """The 1-based line of the file that carries ``# <marker>``."""
        hits = [n for n, text in enumerate(self._lines, 1)
                if text.rstrip().endswith(f"# {marker}")]
        assert len(hits) == 1, marker
        return hits[0]

    def assert_at(self, exc: BaseException, marker: str, *words: str) -> None:
        """``exc`` names the marked line of the file and contains every one of ``words``."""
        text = str(exc)
        assert f"{self.path.name}:{self.line_of(marker)}" in text, text
        for word in words:
            assert word in text, text
