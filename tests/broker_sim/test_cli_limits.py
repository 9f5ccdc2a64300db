"""rmq-broker-sim's flags for the per-client limits: one per ClientLimits field, named after it,
with units in their names; a bad value stops the CLI with a sentence naming the flag."""

from __future__ import annotations

import dataclasses

import pytest

from broker_sim.cli import limits_of, main, parser
from broker_sim.core.limits import ClientLimits
from support.paths import REPO_ROOT


def test_every_limit_has_its_flag_and_the_defaults_are_the_settings_defaults():
    assert limits_of(parser().parse_args([])) == ClientLimits()
    help_text = parser().format_help()
    for field in dataclasses.fields(ClientLimits):
        assert "--" + field.name.replace("_", "-") in help_text


def test_flags_set_the_limits_with_units():
    args = parser().parse_args(["--max-connections-per-ip", "3", "--max-buffered-bytes-per-connection", "8m",
                                "--slow-reader-timeout-s", "2.5", "--max-topics", "7"])
    limits = limits_of(args)
    assert (limits.max_connections_per_ip, limits.max_buffered_bytes_per_connection, limits.slow_reader_timeout_s,
            limits.max_topics) == (3, 8 << 20, 2.5, 7)


@pytest.mark.parametrize("args, expected", [
    (["--max-requests-in-flight-per-ip", "0"], "max_requests_in_flight_per_ip=0: give a positive number, at most "
                                               "4,611,686,018,427,387,904 (--max-requests-in-flight-per-ip)"),
    (["--write-buffer-high-bytes", "128m"], "--write-buffer-high-bytes 134217728 is above "
                                            "--max-buffered-bytes-per-connection"),
    # issue 44: the message named the wrong flag; inf, a negative skew and a budget past the machine's
    # memory were taken silently; a --data-dir naming a file was a traceback
    (["--write-buffer-low-bytes", "8m"], "--write-buffer-low-bytes 8388608 is above --write-buffer-high-bytes "
                                         "4194304"),
    (["--idle-connection-timeout-s", "inf"], "idle_connection_timeout_s=inf: give a positive number"),
    (["--acl-clock-skew-s", "-1"], "--acl-clock-skew-s: '-1' is not a whole number of at least 0"),
    (["--memory-budget", "99999999999999999999999"], "memory_budget_bytes=99999999999999999999999: give a positive "
                                                     "number, at most"),
    (["--memory-budget", "1000000g"], "--memory-budget 1000000g is more than this machine's memory"),
])
def test_a_bad_limit_stops_the_cli_with_a_sentence(tmp_path, capsys, args, expected):
    with pytest.raises(SystemExit) as stopped:
        main(["--data-dir", str(tmp_path / "data"), *args])
    assert stopped.value.code == 2 and expected in capsys.readouterr().err


def test_a_data_dir_that_is_a_file_stops_the_cli_with_a_sentence(tmp_path, capsys):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(SystemExit) as stopped:
        main(["--data-dir", str(tmp_path / "file")])
    assert stopped.value.code == 2
    assert "--data-dir " + str(tmp_path / "file") + ": that is a file, not a directory" in capsys.readouterr().err


def test_the_help_names_each_broker_conf_key_once_and_no_file_that_is_not_there():
    import re

    text = parser().format_help()
    tags = re.findall(r"\[broker\.conf:\s+(\w+)", text)
    assert len(tags) == len(set(tags)), tags
    root = REPO_ROOT
    for named in re.findall(r"docs/[\w.-]+\.md", " ".join(text.split())):
        assert (root / named).is_file(), named
