"""Joiner's test world: local stand-ins for the cloud and the cluster (moto, the Kubernetes API
emulator, a real control plane), the simulator behind ``joiner demo`` and ``joiner simulate``,
and the fault-injection soak.

It lives beside the shipped package, never in the Lambda layer. It may import ``joiner`` and
``infra``; nothing under layers/, functions/ or infra/ imports it (tests/unit/test_import_contracts.py).
It needs the ``local`` extra (moto, kmock, cel-python). Its commands join the ``joiner`` CLI
through the ``joiner.cli`` entry-point group (:mod:`testworld.cli`).
"""
