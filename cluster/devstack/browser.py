"""The headless browser the console's tests drive: Debian's Chromium and its WebDriver
(the packages `chromium` and `chromium-driver`), installed with apt-get when missing.

Browsers that download themselves at run time are not used: Debian's build runs
offline once installed, and its chromedriver always matches its chromium.
"""

from __future__ import annotations

from cluster.devstack.packages import apt_install, find_program, require_program

APT_PACKAGES = ("chromium", "chromium-driver")


def ensure_chromium() -> tuple[str, str]:
    """The paths of chromium and chromedriver, installed with apt-get (as root) when
    either is missing; ServicesError says how to install them otherwise."""
    if find_program("chromium") is None or find_program("chromedriver") is None:
        apt_install(list(APT_PACKAGES))
    return require_program("chromium", "chromium"), require_program(
        "chromedriver", "chromium-driver"
    )
