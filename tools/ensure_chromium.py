"""Make sure the browser tests have a Chromium: install Debian's where we may (root with apt-get), else say how.

`make test` runs this before the tests, so that its browser tests run instead of being skipped: a machine
without Chromium stops here with the command to install it (or run `make test-fast`, which has no browser
tests). AUTOGRAD_LAB_CHROMIUM names another Chromium or Chrome binary; no browser is ever downloaded.
"""

import os
import shutil
import subprocess
import sys

DEFAULT = "/usr/bin/chromium"  # where Debian's package puts it; tests/browser/conftest.py looks there too

HINTS = {
    "debian": "sudo apt-get install chromium              (Debian; Ubuntu: a Chromium or Chrome .deb)",
    "fedora": "sudo dnf install chromium",
    "darwin": "brew install --cask chromium, then: export AUTOGRAD_LAB_CHROMIUM=/Applications/Chromium.app/"
              "Contents/MacOS/Chromium",
    "win32": "install Chrome, then: set AUTOGRAD_LAB_CHROMIUM=C:\\Program Files\\Google\\Chrome\\Application\\"
             "chrome.exe",
}


def chromium() -> str:
    return os.environ.get("AUTOGRAD_LAB_CHROMIUM", DEFAULT)


def works(binary: str) -> bool:
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return False
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _apt_install() -> bool:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "chromium"]
    if subprocess.run(install, env=env).returncode == 0:
        return True
    return (subprocess.run(["apt-get", "update", "-q"], env=env).returncode == 0
            and subprocess.run(install, env=env).returncode == 0)


def hint() -> str:
    if sys.platform in HINTS:
        return HINTS[sys.platform]
    return HINTS["fedora"] if shutil.which("dnf") else HINTS["debian"]


def main(argv=None) -> int:
    binary = chromium()
    if works(binary):
        return 0
    may_install = (binary == DEFAULT and sys.platform.startswith("linux") and shutil.which("apt-get")
                   and hasattr(os, "geteuid") and os.geteuid() == 0)
    if may_install:
        print("No Chromium for the browser tests: installing Debian's chromium with apt-get (root) ...", flush=True)
        if _apt_install() and works(binary):
            return 0
    print(f"\nmake test drives real JupyterLab in a headless Chromium, and found none at {binary}.\n"
          f"Install it, then run make test again:\n\n    {hint()}\n\n"
          "Or run `make test-fast`: the unit tests and nbval, without the browser and the slow tests.\n",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
