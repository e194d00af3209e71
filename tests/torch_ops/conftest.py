"""torch operator tests: they need torch (skipped with one reason without it)."""

import pytest

torch = pytest.importorskip("torch", reason="the torch operator tests need torch "
                                            "(pip install 'tilewright[torch]')")
