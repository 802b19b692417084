"""The `forge-store` binary for the measurement scripts beside this file."""
import os
import shutil
import sys


def binary(given=None):
    """`given`, else target/{release,debug}/forge-store of this checkout, else PATH."""
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    for kind in ("release", "debug"):
        p = os.path.join(here, "..", "target", kind, "forge-store")
        if os.path.exists(p):
            return p
    found = shutil.which("forge-store")
    if not found:
        sys.exit("forge-store not found: cargo build -p forge-store-cli")
    return found
