"""doc/check_offline.py and doc/check_browser.py catch what they are meant to catch."""

import importlib.util
import shutil
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "doc"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, DOC / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAGE = """<!doctype html><html><head>
<link rel="stylesheet" href="_static/local.css">
<link rel="canonical" href="https://skalign.example/index.html">
{head}
</head><body><p>Formula: <span class="math notranslate nohighlight">\\(A_X\\)</span></p>
<a href="https://arxiv.org/abs/2406.15057">a paper</a>{body}</body></html>"""


def _site(tmp_path, head="", body="", css=""):
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "local.css").write_text(css)
    (tmp_path / "index.html").write_text(PAGE.format(head=head, body=body))
    return tmp_path


def test_check_offline_lists_external_resources_only(tmp_path):
    check = _load("check_offline")
    site = _site(
        tmp_path,
        head='<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>'
             '<link href="//cdn.datatables.net/x.css" rel="stylesheet">',
        body='<img src="https://example.org/logo.png"><img src="_images/ok.png">',
        css='@import "https://fonts.googleapis.com/css?family=Lato"; a {background: url(x.png)}',
    )
    found = check.external_resources(site)
    assert found == {
        "_static/local.css": ["https://fonts.googleapis.com/css?family=Lato"],
        "index.html": ["//cdn.datatables.net/x.css",
                       "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js",
                       "https://example.org/logo.png"],
    }  # the <a href> paper link and the canonical <link> are not resources
    assert check.main([str(site)]) == 1


def test_check_offline_passes_a_local_site(tmp_path):
    assert _load("check_offline").main([str(_site(tmp_path))]) == 0


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_check_browser_fails_on_raw_math_and_external_requests(tmp_path, capsys, monkeypatch):
    pytest.importorskip("playwright")
    check = _load("check_browser")
    monkeypatch.setattr(check, "PAGES", [("index", ["index.html"])])
    site = _site(tmp_path, head='<script src="https://cdn.example.org/mathjax.js"></script>')
    failures = check.check(site, shutil.which("chromium"), tmp_path / "shots")
    out = capsys.readouterr().out
    assert any("raw math delimiters" in f for f in failures)
    assert any("MathJax did not load" in f for f in failures)
    assert "blocked external request: https://cdn.example.org/mathjax.js" in out
    assert (tmp_path / "shots" / "index.png").stat().st_size > 0
