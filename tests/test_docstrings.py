"""numpydoc validation of the public API, and documented defaults that match the signatures.

Every public class and function of ``skalign`` (the ``__all__`` of the package and of its public
submodules) and every public method they define is validated with
:func:`numpydoc.validate.validate`.
Methods inherited from scikit-learn are not checked (their docstrings are scikit-learn's); a method
inherited from another skalign class is checked once, under the class that defines it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

numpydoc_validate = pytest.importorskip("numpydoc.validate")

PUBLIC_MODULES = [
    "skalign", "skalign.base", "skalign.cli", "skalign.datasets", "skalign.exceptions",
    "skalign.io", "skalign.manifold", "skalign.metrics", "skalign.parallel", "skalign.utils",
    "skalign.utils.estimator_checks", "skalign.plan", "skalign.encoders",
]

#: numpydoc checks not enforced anywhere, with the reason.
IGNORED_CODES = {
    "ES01",  # no extended summary: one-line summaries are fine for small helpers
    "SA01",  # no "See Also" section: not every function has a useful cross-reference
    "EX01",  # no "Examples" section: estimators have one, small helpers need not
    "RT02",  # "name : type" in Returns is the scikit-learn style this package follows
    "GL08",  # no docstring: only reported for objects without one, which the checks below catch
}



def _defining_name(obj, path):
    # closures made by a factory share one qualname: key them by their public path instead
    return path if "<locals>" in obj.__qualname__ else f"{obj.__module__}.{obj.__qualname__}"


def _public_objects():
    """``(import path, defining name, object)`` of every public class, function and method."""
    seen, found = set(), []
    for mod_name in PUBLIC_MODULES:
        mod = importlib.import_module(mod_name)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not obj.__module__.startswith("skalign"):
                continue  # re-exported from scikit-learn (e.g. ConvergenceWarning)
            key = _defining_name(obj, f"{mod_name}.{name}")
            if key not in seen:
                seen.add(key)
                found.append((f"{mod_name}.{name}", key, obj))
            if not inspect.isclass(obj):
                continue
            for meth_name, member in inspect.getmembers(obj):
                if meth_name.startswith("_"):
                    continue
                func = inspect.getattr_static(obj, meth_name)
                func = getattr(func, "fget", func)  # properties
                func = getattr(func, "fn", func)  # available_if descriptors
                func = getattr(func, "__func__", func)
                if not callable(func) or not getattr(func, "__module__", "").startswith("skalign"):
                    continue  # scikit-learn's own methods
                key = _defining_name(func, f"{mod_name}.{name}.{meth_name}")
                if key not in seen:
                    seen.add(key)
                    found.append((f"{mod_name}.{name}.{meth_name}", key, func))
    return found


OBJECTS = _public_objects()


def test_the_public_api_is_found():
    names = {key for _, key, _ in OBJECTS}
    assert {"skalign._gera.gera.GeRAAligner", "skalign._affine.linear.LinearAligner.fit",
            "skalign.base.BaseAligner.score", "skalign.metrics.top_k_accuracy"} <= names
    assert len(OBJECTS) > 50


@pytest.mark.filterwarnings("ignore:Unknown section")
@pytest.mark.parametrize("path,key", [(p, k) for p, k, _ in OBJECTS],
                         ids=[k for _, k, _ in OBJECTS])
def test_numpydoc_validation(path, key):
    result = numpydoc_validate.validate(path)
    allowed = IGNORED_CODES
    errors = [f"{code}: {msg}" for code, msg in result["errors"] if code not in allowed]
    assert not errors, f"{key} ({result['file']}:{result['file_line']}):\n" + "\n".join(errors)


_DEFAULT = re.compile(r"default\s*=\s*(.+?)\s*$")


def _documented_defaults(obj):
    """``{parameter: default text}`` from the numpydoc Parameters section of ``obj``."""
    from numpydoc.docscrape import ClassDoc, FunctionDoc

    doc = ClassDoc(obj) if inspect.isclass(obj) else FunctionDoc(obj)
    out = {}
    for param in doc["Parameters"]:
        match = _DEFAULT.search(param.type)
        if match:
            for name in param.name.split(","):
                out[name.strip()] = match.group(1)
    return out


def _same_default(text, value):
    try:
        documented = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text == repr(value) or text == str(value)
    if isinstance(value, float) or isinstance(documented, float):
        return isinstance(value, (int, float)) and float(documented) == float(value)
    return documented == value and type(documented) is type(value)


@pytest.mark.filterwarnings("ignore:Unknown section")
@pytest.mark.parametrize("key,obj", [(k, o) for _, k, o in OBJECTS], ids=[k for _, k, _ in OBJECTS])
def test_documented_defaults_match_the_signature(key, obj):
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        pytest.skip("no signature")
    documented = _documented_defaults(obj)
    wrong = []
    for name, text in documented.items():
        param = signature.parameters.get(name)
        if param is None or param.default is inspect.Parameter.empty:
            continue
        if not _same_default(text, param.default):
            wrong.append(f"{name}: documented default={text}, signature default={param.default!r}")
    assert not wrong, f"{key}:\n" + "\n".join(wrong)


def test_the_default_check_catches_a_mismatch():
    """Negative control: a documented default that differs from the signature is caught."""

    def f(a=1.0, b="x", c=None):
        """Do nothing.

        Parameters
        ----------
        a : float, default=2.0
            A.
        b : str, default="x"
            B.
        c : int, default=None
            C.
        """

    documented = _documented_defaults(f)
    signature = inspect.signature(f)
    assert not _same_default(documented["a"], signature.parameters["a"].default)
    assert _same_default(documented["b"], signature.parameters["b"].default)
    assert _same_default(documented["c"], signature.parameters["c"].default)


_USER_GUIDE = Path(__file__).resolve().parents[1] / "doc" / "user_guide"
_READ_MORE = re.compile(r"Read more in the :ref:`User Guide <([\w-]+)>`\.")


def test_every_estimator_links_to_its_user_guide_section():
    """Each public estimator says where to read more, with a label the user guide defines."""
    from skalign.utils import all_estimators

    labels = set()
    for page in _USER_GUIDE.glob("*.rst"):
        labels |= set(re.findall(r"^\.\. _([\w-]+):\s*$", page.read_text(), re.M))
    missing, unknown = [], []
    for name, cls in all_estimators():
        match = _READ_MORE.search(cls.__doc__ or "")
        if match is None:
            missing.append(name)
        elif match.group(1) not in labels:
            unknown.append(f"{name}: {match.group(1)}")
    assert not missing, f"no 'Read more in the :ref:`User Guide <...>`.' line: {missing}"
    assert not unknown, f"labels not defined in doc/user_guide/*.rst: {unknown}"
