"""The plugin contract: every hook a tilewright plugin may implement.

A plugin is a module registered under the entry-point group ``tilewright.plugins``; it
implements hooks with ``@tilewright.plugin.hookimpl``. All hooks return declarations (see
:mod:`tilewright.plugin.types`), never behaviour patched into the core. A function named
``tilewright_*`` that is not declared here is an error.
"""

from __future__ import annotations

import pluggy

from .types import ArchModel, BackendModule, CliTool, LanguageExtension, PassConfigKey, Timer

PROJECT = "tilewright"
hookspec = pluggy.HookspecMarker(PROJECT)


@hookspec
def tilewright_backends() -> list[BackendModule]:
    """The backends this plugin provides.

    Called once when the plugin manager loads plugins.

    :returns: a list of :class:`BackendModule`; an empty list is allowed.
    """


@hookspec
def tilewright_lowering_rules(backend: str) -> dict:
    """Extra per-op lowering rules for ``backend``, keyed by tile-op name.

    Called when a backend builds its rule table, so one plugin can teach another backend an
    op. A rule has the backend's own rule signature.

    :param backend: the backend's name.
    :returns: a mapping ``op name -> rule`` or None.
    """


@hookspec
def tilewright_timers() -> list[Timer]:
    """Timers ``do_bench`` can use (``event``, ``cupti``, ``wall`` ...).

    Called once when timers are first listed.
    """


@hookspec
def tilewright_arch_models() -> list[ArchModel]:
    """Architecture models for the roofline analyser.

    Called once when architecture models are first listed.
    """


@hookspec
def tilewright_pass_config_keys() -> list[PassConfigKey]:
    """``pass_configs`` keys this plugin understands; unknown keys are errors.

    Called once when a compilation first validates its pass configs.
    """


@hookspec
def tilewright_language_extensions() -> list[LanguageExtension]:
    """Dialect modules this plugin adds to the language.

    Called once when extensions are first listed.
    """


@hookspec
def tilewright_cli_tools() -> list[CliTool]:
    """Subcommands this plugin adds to the ``tilewright`` command.

    Called once when the command line starts.
    """
