"""The cluster state's image: a cold container restores what a warm one wrote and catches up
from its versions instead of listing, and anything that is not a usable image is refused
(the container then lists, as without one)."""

from __future__ import annotations

import hashlib
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.adapters.blobs import DirectoryBlobs
from joiner.services import cluster_image
from joiner.services.cluster_image import BASE_KEY, CHANGES_KEY, ImageError, ImageWriter, decode, load_image
from joiner.services.cluster_state import ClusterCache
from tests.services.test_cluster_state import LogKube, change, changes, node, pod, view
from tests.support.fakes import FakeBlobs as MemoryBlobs


def cold_cache(blobs: Any, now: list[float]) -> ClusterCache:
    def loader() -> Any:
        loaded = load_image(blobs)
        return None if loaded is None else loaded[0]

    return ClusterCache(clock=lambda: now[0], image_loader=loader)


def test_a_cold_container_restores_the_image_and_catches_up_without_listing(tmp_path: Path) -> None:
    kube, now, blobs = LogKube(history=50), [0.0], DirectoryBlobs(tmp_path)
    for index in range(12):
        kube.write("pods", "Pod", pod(f"p{index}", "n0" if index % 2 else None, 100 * (index + 1)), f"ns/p{index}")
    kube.write("nodes", "Node", node("n0", 8), "n0")
    warm, writer = ClusterCache(clock=lambda: now[0]), ImageWriter()
    view(warm, kube)
    assert writer.write(warm, blobs, now[0]).kind == "base"
    kube.write("pods", "Pod", None, "ns/p1")
    kube.write("pods", "Pod", pod("p9", None, 900), "ns/p9")
    now[0] += 60
    view(warm, kube)
    written = writer.write(warm, blobs, now[0])
    assert written.kind == "changes" and written.objects == 2  # only what changed
    kube.write("nodes", "Node", node("n1", 4), "n1")  # after the image: caught up from its version
    lists = kube.lists
    seen = view(cold_cache(blobs, now), kube)
    assert kube.lists == lists  # nothing listed
    assert seen[:2] == view(ClusterCache(), kube)[:2]
    assert seen[2] == {"pods": "changes", "nodes": "changes"}


def test_without_a_usable_image_a_cold_container_lists() -> None:
    kube, now, blobs = LogKube(history=2), [0.0], MemoryBlobs()
    kube.write("pods", "Pod", pod("a", "n0", 100), "ns/a")
    warm = ClusterCache(clock=lambda: now[0])
    view(warm, kube)
    ImageWriter().write(warm, blobs, now[0])
    for index in range(4):  # past the API server's history: the image's version is gone (410)
        kube.write("pods", "Pod", pod(f"b{index}", None, 100), f"ns/b{index}")
    seen = view(cold_cache(blobs, now), kube)
    assert seen[2]["pods"] == "list" and seen[:2] == view(ClusterCache(), kube)[:2]
    blobs.failing = True  # the store unreachable: listed, no error
    assert view(cold_cache(blobs, now), kube)[:2] == view(ClusterCache(), kube)[:2]


def _framed(classes: bytes | None = None, pods: bytes | None = None, *, damage: bool = False, **header: Any) -> bytes:
    """An image's bytes built by hand: the RuntimeClasses section, then a pods section."""
    parts = [zlib.compress(pickle.dumps({})) if classes is None else classes, zlib.compress(pickle.dumps({})) if pods is None else pods]
    sections: list[dict[str, Any]] = [{"name": "runtimeClasses"}, {"name": "pods", "version": "5", "listedAt": 0.0, "complete": True}]
    offset = 0
    for section, part in zip(sections, parts, strict=True):
        section.update(offset=offset, bytes=len(part), sha256=hashlib.sha256(part).hexdigest())
        offset += len(part)
    fields = {"format": 1, "fingerprint": cluster_image.fingerprint(), "kind": "base", "id": "x", "base": "x", "sequence": 1, "sections": sections}
    fields.update(header)
    payload = b"".join(parts)
    if damage:
        payload = payload[:-1] + bytes([payload[-1] ^ 1])
    return json.dumps(fields).encode() + b"\n" + payload


class _Runs:
    def __reduce__(self) -> Any:
        import os

        return (os.system, ("echo never",))


def _decoded(data: bytes) -> None:
    _, image = decode(data, kind="base")
    for store in image.stores:
        store.load()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no image header"),
        (b"{not json\n", "unreadable image header"),
        (_framed(kind="changes"), "not a format 1 base image"),
        (_framed(fingerprint="other"), "another version"),
        (_framed(sections=[]), "lists no sections"),
        (_framed()[:-1], "size does not match"),
        (_framed(damage=True), "checksum does not match"),
        (_framed(zlib.compress(pickle.dumps(_Runs()))), "which no image may hold"),
        (_framed(pods=zlib.compress(pickle.dumps(_Runs()))), "which no image may hold"),
        (_framed(zlib.compress(pickle.dumps([1]))), "holds a list where it should hold a dict"),
        (_framed(pods=b"not zlib"), "cannot be loaded"),
    ],
)
def test_anything_but_an_image_is_refused_with_one_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(ImageError, match=message):
        _decoded(data)
    # a cold container given it lists instead
    kube, now, blobs = LogKube(), [0.0], MemoryBlobs()
    kube.write("pods", "Pod", pod("a", "n0", 100), "ns/a")
    blobs.objects[BASE_KEY] = data
    seen = view(cold_cache(blobs, now), kube)
    assert seen[2]["pods"] == "list" and seen[:2] == view(ClusterCache(), kube)[:2]


def test_an_image_of_a_huge_expansion_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_image, "MAX_IMAGE_BYTES", 1000)
    with pytest.raises(ImageError, match="decompresses to more than"):
        _decoded(_framed(pods=zlib.compress(b"\0" * 5000)))


def test_changes_of_another_writers_base_are_not_applied() -> None:
    kube, now, blobs = LogKube(history=50), [0.0], MemoryBlobs()
    for index in range(8):
        kube.write("pods", "Pod", pod(f"a{index}", "n0", 100), f"ns/a{index}")
    first, second = ClusterCache(clock=lambda: now[0]), ClusterCache(clock=lambda: now[0])
    first_writer, second_writer = ImageWriter(), ImageWriter()
    view(first, kube)
    first_writer.write(first, blobs, now[0])
    view(second, kube)
    second_writer.write(second, blobs, now[0])  # a second base replaces the first
    kube.write("pods", "Pod", pod("b", None, 100), "ns/b")
    now[0] += 60
    view(first, kube)
    assert first_writer.write(first, blobs, now[0]).kind == "changes"  # against the replaced base
    header, _ = decode(blobs.objects[CHANGES_KEY], kind="changes")
    loaded = load_image(blobs)
    assert loaded is not None and loaded[1]["changes"] is False and header["base"] != loaded[1]["base_id"]
    assert view(cold_cache(blobs, now), kube)[:2] == view(ClusterCache(), kube)[:2]


def test_a_failed_write_makes_the_next_one_complete() -> None:
    kube, now, blobs = LogKube(history=50), [0.0], MemoryBlobs()
    kube.write("pods", "Pod", pod("a", "n0", 100), "ns/a")
    cache, writer = ClusterCache(clock=lambda: now[0]), ImageWriter()
    view(cache, kube)
    writer.write(cache, blobs, now[0])
    blobs.failing = True
    now[0] += 60
    assert writer.write(cache, blobs, now[0]).error
    blobs.failing = False
    now[0] += 60
    assert writer.write(cache, blobs, now[0]).kind == "base"


operations = st.lists(
    st.one_of(
        *changes,
        st.tuples(st.just("read"), st.sampled_from([1.0, 0.5]), st.booleans()),
        st.tuples(st.just("save"), st.booleans(), st.sampled_from([0.0, 30.0, 1000.0])),
        st.tuples(st.just("cold")),
        st.tuples(st.just("restart-writer")),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_a_restored_model_always_equals_a_fresh_list(ops: list[tuple[Any, ...]]) -> None:
    """Whatever was written and when (failed writes, a writer restarted, partial catch-ups
    before a save), a cold container that restores the image and catches up sees the cluster."""
    kube, now, blobs = LogKube(history=8), [0.0], MemoryBlobs()
    warm, writer = ClusterCache(clock=lambda: now[0]), ImageWriter()
    for op in ops:
        if change(kube, op):
            continue
        if op[0] == "read":
            kube.ready_fraction, kube.break_stream = op[1], op[2]
            view(warm, kube)
            kube.ready_fraction, kube.break_stream = 1.0, False
        elif op[0] == "save":
            blobs.failing = op[1]
            now[0] += op[2]
            writer.write(warm, blobs, now[0])
            blobs.failing = False
        elif op[0] == "restart-writer":
            warm, writer = ClusterCache(clock=lambda: now[0]), ImageWriter()
        else:
            assert view(cold_cache(blobs, now), kube)[:2] == view(ClusterCache(), kube)[:2]
    assert view(cold_cache(blobs, now), kube)[:2] == view(ClusterCache(), kube)[:2]


def test_the_model_keeps_its_meaning_across_processes(tmp_path: Path) -> None:
    """Hashes cached in one process (salted string hashes) are not carried into another."""
    import subprocess
    import sys

    kube, blobs = LogKube(), DirectoryBlobs(tmp_path)
    kube.write("pods", "Pod", pod("a", "n0", 250), "ns/a")
    kube.write("nodes", "Node", node("n0", 8), "n0")
    cache = ClusterCache()
    found = cache.read(kube, {}, *_parsers())  # type: ignore[arg-type]
    _ = [hash(entry.pod.requests) for entry in found.pods]  # cache the hashes
    ImageWriter().write(cache, blobs, 0.0)
    script = (
        "import sys; from joiner.adapters.blobs import DirectoryBlobs; from joiner.services.cluster_image import load_image;"
        "from joiner.domain.resources import Resources;"
        f"image, _ = load_image(DirectoryBlobs({str(tmp_path)!r}));"
        "pods = image.store('pods').load();"
        "requests = pods['ns/a'].pod.requests; print(requests in {Resources(dict(requests.items())): 1})"
    )
    root = Path(__file__).resolve().parents[2]
    env = {"PYTHONHASHSEED": "random", "PATH": "", "PYTHONPATH": f"{root / 'layers' / 'joiner' / 'python'}:{root}", "POWERTOOLS_LOG_LEVEL": "ERROR"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "True", out.stdout + out.stderr


def _parsers() -> Any:
    from tests.support.cluster_parsers import node_or_none, pod_or_none

    return pod_or_none, node_or_none


def test_a_restored_store_is_caught_up_even_when_read_as_last_read() -> None:
    """``refresh=False`` means "as this invocation last read it": a store only restored from
    the image was not read yet, so it catches up first."""
    kube, now, blobs = LogKube(history=50), [0.0], MemoryBlobs()
    kube.write("nodes", "Node", node("n0", 8), "n0")
    warm = ClusterCache(clock=lambda: now[0])
    view(warm, kube)
    ImageWriter().write(warm, blobs, now[0])
    kube.write("nodes", "Node", node("n1", 8), "n1")
    cold = cold_cache(blobs, now)
    assert [n.name for n in cold.nodes(kube, _parsers()[1], refresh=False)] == ["n0", "n1"]  # type: ignore[arg-type]
    assert kube.lists == 2  # the warm container's pods and Nodes: the cold one caught up, listing nothing


def test_a_container_reading_only_nodes_decodes_only_the_nodes() -> None:
    """gc reads Nodes and mirrors: the pods' part of the image (most of it) stays undecoded."""
    kube, now, blobs = LogKube(history=50), [0.0], MemoryBlobs()
    kube.write("pods", "Pod", pod("a", "n0", 100), "ns/a")
    kube.write("nodes", "Node", node("n0", 8), "n0")
    warm = ClusterCache(clock=lambda: now[0])
    view(warm, kube)
    ImageWriter().write(warm, blobs, now[0])
    cold = cold_cache(blobs, now)
    cold.nodes(kube, _parsers()[1])  # type: ignore[arg-type]
    assert [resource for resource, _ in cold.restored()] == ["nodes"]
    now[0] += 600  # pods first read long after the image was loaded: listed, not restored
    lists = kube.lists
    assert view(cold, kube)[2]["pods"] == "list" and kube.lists == lists + 1
