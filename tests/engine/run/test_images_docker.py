"""Image recipes on the engine (tuning/harness/backends/images.py): one harness process checks
its image once (the recipes without building: unit/images/test_images.py)."""

from __future__ import annotations

import pytest

from tuning.harness.backends import engine, images


@pytest.mark.docker
def test_one_harness_process_checks_its_image_once(harness_image, monkeypatch):
    """A bench's later layouts run the image its first one had: sources edited in between (the
    digest changes) rebuild nothing until the next harness command."""
    c = engine.client()
    before = c.images.get(harness_image).id
    logs: list[str] = []
    monkeypatch.setattr(images, "_CHECKED", {})
    images.ensure(c, harness_image, "cpu", log=logs.append)
    assert logs == [f"image: {harness_image} present (base {images.BASE_OFFLINE})"], logs
    monkeypatch.setattr(images, "digest", lambda recipe: "edited-meanwhile")
    images.ensure(c, harness_image, "cpu", log=logs.append)
    assert len(logs) == 1 and c.images.get(harness_image).id == before, logs
