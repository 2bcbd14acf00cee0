"""Fail if any built HTML page loads a resource from another host.

Lists every external URL in ``<script src>``, ``<link href>`` (stylesheets, icons, preloads),
``<img src>``/``srcset``, ``<source>``, ``<iframe>``, ``<video>``/``<audio>``/``<embed>``/
``<object data>`` and CSS ``url(...)``/``@import`` in inline styles and in the built ``.css``
files. Plain ``<a href>`` links (to papers, to scikit-learn) are navigation, not resources, and
are allowed.

    python doc/check_offline.py doc/_build/html

Prints ``page: url`` for each offending resource and exits with status 1 if there is any; prints
how many pages and stylesheets were checked and exits 0 otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

#: (tag, attribute) pairs whose value the browser fetches when the page loads.
RESOURCE_ATTRS = {
    ("script", "src"),
    ("link", "href"),
    ("img", "src"),
    ("img", "srcset"),
    ("source", "src"),
    ("source", "srcset"),
    ("iframe", "src"),
    ("video", "src"),
    ("video", "poster"),
    ("audio", "src"),
    ("embed", "src"),
    ("object", "data"),
    ("input", "src"),
}
#: <link rel=...> values that are navigation metadata, never fetched by the browser.
NON_FETCHING_LINK_RELS = {"canonical", "alternate", "author", "help", "license", "search",
                          "next", "prev", "index", "bookmark", "external", "me"}
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""")


def is_external(url: str) -> bool:
    """True for an absolute or protocol-relative URL to a host other than localhost."""
    url = url.strip()
    if url.startswith("//"):
        url = "http:" + url
    parts = urlsplit(url)
    if parts.scheme in ("", "file", "data", "blob", "about", "javascript", "mailto"):
        return False
    return parts.hostname not in ("localhost", "127.0.0.1", "::1")


class _ResourceParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "link":
            rels = set((attrs.get("rel") or "").lower().split())
            if rels and rels <= NON_FETCHING_LINK_RELS:
                return
        for (t, name) in RESOURCE_ATTRS:
            value = attrs.get(name)
            if t == tag and value:
                candidates = [c.split()[0] for c in value.split(",") if c.strip()] \
                    if name == "srcset" else [value]
                self.urls.extend(candidates)
        if attrs.get("style"):
            self.urls.extend(css_urls(attrs["style"]))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.urls.extend(css_urls(data))


def css_urls(text: str) -> list[str]:
    return [a or b for a, b in CSS_URL.findall(text)]


def external_resources(html_dir) -> dict[str, list[str]]:
    """``{relative path: [external URLs]}`` for every built page and stylesheet that has any."""
    html_dir = Path(html_dir)
    found = {}
    for path in sorted(html_dir.rglob("*")):
        if path.suffix == ".html":
            parser = _ResourceParser()
            parser.feed(path.read_text(encoding="utf-8", errors="replace"))
            urls = parser.urls
        elif path.suffix == ".css":
            urls = css_urls(path.read_text(encoding="utf-8", errors="replace"))
        else:
            continue
        bad = sorted({u for u in urls if is_external(u)})
        if bad:
            found[str(path.relative_to(html_dir))] = bad
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html_dir", nargs="?", default="doc/_build/html")
    args = parser.parse_args(argv)
    html_dir = Path(args.html_dir)
    pages = list(html_dir.rglob("*.html"))
    if not pages:
        print(f"check_offline: no HTML pages under {html_dir}; build the docs first.",
              file=sys.stderr)
        return 2
    found = external_resources(html_dir)
    for page, urls in found.items():
        for url in urls:
            print(f"{page}: {url}")
    n_css = len(list(html_dir.rglob("*.css")))
    if found:
        n = sum(map(len, found.values()))
        print(f"check_offline: {n} external resource(s) on {len(found)} file(s)", file=sys.stderr)
        return 1
    print(f"check_offline: {len(pages)} pages and {n_css} stylesheets load nothing from another "
          "host")
    return 0


if __name__ == "__main__":
    sys.exit(main())
