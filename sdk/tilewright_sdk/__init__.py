"""tilewright-sdk: what a backend author needs.

- :mod:`tilewright_sdk.conformance`: the conformance suite, a pytest plugin
  (``pytest --pyargs tilewright_sdk.conformance --tilewright-backend NAME``);
- :mod:`tilewright_sdk.scaffold`: ``tilewright-sdk new-backend NAME`` writes a new backend
  distribution that installs and passes the contract tests;
- tolerance-aware comparison lives in the core, :mod:`tilewright.testing`.
"""

from importlib.metadata import version

__version__ = version("tilewright-sdk")  # one source of truth: pyproject.toml
