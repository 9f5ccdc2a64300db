"""StorePaths: every file and directory of a data directory, named once."""

from pathlib import Path

from broker_sim.store import QueueType
from broker_sim.store.paths import StorePaths


def named_paths(paths: StorePaths) -> list[Path]:
    """Every path StorePaths names, a queue's index directory of each kind among them."""
    fixed = [getattr(paths, name) for name, value in vars(StorePaths).items() if isinstance(value, property)]
    return fixed + [paths.queue_index(kind, "t", 0) for kind in QueueType]


def test_every_path_is_below_the_data_dir_and_distinct(tmp_path):
    paths = StorePaths(tmp_path / "data")
    named = named_paths(paths)
    assert len(named) == len(set(named)) == 21  # state.json (issue 29) made it 21
    for path in named:
        assert path.is_relative_to(paths.root) and path != paths.root, path
    assert paths.topic_index(QueueType.SIMPLE_CQ, "t") != paths.topic_index(QueueType.BATCH_CQ, "t")
    assert StorePaths(str(tmp_path)) == StorePaths(tmp_path)  # a str or a Path: the same layout
