"""Who "one client" is: its address, from a remoting connection or a gRPC peer string; an
account, once requests carry one, takes its place (client_key is the one place deciding)."""

from __future__ import annotations

import pytest

from broker_sim.core.limits import ClientLimits, client_key
from broker_sim.doors.grpc_limits import max_streams_per_connection, peer_address


@pytest.mark.parametrize("peer, address", [
    ("ipv4:127.0.0.1:54321", "127.0.0.1"),
    ("ipv6:[::1]:54321", "::1"),
    ("unix:/tmp/broker.sock", "unix:/tmp/broker.sock"),
    ("", ""),
])
def test_the_address_of_a_grpc_peer(peer, address):
    assert peer_address(peer) == address


def test_an_account_names_the_client_before_its_address():
    assert client_key("10.0.0.7") == "10.0.0.7"
    assert client_key("10.0.0.7", account="ak-orders") == "ak-orders"


def test_a_connection_has_room_for_the_refusal_past_the_calls_in_flight():
    limits = ClientLimits(max_requests_in_flight_per_ip=5)
    assert max_streams_per_connection(limits) > limits.max_requests_in_flight_per_ip
