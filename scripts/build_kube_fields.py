"""Generate ``joiner/data/kube-fields.json``: the field names of the Kubernetes built-in kinds a
snapshot may hold, as the API server knows them, for the CLI's strict field validation.

Read from the official Python client's models (the ``kubernetes`` distribution the layer
pins: its ``attribute_map`` and ``openapi_types`` are generated from the API's OpenAPI
document), never at run time. A tree is a JSON object mapping each known field to its own
tree; ``0`` means "anything below" (scalars, free-form objects such as ``fieldsV1``); ``{"*":
tree}`` is a map with arbitrary keys whose values follow ``tree``; a list's items follow the
list field's tree.

Usage (from the repository root)::

    .venv/bin/python scripts/build_kube_fields.py          # writes the file
    .venv/bin/python scripts/build_kube_fields.py --check  # exit 1 when the file is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parents[1] / "layers" / "joiner" / "python" / "joiner" / "data" / "kube-fields.json"

#: (apiVersion, kind) -> the client's model class name.
KINDS = {
    "v1/Pod": "V1Pod",
    "v1/Node": "V1Node",
    "apps/v1/DaemonSet": "V1DaemonSet",
    "policy/v1/PodDisruptionBudget": "V1PodDisruptionBudget",
    "node.k8s.io/v1/RuntimeClass": "V1RuntimeClass",
    "v1/PersistentVolumeClaim": "V1PersistentVolumeClaim",
    "v1/PersistentVolume": "V1PersistentVolume",
    "storage.k8s.io/v1/StorageClass": "V1StorageClass",
    "storage.k8s.io/v1/CSINode": "V1CSINode",
    "meta/v1/ObjectMeta": "V1ObjectMeta",
}

_LIST = re.compile(r"^List\[(.+)\]$", re.IGNORECASE)
_DICT = re.compile(r"^Dict\[str, (.+)\]$", re.IGNORECASE)


def _tree(type_name: str, models: Any, seen: tuple[str, ...]) -> Any:
    if match := _LIST.match(type_name):
        return _tree(match.group(1), models, seen)
    if match := _DICT.match(type_name):
        inner = _tree(match.group(1), models, seen)
        return {"*": inner} if inner != 0 else 0
    model = getattr(models, type_name, None)
    if model is None or not hasattr(model, "attribute_map") or type_name in seen:
        return 0  # scalars, quantities, "object"; a recursive type is not walked twice
    return {
        model.attribute_map[attr]: _tree(kind, models, (*seen, type_name))
        for attr, kind in sorted(model.openapi_types.items(), key=lambda item: model.attribute_map[item[0]])
    }


def build() -> dict[str, Any]:
    import kubernetes
    import kubernetes.client as models

    return {"source": f"kubernetes Python client {kubernetes.__version__} models", "kinds": {key: _tree(name, models, ()) for key, name in KINDS.items()}}


def render() -> str:
    return json.dumps(build(), sort_keys=True, separators=(",", ":")) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the bundled file differs from a fresh build")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT} is stale: run scripts/build_kube_fields.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
