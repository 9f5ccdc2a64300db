"""peers.fetch's housekeeping: a new cache of the peers removes the other versions' caches,
nothing else in the cache's folder."""

from peers.fetch import _forget_others


def test_a_new_cache_removes_the_caches_of_other_versions_only(tmp_path):
    names = ["9f30df97a8e279e6", "66b9b6658ec8566d", "rocketmq-python-client-5.1.2", "fetching-abc", "0123456789abcdef"]
    for name in names:
        (tmp_path / name).mkdir()
        if name != "0123456789abcdef":  # a cache still being moved in: not complete
            (tmp_path / name / ".complete").touch()
    _forget_others(tmp_path / "9f30df97a8e279e6")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "0123456789abcdef", "9f30df97a8e279e6", "fetching-abc", "rocketmq-python-client-5.1.2"]
