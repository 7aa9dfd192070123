"""Generate ``joiner/data/ec2-pod-eni.json.gz``: per instance type, the branch network
interfaces security groups for pods can use (the ``vpc.amazonaws.com/pod-eni`` extended
resource the VPC resource controller advertises).

EC2 does not describe branch interface limits; Karpenter's AWS provider keeps them in a
generated table, ``pkg/providers/instancetype/zz_generated.vpclimits.go``, and advertises
``BranchInterface`` for every type whose ``IsTrunkingCompatible`` is true (0 otherwise). This
script copies only those two facts out of that file.

Usage (from the repository root, with a checkout of aws/karpenter-provider-aws)::

    git -C <karpenter-provider-aws> show HEAD:pkg/providers/instancetype/zz_generated.vpclimits.go > /tmp/vpclimits.go
    .venv/bin/python scripts/build_pod_eni_limits.py /tmp/vpclimits.go --revision <commit>

The output is deterministic (sorted keys, gzip timestamp zero).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "layers" / "joiner" / "python" / "joiner" / "data" / "ec2-pod-eni.json.gz"
_ENTRY = re.compile(r'^\t"(?P<name>[a-z0-9.\-]+)": \{(?P<body>.*?)^\t\},', re.M | re.S)
_FIELD = re.compile(r"^\t\t(?P<key>IsTrunkingCompatible|BranchInterface):\s+(?P<value>\S+),", re.M)


def parse(source: str) -> dict[str, int]:
    """Branch interfaces per trunking-compatible type with at least one."""
    out: dict[str, int] = {}
    for match in _ENTRY.finditer(source):
        fields = {m["key"]: m["value"] for m in _FIELD.finditer(match["body"])}
        if fields.get("IsTrunkingCompatible") == "true" and int(fields.get("BranchInterface", "0")) > 0:
            out[match["name"]] = int(fields["BranchInterface"])
    return dict(sorted(out.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vpclimits", type=Path, help="Karpenter's zz_generated.vpclimits.go")
    parser.add_argument("--revision", required=True, help="the aws/karpenter-provider-aws commit it was taken from")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    text = args.vpclimits.read_text(encoding="utf-8")
    generated = re.search(r"This file was generated at (\S+)", text)
    table = parse(text)
    if not table:
        print("no trunking-compatible type found: is this zz_generated.vpclimits.go?", file=sys.stderr)
        return 1
    document = {
        "branchInterfaces": table,
        "source": (
            f"aws/karpenter-provider-aws pkg/providers/instancetype/zz_generated.vpclimits.go at {args.revision}"
            f"{' (generated ' + generated.group(1) + ')' if generated else ''}: BranchInterface of the "
            "IsTrunkingCompatible types; scripts/build_pod_eni_limits.py"
        ),
    }
    payload = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    args.output.write_bytes(gzip.compress(payload, mtime=0))
    print(json.dumps({"output": str(args.output), "types": len(table), "bytes": args.output.stat().st_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
