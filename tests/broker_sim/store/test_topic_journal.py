"""The topic table: a change is one line appended to a journal (the snapshot is not rewritten),
replayed after a crash (SIGKILL), a torn last line dropped, compacted into the snapshot, and a
change that cannot be written (a full filesystem) leaves the table as it was."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from broker_sim.store import CreateStatus, StoreError
from broker_sim.store import topics as topics_module
from broker_sim.store.paths import StorePaths
from broker_sim.store.topics import QueueType, TopicConfig, TopicTable
from support.small_disk import mounted

WAIT_S = 60.0


def names(table: TopicTable) -> list[str]:
    return [t.name for t in table.all()]


def open_table(paths: StorePaths) -> TopicTable:
    return TopicTable(paths.topics, paths.topics_journal)


def test_a_change_appends_one_line_and_leaves_the_snapshot_alone(tmp_path):
    paths = StorePaths(tmp_path)
    path = paths.topics
    path.parent.mkdir()
    path.write_text(json.dumps({"topics": [{"name": "old", "queue_count": 2, "queue_type": "SimpleCQ"}]}))
    snapshot = path.read_bytes()
    table = open_table(paths)  # an older broker's file: upgraded in place
    assert table.create("a", 4, "BatchCQ", created_at_offset=77) == (CreateStatus.CREATED, "")
    assert table.delete("old")
    assert path.read_bytes() == snapshot
    lines = paths.topics_journal.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"create": {"name": "a", "queue_count": 4, "queue_type": "BatchCQ", "created_at_offset": 77}},
        {"delete": "old"}]
    table.close()  # folds the journal into the snapshot
    assert json.loads(path.read_text())["topics"] == [
        {"name": "a", "queue_count": 4, "queue_type": "BatchCQ", "created_at_offset": 77}]
    assert paths.topics_journal.read_bytes() == b""
    assert open_table(paths).get("a") == TopicConfig("a", 4, QueueType.BATCH_CQ, 77)


def test_the_journal_is_compacted_when_it_outgrows_the_table(tmp_path, monkeypatch):
    monkeypatch.setattr(topics_module, "MIN_JOURNAL_LINES", 4)
    paths = StorePaths(tmp_path)
    table = open_table(paths)
    for i in range(4):
        table.create(f"t{i}", 1, "SimpleCQ")
    table.delete("t0")
    # five lines, longer than both the minimum and the table: everything is in the snapshot now
    assert paths.topics_journal.read_bytes() == b""
    assert [t["name"] for t in json.loads(paths.topics.read_text())["topics"]] == ["t1", "t2", "t3"]
    table.create("t4", 1, "SimpleCQ")
    assert names(open_table(paths)) == ["t1", "t2", "t3", "t4"]


def test_a_crash_between_the_new_snapshot_and_the_emptied_journal_replays_to_the_same_table(tmp_path):
    paths = StorePaths(tmp_path)
    table = open_table(paths)
    table.create("a", 1, "SimpleCQ")
    table.create("b", 1, "SimpleCQ")
    table.delete("a")
    table.create("a", 2, "BatchCQ", created_at_offset=5)
    journal = paths.topics_journal.read_bytes()
    table.close()
    paths.topics_journal.write_bytes(journal)  # as if the crash came before the truncation
    again = open_table(paths)
    assert again.all() == table.all() == [TopicConfig("a", 2, QueueType.BATCH_CQ, 5),
                                          TopicConfig("b", 1, QueueType.SIMPLE_CQ, 0)]


CREATOR = textwrap.dedent("""
    import sys
    from broker_sim.store.paths import StorePaths
    from broker_sim.store.topics import TopicTable
    paths = StorePaths(sys.argv[1])
    table = TopicTable(paths.topics, paths.topics_journal)
    for i in range(100_000):
        table.create(f"t{i}", 1 + i % 3, "BatchCQ")
        if i % 7 == 0:
            table.delete(f"t{i}")
        print(i, flush=True)  # acknowledged
""")


def test_every_acknowledged_change_survives_sigkill(tmp_path):
    paths = StorePaths(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.Popen([sys.executable, "-c", CREATOR, str(paths.root)], stdout=subprocess.PIPE, text=True,
                               env=env)
    try:
        acknowledged = -1
        for line in process.stdout:  # bounded: the creator stops at 100,000
            acknowledged = int(line)
            if acknowledged >= 1500:  # past a compaction (at 1,024 journal lines)
                break
    finally:
        process.kill()
        process.wait(WAIT_S)
    for line in process.stdout:  # what it acknowledged after the line read last, before the kill
        if line.endswith("\n"):
            acknowledged = int(line)
    process.stdout.close()
    table = open_table(paths)
    expected = {f"t{i}" for i in range(acknowledged + 1) if i % 7}
    have = set(names(table))
    assert expected <= have and len(have - expected) <= 1  # at most the one being made at the kill
    assert table.get("t1500") == TopicConfig("t1500", 1 + 1500 % 3, QueueType.BATCH_CQ)


def test_a_torn_last_line_is_dropped_and_cut_off(tmp_path):
    paths = StorePaths(tmp_path)
    table = open_table(paths)
    table.create("a", 1, "SimpleCQ")
    table.close()
    table = open_table(paths)
    table.create("b", 1, "SimpleCQ")
    journal = paths.topics_journal
    good = journal.read_bytes()
    with open(journal, "ab") as out:
        out.write(b'{"create":{"name":"torn","queue_co')  # a crash in the middle of a write
    again = open_table(paths)
    assert names(again) == ["a", "b"]
    assert journal.read_bytes() == good  # a later line does not follow the torn one
    again.create("c", 1, "SimpleCQ")
    assert names(open_table(paths)) == ["a", "b", "c"]


def test_a_damaged_line_before_good_ones_is_refused_with_its_line_number(tmp_path):
    paths = StorePaths(tmp_path)
    table = open_table(paths)
    for name in ("a", "b", "c"):
        table.create(name, 1, "SimpleCQ")
    journal = paths.topics_journal
    lines = journal.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"name"', b'"n\x00me"')
    journal.write_bytes(b"\n".join(lines))
    with pytest.raises(StoreError, match=r"line 2 of .*topics.journal is damaged .* restore the file"):
        open_table(paths)


def test_a_change_that_cannot_be_written_leaves_the_table_as_it_was(tmp_path):
    with mounted("tmpfs", 1, tmp_path) as fs:
        paths = StorePaths(fs)
        table = open_table(paths)
        table.create("kept", 1, "SimpleCQ")
        filler = fs / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:  # fill the filesystem
            with pytest.raises(OSError):
                for _ in range(4096):
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        with pytest.raises(OSError) as failure:
            for i in range(4096):  # until the journal's last page is full too
                table.create(f"more{i}", 1, "SimpleCQ")
        assert failure.value.errno == errno.ENOSPC
        refused = f"more{i}"
        assert table.get(refused) is None
        filler.unlink()
        assert table.create(refused, 2, "BatchCQ")[0] is CreateStatus.CREATED
        reloaded = open_table(paths)
        assert reloaded.all() == table.all() and reloaded.get(refused).queue_count == 2
