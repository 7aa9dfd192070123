"""Generate the bundled offline instance catalog ``joiner/data/catalog-<region>.json.gz``.

Inputs (read only here, never by the package at run time):

* moto's bundled copy of real EC2 ``DescribeInstanceTypes`` records and the per-zone
  ``DescribeInstanceTypeOfferings`` for the region (``moto/ec2/resources/``);
* ``scripts/data/instance-types-supplement.json``: the same facts for the priced types moto
  lacks (p2, p3, g2, g3, g4ad, f1, dl1, i3.metal, cr1, u-*tb1), with the zones of a sibling type;
* a JSON file of on-demand Linux shared-tenancy prices,
  ``{"prices": {"<region>": {"<type>": <USD per hour>}}, "generated_at": ..., "source": ...}``.

Usage (from the repository root)::

    .venv/bin/python scripts/build_catalog.py --prices /work/shared/data/ec2-on-demand-prices.json

Types without an on-demand price, without a zone offering in the region, or without a
Kubernetes architecture (amd64/arm64) are skipped. The output is deterministic: types sorted
by name, keys sorted, gzip timestamp zero, so regenerating from the same inputs yields the
same bytes. See docs/catalog.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "layers" / "joiner" / "python"))
DEFAULT_OUTPUT_DIR = REPO / "layers" / "joiner" / "python" / "joiner" / "data"
DEFAULT_SUPPLEMENT = REPO / "scripts" / "data" / "instance-types-supplement.json"
FORMAT_VERSION = 1


def moto_resources() -> Path:
    import moto.ec2  # dev dependency: only this script needs it

    return Path(moto.ec2.__file__).resolve().parent / "resources"


def load_gzip_json(path: Path) -> Any:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def convert(record: dict[str, Any], zones: list[str], price: float) -> dict[str, Any] | None:
    """One ``DescribeInstanceTypes`` record as the catalog's compact entry, or None to skip
    (the same conversion the runtime applies to a live ``DescribeInstanceTypes`` answer)."""
    from joiner.domain.catalog_build import _info_document, info_from_description

    info = info_from_description(record, zones, price)
    return None if info is None else _info_document(info)


def supplement_record(row: list[Any]) -> dict[str, Any]:
    """A ``DescribeInstanceTypes``-shaped record from one supplement row (the fields the
    catalog reads)."""
    name, vcpus, memory, manufacturer, hypervisor, bare_metal, enis, ipv4, ebs, storage, gpu, usage, _ = row
    record: dict[str, Any] = {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": vcpus},
        "MemoryInfo": {"SizeInMiB": memory},
        "ProcessorInfo": {"Manufacturer": manufacturer, "SupportedArchitectures": ["x86_64"]},
        "Hypervisor": hypervisor,
        "BareMetal": bare_metal,
        "SupportedUsageClasses": list(usage),
        "NetworkInfo": {
            "MaximumNetworkInterfaces": enis,
            "Ipv4AddressesPerInterface": ipv4,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": enis}],
        },
        "EbsInfo": {"EbsOptimizedInfo": {"MaximumBandwidthInMbps": ebs}} if ebs else {},
    }
    if storage:
        record["InstanceStorageInfo"] = {"TotalSizeInGB": storage["gb"], "NvmeSupport": "required" if storage["nvme"] else "unsupported"}
    if gpu:
        record["GpuInfo"] = {
            "Gpus": [{"Count": gpu["count"], "Manufacturer": gpu["manufacturer"], "Name": gpu["name"], "MemoryInfo": {"SizeInMiB": gpu["memoryMiB"]}}]
        }
    return record


def load_supplement(path: Path, zones: dict[str, list[str]]) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Records and zones for the supplement's types (zones: those of each row's ``zonesLike``)."""
    document = json.loads(path.read_text(encoding="utf-8"))
    records: dict[str, dict[str, Any]] = {}
    extra_zones: dict[str, list[str]] = {}
    for row in document["types"]:
        records[row[0]] = supplement_record(row)
        extra_zones[row[0]] = list(zones.get(row[-1], []))
    return records, extra_zones


def build(region: str, resources: Path, prices_path: Path, supplement: Path | None = DEFAULT_SUPPLEMENT) -> tuple[dict[str, Any], dict[str, int]]:
    records = load_gzip_json(resources / "instance_types.json.gz")
    offerings = load_gzip_json(resources / "instance_type_offerings" / "availability-zone" / f"{region}.json.gz")
    prices_doc = json.loads(prices_path.read_text(encoding="utf-8"))
    prices = prices_doc["prices"][region]
    zones: dict[str, list[str]] = defaultdict(list)
    for offering in offerings:
        zones[offering["InstanceType"]].append(offering["Location"])
    if supplement is not None:
        extra_records, extra_zones = load_supplement(supplement, zones)
        for name, record in extra_records.items():
            if name not in records:  # moto's own record wins once it has one
                records[name] = record
                zones[name] = extra_zones[name]
    skipped = {"no price": 0, "not offered in region": 0, "no kubernetes architecture": 0}
    entries = []
    for name in sorted(records):
        if name not in prices:
            skipped["no price"] += 1
            continue
        if not zones.get(name):
            skipped["not offered in region"] += 1
            continue
        entry = convert(records[name], zones[name], float(prices[name]))
        if entry is None:
            skipped["no kubernetes architecture"] += 1
            continue
        entries.append(entry)
    import moto

    document = {
        "format": FORMAT_VERSION,
        "region": region,
        "sources": {
            "instanceTypes": f"moto {moto.__version__} ec2/resources/instance_types.json.gz (EC2 DescribeInstanceTypes)",
            "offerings": f"moto {moto.__version__} ec2/resources/instance_type_offerings/availability-zone/{region}.json.gz",
            "supplement": "scripts/data/instance-types-supplement.json (priced types moto lacks; zones of a sibling type)",
            "networkBandwidth": "joiner/data/ec2-network-bandwidth.json.gz (Karpenter's baseline bandwidth table)",
            "onDemandPrices": f"{prices_doc.get('source', prices_path.name)} ({prices_doc.get('currency', 'USD')} {prices_doc.get('unit', 'per instance-hour')}, generated {prices_doc.get('generated_at', 'unknown')})",
        },
        "instanceTypes": entries,
    }
    return document, skipped


def write(document: dict[str, Any], output: Path) -> int:
    payload = json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as handle:
        handle.write(payload)
    return output.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prices", required=True, type=Path, help="on-demand price JSON ({'prices': {region: {type: price}}})")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--moto-resources", type=Path, default=None, help="moto ec2/resources directory (default: the installed moto's)")
    parser.add_argument("--output", type=Path, default=None, help="output file (default: joiner/data/catalog-<region>.json.gz)")
    args = parser.parse_args(argv)
    output = args.output or DEFAULT_OUTPUT_DIR / f"catalog-{args.region}.json.gz"
    document, skipped = build(args.region, args.moto_resources or moto_resources(), args.prices)
    size = write(document, output)
    summary = {"output": str(output), "bytes": size, "instanceTypes": len(document["instanceTypes"]), "skipped": skipped}
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
