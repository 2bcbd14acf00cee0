"""Open built documentation pages in headless Chromium and check they work offline.

Serves ``doc/_build/html`` on a local HTTP server and loads, with Playwright driving the system
Chromium (``--chromium``, default ``/usr/bin/chromium``; Playwright's own browser download is
never used), the index, a user-guide page with math, an API page and a gallery page. For each page
it checks that

* every formula rendered: MathJax finished, there is one ``mjx-container`` per formula and no raw
  ``\\(``, ``\\)``, ``\\[`` or ``\\]`` is left in the visible text (code blocks excluded);
* every image loaded (``complete`` and ``naturalWidth > 0``);
* no request left the machine: every request to a host other than the local server is aborted
  and reported;
* no uncaught JavaScript error occurred.

A full-page screenshot of each page is saved under ``--screenshots``
(default ``doc/_build/screenshots/``). Exits 1 on any failure.

    python doc/check_browser.py doc/_build/html --chromium /usr/bin/chromium
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

#: Flags for a headless Chromium on a machine with a closed network, run as root in CI.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
]

#: The pages checked: (label, candidate paths relative to the HTML root, first existing wins).
PAGES = [
    ("index", ["index.html"]),
    ("user-guide-math", ["user_guide/irp.html", "user_guide/ensemble.html",
                         "user_guide/baselines.html"]),
    ("api", ["generated/skalign.InverseRelativeProjector.html",
             "api/generated/skalign.InverseRelativeProjector.html",
             "generated/skalign.ProcrustesAligner.html"]),
    ("gallery", ["auto_examples/plot_baselines_digits.html",
                 "auto_examples/plot_irp_sensitivity.html"]),
]

_VISIBLE_TEXT_JS = """() => {
    const body = document.body.cloneNode(true);
    body.querySelectorAll('pre, code, script, style, noscript, mjx-container, .highlight')
        .forEach(e => e.remove());
    return body.innerText;
}"""

_IMAGES_JS = """async () => {
    const imgs = [...document.images];
    for (const img of imgs) { img.loading = 'eager'; }
    await Promise.all(imgs.map(img => img.decode().catch(() => null)));
    return imgs.map(img => ({src: img.currentSrc || img.src, complete: img.complete,
                             width: img.naturalWidth}));
}"""

_MATH_JS = """async () => {
    const formulas = document.querySelectorAll('span.math, div.math').length;
    if (!formulas) { return {formulas: 0, rendered: 0, mathjax: !!window.MathJax}; }
    const started = Date.now();
    while (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
        if (Date.now() - started > 10000) { return {formulas, rendered: 0, mathjax: false}; }
        await new Promise(r => setTimeout(r, 50));
    }
    await MathJax.startup.promise;
    return {formulas, rendered: document.querySelectorAll('mjx-container').length,
            mathjax: true, version: MathJax.version};
}"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory):
    """Start a threaded HTTP server for ``directory`` on a free localhost port."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def pick_pages(html_dir):
    chosen = []
    for label, candidates in PAGES:
        path = next((c for c in candidates if (html_dir / c).is_file()), None)
        if path is None:
            raise SystemExit(f"check_browser: none of {candidates} was built under {html_dir}")
        chosen.append((label, path))
    return chosen


def check(html_dir, chromium, screenshots):
    from playwright.sync_api import sync_playwright

    html_dir, screenshots = Path(html_dir), Path(screenshots)
    screenshots.mkdir(parents=True, exist_ok=True)
    server = serve(html_dir)
    host, port = server.server_address[:2]
    base = f"http://{host}:{port}/"
    external, failures = [], []

    def route(route, request):
        parts = urlsplit(request.url)
        if parts.scheme in ("data", "blob") or (parts.hostname == host and parts.port == port):
            route.continue_()
        else:
            external.append(request.url)
            route.abort("blockedbyclient")

    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True,
                                        args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.route("**/*", route)
            for label, path in pick_pages(html_dir):
                page = context.new_page()
                errors, local_requests = [], []
                page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
                page.on("request", lambda req, seen=local_requests: seen.append(req.url))
                page.goto(base + path, wait_until="load")
                math = page.evaluate(_MATH_JS)
                images = page.evaluate(_IMAGES_JS)
                page.wait_for_load_state("networkidle")
                text = page.evaluate(_VISIBLE_TEXT_JS)
                shot = screenshots / f"{label}.png"
                page.screenshot(path=str(shot), full_page=True)
                problems = []
                raw = [d for d in ("\\(", "\\)", "\\[", "\\]") if d in text]
                if raw:
                    problems.append(f"raw math delimiters {raw} left in the visible text")
                if math["formulas"] and not math["mathjax"]:
                    problems.append("MathJax did not load")
                if math["rendered"] < math["formulas"]:
                    problems.append(f"{math['rendered']} of {math['formulas']} formulas rendered")
                if label == "user-guide-math" and not math["formulas"]:
                    problems.append("no formula on the page chosen to test math rendering")
                broken = [i["src"] for i in images if not (i["complete"] and i["width"] > 0)]
                if broken:
                    problems.append(f"images not loaded: {broken}")
                if errors:
                    problems.append(f"JavaScript errors: {errors}")
                status = "FAIL" if problems else "ok"
                print(f"{status:4} {label:16} {path}: {math['formulas']} formulas, "
                      f"{math['rendered']} rendered by MathJax {math.get('version', '-')}, "
                      f"{len(images)} images loaded, {len(local_requests)} requests; "
                      f"screenshot {shot}")
                for problem in problems:
                    print(f"     {problem}")
                failures.extend(f"{path}: {problem}" for problem in problems)
                page.close()
            browser.close()
    finally:
        server.shutdown()
    if external:
        failures.append(f"{len(external)} request(s) to other hosts were blocked")
        for url in sorted(set(external)):
            print(f"     blocked external request: {url}")
    return failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html_dir", nargs="?", default="doc/_build/html")
    parser.add_argument("--chromium", default="/usr/bin/chromium",
                        help="the system Chromium executable (default: /usr/bin/chromium)")
    parser.add_argument("--screenshots", default=None,
                        help="folder for the screenshots (default: <html_dir>/../screenshots)")
    args = parser.parse_args(argv)
    html_dir = Path(args.html_dir)
    if not (html_dir / "index.html").is_file():
        print(f"check_browser: no index.html under {html_dir}; build the docs first.",
              file=sys.stderr)
        return 2
    if not Path(args.chromium).is_file():
        print(f"check_browser: no Chromium at {args.chromium}", file=sys.stderr)
        return 2
    screenshots = args.screenshots or html_dir.parent / "screenshots"
    failures = check(html_dir, args.chromium, screenshots)
    if failures:
        print(f"check_browser: {len(failures)} problem(s)", file=sys.stderr)
        return 1
    print("check_browser: all pages rendered offline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
