"""Headless Chromium for the HTML report tests: :func:`probe` loads a page and
reports its images, script errors and external resources."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "", shutil.which("chromium-browser") or "")
                 if p and Path(p).exists()), None)

PROBE = """<script>
window.__errs = [];
addEventListener('error', function (e) {
  var t = e.target;
  __errs.push(t && t !== window && t.tagName ? 'resource ' + t.tagName : 'script ' + e.message);
}, true);
['error', 'warn', 'log', 'info'].forEach(function (level) {
  var orig = console[level];
  console[level] = function () { __errs.push('console.' + level + ' ' + Array.prototype.join.call(arguments, ' ')); orig.apply(console, arguments); };
});
addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  var pre = document.createElement('pre');
  pre.id = '__probe';
  pre.textContent = JSON.stringify({images: imgs.length, decoded: ok, errors: __errs,
                                    external: document.querySelectorAll('[src^="http"],[href^="http"]').length});
  document.body.appendChild(pre);
});
</script>"""


def chromium(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp / 'chromium-profile'}", "--enable-logging=stderr", "--v=0",
            "--virtual-time-budget=5000", *extra, url]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def probe(page: Path, tmp: Path) -> dict:
    """Load a copy of ``page`` with :data:`PROBE` in front in headless Chromium:
    images (and how many decoded), errors, external resources."""
    probed = tmp / f"probed-{page.name}"
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    proc = chromium(probed.as_uri(), tmp, "--dump-dom")
    match = re.search(r'<pre id="__probe">(.*?)</pre>', proc.stdout, re.S)
    assert match, proc.stdout[-2000:]
    return json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
