"""Regenerate the report screenshots in docs/ (``python docs/make_screenshots.py``).

Three pages, each at 1400 px and at a phone width (390 px), in headless Chromium:

* ``report-sensors*.png``: ``streamjoin run samples/sensors/sensors.toml --policy kslack --k 100ms --recall 0.95``;
* ``report-3day*.png``: a kslack run over three days of clicks and impressions
  (:func:`make_clicks`: epoch-millisecond integers, keyed by user, minutes of
  disorder, an outage with no data, so some periods fail and some are empty);
* ``tune*.png``: ``streamjoin tune-buffer`` on the 3-day data;
* ``report-3day-periods.png``: the 3-day page with its periods table opened;
* ``compare*.png``: ``streamjoin compare`` on the 3-day data: the job (kslack), the ideal
  operator, the tuned K, a Spark Structured Streaming and a Flink job with a 1-minute watermark.

``python docs/make_screenshots.py compare`` makes only the ``compare*.png`` ones.

Needs ``streamjoin`` and ``chromium`` on PATH.  Work files go to a temporary
directory; only the PNGs are written to docs/.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
DAY_MS = 86_400_000
#: 2024-03-04 00:00 UTC in epoch milliseconds
T0_MS = 1_709_510_400_000

CLICKS_TOML = """\
# three days of impressions and clicks (docs/make_screenshots.py): epoch-ms integers
[run]
policy = "kslack"
k = "1min"
out = "out"

[[stream]]
name = "impressions"
path = "impressions.parquet"
ts = "ts"
arrival = "arrival"
unit = "ms"
window = "10min"
keys = ["user_id"]

[[stream]]
name = "clicks"
path = "clicks.parquet"
ts = "ts"
arrival = "arrival"
unit = "ms"
window = "10min"
keys = ["user_id"]
"""


def _delays(rng: np.random.Generator, t_ms: np.ndarray, stalls: list[tuple[float, float]]) -> np.ndarray:
    """Seconds of network jitter (lognormal, median ~2 s) plus stalls: a tuple generated
    during a stall ``(start_ms, end_ms)`` arrives when it ends."""
    delay = rng.lognormal(np.log(2_000.0), 0.8, t_ms.size)
    for start, end in stalls:
        held = (t_ms >= start) & (t_ms < end)
        delay[held] += end - t_ms[held]
    return delay


def make_clicks(out: Path, seed: int = 16) -> Path:
    """Write ``impressions.parquet``, ``clicks.parquet`` and ``clicks.toml`` into ``out``;
    return the config path.  Diurnal rate, 3 days, a 5-hour outage on day 2."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    span = 3 * DAY_MS
    # impressions: diurnal Poisson process (thinning), ~1.5/s at the daily peak
    cand = np.sort(rng.uniform(0, span, int(1.5 * span / 1000)))
    hour = (cand % DAY_MS) / 3_600_000
    keep = rng.uniform(0, 1, cand.size) < 0.15 + 0.85 * np.sin(np.pi * hour / 24) ** 2
    outage = (cand >= DAY_MS + 2 * 3_600_000) & (cand < DAY_MS + 7 * 3_600_000)  # day 2, 02:00-07:00: no data
    imp_t = cand[keep & ~outage]
    users = rng.zipf(1.3, imp_t.size) % 20_000
    # clicks: 8 % of impressions, 5 s to 5 min later, same user
    clicked = rng.uniform(0, 1, imp_t.size) < 0.08
    click_t = imp_t[clicked] + rng.uniform(5_000, 300_000, int(clicked.sum()))
    click_users = users[clicked]
    # stalls: minutes-long delivery outages, more of them on the clicks link
    def stalls(n):
        s = rng.uniform(0, span, n)
        return [(a, a + rng.uniform(2, 12) * 60_000) for a in s]
    for name, t, u, st in (("impressions", imp_t, users, stalls(6)), ("clicks", click_t, click_users, stalls(30))):
        order = np.argsort(t, kind="stable")
        t, u = t[order], u[order]
        ts = T0_MS + np.round(t).astype(np.int64)
        arrival = ts + np.round(_delays(rng, t, st)).astype(np.int64)
        pq.write_table(pa.table({"user_id": u.astype(np.int64), "ts": ts, "arrival": arrival}), out / f"{name}.parquet")
    (out / "clicks.toml").write_text(CLICKS_TOML)
    return out / "clicks.toml"


def _run(*args: str, quiet: bool = False, cwd: Path | None = None) -> None:
    print("$", " ".join(args), flush=True)
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None, cwd=cwd)


def shoot(page: Path, png: Path, width: int, height: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not on PATH")
    with tempfile.TemporaryDirectory() as profile:
        _run(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri(), quiet=True)
    # palette PNG: a few hundred KB at most (Pillow, when installed: not a streamjoin dependency)
    try:
        from PIL import Image
    except ImportError:
        return
    Image.open(png).convert("RGB").quantize(colors=128).save(png, optimize=True)


def compare_pages(tmp: Path) -> None:
    """``compare.png`` / ``compare-phone.png`` (the 3-day data in ``tmp / "clicks"``)."""
    _run("streamjoin", "compare", "clicks/clicks.toml", "--recall", "0.99", "--out", "compare",
         "--policy", "job", "--policy", "ideal", "--policy", "tuned",
         "--policy", "spark-ss --watermark 1min --trigger 1min", "--policy", "flink --watermark 1min", cwd=tmp)
    shoot(tmp / "compare/compare.html", DOCS / "compare.png", 1400, 1500)
    shoot(tmp / "compare/compare.html", DOCS / "compare-phone.png", 390, 2400)


def main() -> None:
    only = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if only == ["compare"]:
            make_clicks(tmp / "clicks")
            compare_pages(tmp)
            return
        # relative paths from a work directory: the pages show the command line, and the
        # screenshots should not show where they were made
        shutil.copytree(ROOT / "samples/sensors", tmp / "samples/sensors")
        _run("streamjoin", "run", "samples/sensors/sensors.toml", "--policy", "kslack", "--k", "100ms",
             "--recall", "0.95", "--no-results", "--out", "sensors", cwd=tmp)
        make_clicks(tmp / "clicks")
        _run("streamjoin", "run", "clicks/clicks.toml", "--recall", "0.99", "--no-results", "--out", "3day", cwd=tmp)
        _run("streamjoin", "tune-buffer", "clicks/clicks.toml", "--recall", "0.99", "--policy", "kslack",
             "--per-period", "--out", "tune", cwd=tmp)
        for page, name in ((tmp / "sensors/report.html", "report-sensors"), (tmp / "3day/report.html", "report-3day"),
                           (tmp / "tune/tune.html", "tune")):
            shoot(page, DOCS / f"{name}.png", 1400, 2700)
            shoot(page, DOCS / f"{name}-phone.png", 390, 2800)
        # the collapsed periods table, opened (as after a click)
        opened = tmp / "3day/report-open.html"
        opened.write_text((tmp / "3day/report.html").read_text().replace('<details class="periods">',
                                                                        '<details class="periods" open>'))
        shoot(opened, DOCS / "report-3day-periods.png", 1400, 4000)
        compare_pages(tmp)


if __name__ == "__main__":
    main()
