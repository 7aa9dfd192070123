"""The local Kubernetes API emulator for tests (implementation: :mod:`joiner.local.kube_emulator`,
which ``joiner demo`` imports at run time too)."""

from joiner.local.kube_emulator import *  # noqa: F401,F403
from joiner.local.kube_emulator import __all__  # noqa: F401
