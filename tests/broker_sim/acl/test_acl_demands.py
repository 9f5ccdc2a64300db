"""Every request code of the remoting door, and every method of the gRPC doors, has its demand:
an account granted nothing is refused each one but the name server's open lookups. Reads
around the ACL are closed: a message read by its commitlog offset needs its own topic's SUB
(refused without naming the topic), the broker's configuration and state are for admins."""

from __future__ import annotations

import orjson
import pytest

from broker_sim.acl import Guard
from broker_sim.doors.grpc_acl import DEMANDS as OUR_DEMANDS
from broker_sim.doors.grpc_acl import GrpcAdmission
from broker_sim.doors.remoting.acl import DEMANDS, OPEN_CODES, RemotingAdmission
from broker_sim.doors.rocketmq_v2.acl import DEMANDS as V2_DEMANDS
from rmq_spark import Credentials
from rmq_wire.contract import broker_pb2, pop_pb2, txn_pb2
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2
from support.acl import ACL_FILE, SECRETS

GROUP = "billing"  # the reader's group


def connection(acl_broker, access_key: str) -> RemotingConnection:
    return RemotingConnection(acl_broker.name_server, timeout_s=5,
                              credentials=Credentials(access_key, SECRETS[access_key]))


def sent_offset(acl_broker, topic: str) -> int:
    """The commitlog offset of a message sent to ``topic`` by the writer (its offsetMsgId)."""
    with connection(acl_broker, "writer") as writer:
        answer = writer.invoke(RequestCode.SEND_MESSAGE, {
            "producerGroup": "p", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": 0, "sysFlag": 0, "bornTimestamp": 0, "flag": 0, "properties": "", "reconsumeTimes": 0},
            f"secret of {topic}".encode(), timeout_s=5)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return int(answer.ext_fields["msgId"][-16:], 16)


def full_request(offset: int) -> tuple[dict, bytes]:
    """Header fields and a body that name topic 'orders', group 'billing' and a stored message
    for any request code: whatever a code reads of them, its demand can be judged."""
    fields = {"topic": "orders", "b": "orders", "a": "p", "consumerGroup": GROUP, "group": GROUP, "queueId": 0,
              "e": 0, "offset": offset, "commitOffset": 0, "queueOffset": 0, "timestamp": 0, "key": "k",
              "maxNum": 1, "beginTimestamp": 0, "endTimestamp": 1, "clientID": "c", "producerGroup": "p",
              "maxMsgNums": 1, "invisibleTime": 60000, "pollTime": 0, "bornTime": 0, "initMode": 0,
              "extraInfo": "0 0 0 0 0 b 0 0", "sysFlag": 0, "bornTimestamp": 0, "flag": 0, "properties": "",
              "tranStateTableOffset": 0, "commitLogOffset": offset, "commitOrRollback": 0, "tranId": "t",
              "brokerName": "b", "brokerAddr": "127.0.0.1:1", "clusterName": "c", "brokerId": 0, "namespace": "n"}
    body = orjson.dumps({"consumerDataSet": [{"groupName": GROUP, "subscriptionDataSet": [{"topic": "orders"}]}],
                         "consumerGroup": GROUP, "clientId": "c", "groupName": GROUP,
                         "mqSet": [{"topic": "orders", "brokerName": "b", "queueId": 0}],
                         "acks": [{"c": GROUP, "t": "orders", "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 0, "it": 60000,
                                   "b": "AQ=="}]})
    return fields, body


def test_an_account_granted_nothing_is_refused_every_code_but_the_open_lookups(acl_broker):
    offset = sent_offset(acl_broker, "orders")
    fields, body = full_request(offset)
    answered = {}
    with connection(acl_broker, "stranger") as stranger:
        for code in [*RequestCode, 99_999]:
            answer = stranger.invoke(code, fields, body, timeout_s=5)
            answered[code] = (ResponseCode(answer.code).name, answer.remark)
    wrong = {RequestCode(code).name if code in RequestCode._value2member_map_ else code: outcome
             for code, outcome in answered.items()
             if code not in OPEN_CODES and outcome[0] not in ("NO_PERMISSION", "REQUEST_CODE_NOT_SUPPORTED")}
    assert not wrong, f"served to an account granted nothing: {wrong}"
    assert answered[99_999][0] == "REQUEST_CODE_NOT_SUPPORTED"
    assert all(answered[code][0] != "NO_PERMISSION" for code in OPEN_CODES)


def test_a_message_read_by_its_offset_needs_its_own_topics_sub(acl_broker):
    audit = sent_offset(acl_broker, "audit")  # the reader may not read audit
    orders = sent_offset(acl_broker, "orders")
    with connection(acl_broker, "reader") as reader:
        mine = reader.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": orders}, timeout_s=5)
        assert mine.code == ResponseCode.SUCCESS and b"secret of orders" in mine.body
        # RocketMQ 5 would check the topic the request names; here the record's own is checked.
        for header in ({"offset": audit}, {"offset": audit, "topic": "orders"}):
            refused = reader.invoke(RequestCode.VIEW_MESSAGE_BY_ID, header, timeout_s=5)
            assert refused.code == ResponseCode.NO_PERMISSION and not refused.body
            assert f"the topic of the message at commitlog offset {audit}" in refused.remark
            assert "audit" not in refused.remark
        # send-back copies the record into the group's retry topic, which the group reads
        copied = reader.invoke(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": GROUP, "offset": audit,
                                                                    "delayLevel": 0}, timeout_s=5)
        assert copied.code == ResponseCode.NO_PERMISSION and "audit" not in copied.remark
    with connection(acl_broker, "ops") as ops:
        seen = ops.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": audit}, timeout_s=5)
        assert seen.code == ResponseCode.SUCCESS and b"secret of audit" in seen.body


def test_the_brokers_configuration_and_state_are_for_admins(acl_broker):
    with connection(acl_broker, "reader") as reader:
        for code in (RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_BROKER_RUNTIME_INFO,
                     RequestCode.QUERY_DATA_VERSION):
            refused = reader.invoke(code, {}, timeout_s=5)
            assert refused.code == ResponseCode.NO_PERMISSION and "needs an admin account" in refused.remark
        # a group's consume stats: that group's SUB (and the SUB of the topics named), as RocketMQ
        assert reader.invoke(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP},
                             timeout_s=5).code == ResponseCode.SUCCESS
        other = reader.invoke(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "payroll"}, timeout_s=5)
        assert other.code == ResponseCode.NO_PERMISSION and "group 'payroll'" in other.remark
        audit = reader.invoke(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": "orders;audit"},
                              timeout_s=5)
        assert audit.code == ResponseCode.NO_PERMISSION and "topic 'audit'" in audit.remark
    with connection(acl_broker, "ops") as ops:
        table = orjson.loads(ops.invoke(RequestCode.GET_ALL_TOPIC_CONFIG, {}, timeout_s=5).body)["topicConfigTable"]
        assert {"orders", "audit"} <= set(table)
        assert ops.invoke(RequestCode.GET_BROKER_RUNTIME_INFO, {}, timeout_s=5).code == ResponseCode.SUCCESS


def test_a_remoting_code_served_without_a_demand_stops_the_door(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    guard = Guard(acl_file)
    RemotingAdmission(guard, [*DEMANDS, *OPEN_CODES], lambda _offset: None)  # the door's codes: all listed
    with pytest.raises(ValueError, match="serves GET_BROKER_CONFIG with no ACL demand"):
        RemotingAdmission(guard, [*DEMANDS, RequestCode.GET_BROKER_CONFIG], lambda _offset: None)


SERVICES = [(broker_pb2, "Admin", OUR_DEMANDS), (broker_pb2, "Messaging", OUR_DEMANDS),
            (txn_pb2, "Transactions", OUR_DEMANDS), (pop_pb2, "Pop", OUR_DEMANDS),
            (v2, "MessagingService", V2_DEMANDS)]


@pytest.mark.parametrize("module, service, demands", SERVICES, ids=[s for _m, s, _d in SERVICES])
def test_every_grpc_method_has_its_demand(tmp_path, module, service, demands):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    admission = GrpcAdmission(Guard(acl_file), demands)
    methods = module.DESCRIPTOR.services_by_name[service].methods
    assert [m.name for m in methods if m.name not in demands] == []
    for method in methods:
        admission.guarded(method.name, lambda request, context: None, method.client_streaming)
    with pytest.raises(ValueError, match="the gRPC method Unlisted has no ACL demand"):
        admission.guarded("Unlisted", lambda request, context: None, False)
