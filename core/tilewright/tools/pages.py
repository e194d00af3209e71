"""The HTML pages of the tools, rendered from jinja2 templates (``tools/templates/``) with
every value escaped."""

from __future__ import annotations

import functools

import jinja2


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("tilewright.tools"),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


def render_page(template: str, **values) -> str:
    """The page ``templates/<template>`` with ``values``."""
    return _environment().get_template(template).render(**values)
