"""Screenshot of report.html in headless Chromium: `python benchmarks/report_screenshot.py
[SCENARIO] [--out docs/report-gpt2-small-4gpu.png]`

Writes the scenario's report folder into a temporary directory, opens report.html from disk with
Debian's Chromium driven by playwright (no browser download: `executable_path`), waits for the
plotly charts, prints the console errors and network requests (both must be none) and saves a
full-page PNG.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default=os.path.relpath(ROOT / "scenarios" / "gpt2-small-4gpu.yaml"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "report-gpt2-small-4gpu.png"))
    ap.add_argument("--browser", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from pipesim.cli import main as pipesim
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "report"
        if pipesim(["simulate", args.scenario, "--out", str(folder)]) != 0:
            return 1
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.browser, args=FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors, requests = [], []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto((folder / "report.html").as_uri(), timeout=300_000)
            page.wait_for_selector("#fig-ranks .main-svg", timeout=300_000)
            page.screenshot(path=args.out, full_page=True)
            browser.close()
    print(f"console errors: {len(errors)} {errors[:3]}")
    print(f"network requests: {len([u for u in requests if not u.startswith('file:')])}")
    print(f"wrote {args.out}")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
