"""The synthetic training set: reproducible from its seed (checked against the sample in fixtures/dataset/),
boxes known exactly, and every epoch serving each train item once."""

import json

import numpy as np
import pytest

from parity.dataset import SAMPLE_DIR, SyntheticDetection, item_checksum


def test_generator_reproduces_the_fixture_sample():
    manifest = json.loads((SAMPLE_DIR / "manifest.json").read_text())
    dataset = SyntheticDetection(manifest["seed"], len(manifest["items"]), 1)
    for entry in manifest["items"]:
        scene = dataset.item(entry["index"])
        assert item_checksum(scene) == entry["sha256"], f"item {entry['index']} is no longer what the fixture holds"
        assert np.array_equal(scene.boxes, np.array(entry["boxes"], np.float32))
        assert scene.labels.tolist() == entry["labels"]


def test_fixture_pictures_show_the_generated_images():
    import matplotlib.pyplot as plt

    dataset = SyntheticDetection(0, 3, 1)
    for index in range(3):
        picture = plt.imread(SAMPLE_DIR / f"item{index}.png")[..., :3].transpose(2, 0, 1)
        assert np.abs(picture - dataset.item(index).image).max() <= 1.0 / 255 + 1e-6


def test_epochs_serve_every_train_item_once_in_a_seeded_order():
    dataset = SyntheticDetection(seed=5, train_size=7, val_size=2)
    first, second = dataset.epoch_batches(0, 2), dataset.epoch_batches(1, 2)
    assert [len(b) for b in first] == [2, 2, 2, 1]
    assert sorted(sum(first, [])) == dataset.train_indices == sorted(sum(second, []))
    assert first != second and first == dataset.epoch_batches(0, 2)
    assert not set(dataset.val_indices) & set(dataset.train_indices)
    images, targets = dataset.batch(first[0])
    assert images.shape == (2, 3, 300, 300) and images.dtype == np.float32
    assert all(1 <= len(b) <= 4 and set(l.tolist()) <= {1, 2, 3} for b, l in targets)


def test_empty_split_is_rejected():
    with pytest.raises(ValueError, match="train_size >= 1 and val_size >= 1, got 0, 2"):
        SyntheticDetection(1, 0, 2)
