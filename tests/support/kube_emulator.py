"""The local Kubernetes API emulator for tests (implementation: :mod:`testworld.kube_emulator`,
which ``joiner demo`` imports at run time too)."""

from testworld.kube_emulator import *  # noqa: F401,F403
from testworld.kube_emulator import __all__  # noqa: F401
