"""rmq-broker-sim's flags for the per-client limits: one per ClientLimits field, named after it,
with units in their names; a bad value stops the CLI with a sentence naming the flag."""

from __future__ import annotations

import dataclasses

import pytest

from broker_sim.cli import limits_of, main, parser
from broker_sim.core.limits import ClientLimits


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
    (["--max-requests-in-flight-per-ip", "0"], "max_requests_in_flight_per_ip=0: give a positive number "
                                               "(--max-requests-in-flight-per-ip)"),
    (["--write-buffer-high-bytes", "128m"], "raise --max-buffered-bytes-per-connection"),
])
def test_a_bad_limit_stops_the_cli_with_a_sentence(tmp_path, capsys, args, expected):
    with pytest.raises(SystemExit) as stopped:
        main(["--data-dir", str(tmp_path / "data"), *args])
    assert stopped.value.code == 2 and expected in capsys.readouterr().err
