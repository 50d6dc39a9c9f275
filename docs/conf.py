"""Sphinx configuration: the PyData theme, MyST Markdown pages, tutorials as MyST
notebooks (jupytext text files) executed at every build, and the API reference from the
docstrings. ``make docs`` builds it into ``docs/_build/html``, failing on any warning."""

import os
import sys

ROOT = os.path.abspath("..")
sys.path.insert(0, ROOT)
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
]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
html_theme = "pydata_sphinx_theme"
html_title = "xpseq"
html_theme_options = {"show_toc_level": 2, "navigation_with_keys": False,
                      "header_links_before_dropdown": 7}
html_static_path = ["_static"]
html_css_files = ["xpseq.css"]
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
nb_execution_mode = "force"            # every tutorial runs at every build: none can rot
nb_execution_timeout = 600
nb_execution_raise_on_error = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autosummary_generate = True
napoleon_numpy_docstring = True
napoleon_google_docstring = False
suppress_warnings = ["myst.header"]
