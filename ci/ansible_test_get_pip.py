"""Stand-in for ansible-test's pip bootstrap script, for machines that reach PyPI and nothing else.

ansible-test (`sanity --venv`) creates each of its venvs without pip, then bootstraps pip by running
~/.ansible/test/cache/get_pip_<version>.py with the venv's Python and pip-install arguments: the pip
it wants (`pip==24.2`), `--disable-pip-version-check`, `--no-setuptools`, `--no-wheel`. It downloads
that script from ci-files.testing.ansible.com on first use, and where that host is unreachable it
stops ("does not have pip available"). ci/sanity.sh puts this file there instead, and beside it the
pip wheel of that version, downloaded from PyPI.

The real script is get-pip.py: a pip packed into the script, run to install pip. This one does the
same with the wheel beside it (pip runs from its own wheel: pip's documented way to bootstrap), and
installs the wheel file itself, so no index is asked. --no-setuptools and --no-wheel are get-pip's
own options (install pip alone); pip install does that anyway.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main(argv: list[str]) -> int:
    pins = [arg for arg in argv if arg.startswith("pip==")]
    version = pins[0].split("==", 1)[1] if pins else None
    wheel = os.path.join(HERE, f"pip-{version}-py3-none-any.whl")
    if not os.path.isfile(wheel):
        print(
            f"ansible_test_get_pip: no {wheel} (ci/sanity.sh downloads it; pins asked for: {pins})",
            file=sys.stderr,
        )
        return 1
    sys.path.insert(0, wheel)  # the pip that runs is the wheel's
    from pip._internal.cli.main import main as pip_main

    args = [wheel if arg in pins else arg for arg in argv if arg not in GET_PIP_ONLY]
    return pip_main(["install", "--upgrade", "--force-reinstall", *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
