"""Sphinx configuration for skalign's documentation (offline build, warnings are errors)."""

import importlib.util
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, os.path.abspath(".."))
os.environ.setdefault("MPLBACKEND", "Agg")
warnings.filterwarnings("ignore", category=UserWarning, message="Matplotlib is currently using agg")

import skalign  # noqa: E402

project = "skalign"
author = "skalign developers"
copyright = "2026, skalign developers"
release = skalign.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",  # with a local MathJax copy, see mathjax_path below
    "sphinx.ext.doctest",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]
# Intersphinx needs the internet; opt in with SKALIGN_DOCS_INTERSPHINX=1 so the offline -W build
# passes.
if os.environ.get("SKALIGN_DOCS_INTERSPHINX") == "1":
    extensions.append("sphinx.ext.intersphinx")
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "sklearn": ("https://scikit-learn.org/stable", None),
        "torch": ("https://pytorch.org/docs/stable", None),
    }

templates_path = ["_templates"]
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py", "**/*.codeobj.json"]
autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": True}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
default_role = "literal"
suppress_warnings = ["config.cache"]

html_theme = "pydata_sphinx_theme"
html_title = "skalign"

# MathJax 3 from the sphinx-mathjax-offline wheel (a docs extra) is copied into _static/mathjax, so
# formulas render with no CDN; doc/check_offline.py and doc/check_browser.py check this in CI.
def _mathjax_static_dir():
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "The documentation needs sphinx-mathjax-offline (MathJax without a CDN); install the "
            "docs extra: .venv/bin/python -m pip install -c ci/constraints.txt -e '.[docs]'"
        )
    return str(Path(spec.origin).parent / "static")


html_static_path = [_mathjax_static_dir()]  # provides _static/mathjax/
mathjax_path = "mathjax/tex-chtml.js"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "abort_on_example_error": True,
    "backreferences_dir": "generated/backreferences",
    "doc_module": ("skalign",),
    "remove_config_comments": True,
    "plot_gallery": "True",
    "download_all_examples": False,
    # The timing pages load jQuery, DataTables and Bootstrap from CDNs; the docs stay offline.
    "write_computation_times": False,
}

# scikit-learn's metadata-routing and set_output methods are inherited by every estimator; their
# docstrings cross-reference scikit-learn's own user guide, which an offline build cannot resolve.
# They are described once in the data-contract page instead of on every class page.
_SKLEARN_PLUMBING = {"get_metadata_routing", "set_output"}


def _skip_sklearn_plumbing(app, what, name, obj, skip, options):
    if name in _SKLEARN_PLUMBING or (name.startswith("set_") and name.endswith("_request")):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_sklearn_plumbing)
    # :fig:`137 <bench_translate:cli_s>`: a figure checked against benchmarks/results (figures.py)
    sys.path.insert(0, os.path.dirname(__file__))
    from figures import fig_role

    app.add_role("fig", fig_role)
