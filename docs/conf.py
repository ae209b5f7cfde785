"""Sphinx configuration: MyST pages executed by myst-nb, API pages by autodoc.

Build (from the repository root): ``python -m sphinx -W -b html docs docs/_build/html``.
"""

import os
import shutil
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

import jaxacct  # noqa: E402

# executed pages print no progress bars (they go to stderr, into the page)
os.environ.setdefault("JAXACCT_PROGRESS", "0")
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")

project = "jaxacct"
author = "jaxacct authors"
copyright = "jaxacct authors"
release = version = jaxacct.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]

# The notebooks in notebooks/ are stored with their outputs; they are shown as
# stored (not re-executed here: tests/project/test_notebooks.py executes them).
_TUTORIALS = os.path.join(os.path.dirname(__file__), "tutorials")
os.makedirs(_TUTORIALS, exist_ok=True)
for _name in sorted(os.listdir(os.path.join(ROOT, "notebooks"))):
  if _name.endswith(".ipynb"):
    shutil.copy(os.path.join(ROOT, "notebooks", _name), os.path.join(_TUTORIALS, _name))

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# Executed pages: every {code-cell} runs on each build; a cell that raises fails
# the build. Notebooks (tutorials/) keep their stored outputs.
nb_execution_mode = "force"
nb_execution_excludepatterns = ["tutorials/*"]
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
# text/markdown outputs (the benchmark tables) are rendered as MyST (tables)
nb_render_markdown_format = "myst"

# Names such as `lower` or `p` are fields of several result types; an
# ambiguous cross-reference inside a docstring resolves to the first.
suppress_warnings = ["ref.python"]

autodoc_default_options = {"members": True, "member-order": "bysource", "undoc-members": False}
autodoc_typehints = "none"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True

html_theme = "sphinx_book_theme"
html_title = f"jaxacct {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
}


# Docstrings are written to be read with help() as much as rendered: where a
# docstring is not valid reStructuredText (after napoleon), it is shown as the
# preformatted text help() shows, instead of failing the -W build.
import io
import re
import time

import docutils.core
import docutils.utils

_RAW = {}
_SPHINX_ROLE = re.compile(r":[\w:]+:`")
_SPHINX_DIRECTIVE = re.compile(r"^(\s*)\.\. [\w:-]+::.*$", re.MULTILINE)


def _keep_raw(app, what, name, obj, options, lines):
  _RAW[(what, name)] = list(lines)


_ROLE_IN_FIELD_NAME = re.compile(r"^\s*:\w+ [^\n]*:\w+:`[^\n]*:(\s|$)", re.MULTILINE)


def _is_clean_rst(text):
  if _ROLE_IN_FIELD_NAME.search(text):   # napoleon made a field of a wrapped line
    return False
  # a role that opens a line reads as a field marker to docutils: keep it one
  text = re.sub(r"^(\s*):[\w:]+:`", r"\1:f: `", text, flags=re.MULTILINE)
  text = _SPHINX_ROLE.sub("`", text)
  text = _SPHINX_DIRECTIVE.sub(r"\1.. container::", text)
  stream = io.StringIO()
  try:
    docutils.core.publish_doctree(
        text, settings_overrides={"warning_stream": stream, "report_level": 2,
                                  "halt_level": 5, "file_insertion_enabled": False})
  except Exception:  # pylint: disable=broad-except
    return False
  return not stream.getvalue().strip()


def _literal_if_invalid(app, what, name, obj, options, lines):
  if _is_clean_rst("\n".join(lines)):
    return
  raw = _RAW.get((what, name), list(lines))
  lines[:] = ["::", ""] + ["   " + ln for ln in raw] + [""]


_T0 = {}


def _read_start(app, docname, source):
  _T0[docname] = time.perf_counter()


def _read_end(app, doctree):
  name = app.env.docname
  if name in _T0:
    app.env.metadata.setdefault(name, {})["read_seconds"] = time.perf_counter() - _T0[name]


def _report(app, exc):
  times = sorted(((v.get("read_seconds", 0.0), k) for k, v in app.env.metadata.items()),
                 reverse=True)
  if os.environ.get("JAXACCT_DOCS_TIMES"):
    for sec, name in times[:15]:
      print(f"{sec:7.2f} s  {name}")


def _skip_field_aliases(app, what, name, obj, skip, options):
  # NamedTuple fields: their "Alias for field number i" adds nothing to the
  # class docstring's field list
  doc = getattr(obj, "__doc__", None) or ""
  if isinstance(doc, str) and doc.startswith("Alias for field number"):
    return True
  return None


# A page links a notebook where the repository holds it, ``../../notebooks/NAME.ipynb``
# from docs/how-to/ (so the link resolves in the Markdown sources too); the site
# links the rendered tutorial, ``../tutorials/NAME.ipynb`` (the copy above).
_NOTEBOOK_LINK = re.compile(r"\]\(((?:\.\./)*)\.\./notebooks/([\w-]+\.ipynb)\)")


def _notebook_links(app, docname, source):
  source[0] = _NOTEBOOK_LINK.sub(r"](\1tutorials/\2)", source[0])


def setup(app):
  app.connect("source-read", _notebook_links)
  app.connect("autodoc-skip-member", _skip_field_aliases)
  app.connect("autodoc-process-docstring", _keep_raw, priority=100)
  app.connect("autodoc-process-docstring", _literal_if_invalid, priority=900)
  app.connect("source-read", _read_start)
  app.connect("doctree-read", _read_end)
  app.connect("build-finished", _report)
