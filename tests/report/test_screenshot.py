"""The plan report renders in a real browser: headless Chromium's screenshot is not blank.

Chromium is a system package (Debian's ``chromium``; ``.ci/run`` installs it where it
runs as root): without it the test is skipped, saying so. ``DPMM_SCREENSHOT_DIR`` keeps
the screenshot there (for a person to look at) instead of in the test's folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from dpmm.cli import main

from ..conftest import example_copy

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
#: The window: the page's header, table and both figures fit in it.
WIDTH, HEIGHT = 1200, 1600


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(f"no headless browser to render the report ({', '.join(BROWSERS)} not on PATH)")


def _screenshot(page: Path, out: Path) -> np.ndarray:
    done = subprocess.run(
        [
            _browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={out}",
            f"--window-size={WIDTH},{HEIGHT}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and out.is_file(), done.stderr[-2000:]
    return imread(out)[:, :, :3]  # RGB in [0, 1]


def test_the_adult_plan_report_renders_in_headless_chromium(tmp_path: Path, capsys) -> None:
    config = example_copy("adult-marginals.yaml", tmp_path)
    text = config.read_text()
    text = text.replace("    k: 1\n", "    k: 1\n    target: {rmse: 3}\n", 1)
    text = text.replace(
        "    by: [sex]\n", "    by: [sex]\n    target: {half_width: 40, confidence: 0.95}\n"
    )
    config.write_text(text)
    page = tmp_path / "plan.html"
    assert main(["plan", str(config), "--report", str(page)]) == 0
    capsys.readouterr()
    folder = Path(os.environ.get("DPMM_SCREENSHOT_DIR") or tmp_path)
    pixels = _screenshot(page, folder / "adult-marginals-plan.png")
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    # Not blank: text, table rules and the figures' lines cover a good part of the window,
    # in more than one colour (the curves), and the figures' images did load.
    ink = np.any(pixels < 0.9, axis=2)
    assert ink.mean() > 0.03, f"only {ink.mean():.2%} of the screenshot is not white"
    colours = np.unique((pixels[ink] * 15).round().astype(int), axis=0)
    assert len(colours) > 20
    lower_half = ink[HEIGHT // 2 :]
    assert lower_half.mean() > 0.02, "the figures below the table did not render"
