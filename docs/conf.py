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
# The notebooks' NumPy computes small matrices: one BLAS thread (two on a busy 2-core
# machine ran several times slower), unless the build's caller chose.
if not any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                       "MKL_NUM_THREADS")):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

# The notebooks' kernels read an IPython profile of the build's own, not the user's
# (~/.ipython's startup files would run in every tutorial), which keeps the kernel's
# start-up notes out of the build's output: a kernel started by myst-nb talks to it over
# local TCP and warns that the link is not encrypted, 23 times a build; the build runs
# only its own notebooks. Only what is under docs/_build is written.
_PROFILE = os.path.join(os.path.abspath("_build"), "ipython", "profile_default")
os.makedirs(_PROFILE, exist_ok=True)
with open(os.path.join(_PROFILE, "ipython_kernel_config.py"), "w", encoding="utf-8") as _f:
    _f.write('c.IPKernelApp.log_level = "ERROR"\n')
os.environ["IPYTHONDIR"] = os.path.dirname(_PROFILE)

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
    "secondary_sidebar_items": {
        **{pattern: ["page-toc", "sourcelink"]
           for pattern in ("*", "tutorials/*", "guide/*", "tour/*")},
        "_autosummary/*": [],
        # The benchmarks' summary table takes the page's width at 1280 px.
        "benchmarks": []},
    # Every page that is a notebook (the tutorials, the tour) offers itself for download.
    "article_header_end": ["notebook-download"],
}
# Pages outside a section (benchmarks, parity, development) have no section navigation:
# no empty column for it.
html_sidebars = {"benchmarks": [], "parity": [], "development": [], "getting-started": []}
html_static_path = ["_static"]
html_css_files = ["xpseq.css"]
html_js_files = ["xpseq.js"]
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
# Text is shown as typed: "--xla_cpu_..." and "--beam" stay two hyphens (Docutils' smart
# quotes would make an en dash of them outside code, and a reader copies the flag wrong).
smartquotes = False
# A signature longer than a line shows one parameter a line, not wrapped mid-default.
maximum_signature_line_length = 88


def _skip_aliases(app, what, name, obj, skip, options):
    """A class bound to a second name (``Config = Seq2SeqConfig``) is documented once,
    under its own name."""
    if isinstance(obj, type) and getattr(obj, "__name__", name) != name:
        return True
    return None


def _notebook(app, pagename):
    """The executed notebook myst-nb wrote for page ``pagename``, or ``None``."""
    from pathlib import Path

    path = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    return path if path.is_file() else None


def _notebook_download(app, pagename, templatename, context, doctree):
    """The download link's target (beside the page's HTML) for a notebook page."""
    context["notebook_download"] = (f"{pagename.rpartition('/')[2]}.ipynb"
                                    if _notebook(app, pagename) else None)


def _copy_notebooks(app, exception):
    """Each executed notebook copied beside its page, where the link points."""
    import shutil
    from pathlib import Path

    if exception is not None or app.builder.format != "html":
        return
    for pagename in app.env.found_docs:
        if (notebook := _notebook(app, pagename)) is not None:
            target = Path(app.outdir) / f"{pagename}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(notebook, target)


def _field_dashes(app, doctree, docname):
    """The separator Sphinx puts between a parameter's name and type and its description
    (" -- ", written for smart quotes to make an en dash) as the en dash it stands for:
    the one dash the site adds itself (smart quotes are off)."""
    from docutils import nodes

    for field in doctree.findall(nodes.field_body):
        for text in list(field.findall(nodes.Text)):
            if " -- " in text and not isinstance(text.parent, (nodes.literal,
                                                                nodes.literal_block)):
                text.parent.replace(text, nodes.Text(text.replace(" -- ", " \u2013 ")))


def setup(app):
    app.connect("doctree-resolved", _field_dashes)
    app.connect("autodoc-skip-member", _skip_aliases)
    app.connect("html-page-context", _notebook_download)
    app.connect("build-finished", _copy_notebooks)
