"""Sphinx configuration: the PyData theme, MyST Markdown pages, tutorials as MyST
notebooks (jupytext text files) executed at every build, and the API reference from the
docstrings. ``make docs`` builds it into ``docs/_build/html``, failing on any warning."""

import os
import sys

ROOT = os.path.abspath("..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.abspath("_ext"))            # api_coverage
# The notebooks' kernels import this checkout too (not another installed copy).
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH"))
                                           if p)
os.environ.setdefault("XPSEQ_BACKEND", "numpy")     # tutorials name their backends

project = "xpseq"
author = "the xpseq developers"
copyright = "2026, the xpseq developers"
extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "api_coverage",
]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
html_theme = "pydata_sphinx_theme"
html_title = "xpseq"
html_theme_options = {
    "show_toc_level": 2, "navigation_with_keys": False, "header_links_before_dropdown": 7,
    # An API page is one object: its "on this page" column would only repeat the title.
    "secondary_sidebar_items": {"_autosummary/*": []},
}
# Pages outside a section (benchmarks, parity, development) have no section navigation:
# no empty column for it.
html_sidebars = {"benchmarks": [], "parity": [], "development": [], "getting-started": []}
html_static_path = ["_static"]
html_css_files = ["xpseq.css"]
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
nb_execution_mode = "force"            # every tutorial runs at every build: none can rot
nb_execution_timeout = 600
nb_execution_raise_on_error = True
# The API reference: one page per module, function and class (docs/_templates/autosummary),
# each documented once, where it is defined; numpydoc sections read by napoleon, their
# types linked.
templates_path = ["_templates"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autosummary_generate = True
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True
suppress_warnings = ["myst.header"]


def _skip_aliases(app, what, name, obj, skip, options):
    """A class bound to a second name (``Config = Seq2SeqConfig``) is documented once,
    under its own name."""
    if isinstance(obj, type) and getattr(obj, "__name__", name) != name:
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_aliases)
