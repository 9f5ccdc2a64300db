"""Topics made by a first send, as RocketMQ's autoCreateTopicEnable makes them (broker_sim's
default): through our door with the broker's queues and type, through the remoting door with
the 4 queues RocketMQ's producers ask for; ACLs and the per-client limits still decide who may;
a broker that makes none says so in one sentence; TBW102, the topic that stands for them, is the
broker's own."""

import pytest

import broker_sim
from broker_sim.acl import Guard
from broker_sim.broker import Broker
from broker_sim.core import AutoCreateTopics
from broker_sim.core.limits import ClientLimits
from broker_sim.doors.remoting import RemotingOptions
from rmq_spark import Admin, InvalidRequestError, Message, Producer, TopicNotFoundError
from rmq_spark.errors import LimitExceededError, PermissionDeniedError
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from rmq_wire.types import QueueType
from support.sdk import bodies

ACL_FILE = """\
accounts:
  - accessKey: maker
    secretKey: maker-secret
    defaultTopicPerm: DENY
    topicPerms: [fresh-allowed=PUB]
"""


def test_a_first_send_makes_the_topic_with_the_brokers_queues_and_type(tmp_path):
    with broker_sim.embedded(tmp_path, auto_create_topics=AutoCreateTopics(3, QueueType.SIMPLE_CQ)) as endpoint:
        with Producer(endpoint) as producer:
            producer.send(Message("fresh", b"first"))
            producer.send_batch([Message("fresh-batch", b"a"), Message("fresh-batch", b"b")])
        with Admin(endpoint) as admin:
            assert admin.new_topic("yet-another").queue_count == 3
            for name in ("fresh", "fresh-batch", "TBW102"):
                info, _ = admin.describe_topic(name)
                assert (info.queue_count, info.queue_type) == (3, QueueType.SIMPLE_CQ)
        assert bodies({"endpoint": endpoint}, "fresh") == [b"first"]
        assert sorted(bodies({"endpoint": endpoint}, "fresh-batch")) == [b"a", b"b"]
        with Producer(endpoint) as producer, pytest.raises(InvalidRequestError, match="TBW102 stands for the topics"):
            producer.send(Message("TBW102", b"x", queue_id=0))
        with Admin(endpoint) as admin:
            with pytest.raises(InvalidRequestError, match="cannot create topic .TBW102."):
                admin.create_topic("TBW102", 1, "BatchCQ")
            with pytest.raises(InvalidRequestError, match="cannot delete topic .TBW102."):
                admin.delete_topic("TBW102")


def test_a_broker_that_makes_no_topic_on_a_send_says_so_and_keeps_no_tbw102(tmp_path):
    with broker_sim.embedded(tmp_path, auto_create_topics=AutoCreateTopics()) as endpoint:
        Admin(endpoint).describe_topic("TBW102")
    with broker_sim.embedded(tmp_path, auto_create_topics=None) as endpoint:  # turned off: TBW102 goes
        with Admin(endpoint) as admin:
            assert admin.new_topic("missing") is None
            assert "TBW102" not in {t.name for t in admin.list_topics()}
        with Producer(endpoint) as producer, pytest.raises(TopicNotFoundError) as missing:
            producer.send(Message("missing", b"x", queue_id=0))
        assert "topic 'missing' does not exist (this broker creates no topic on a first send)" in str(missing.value)


def test_the_remoting_door_makes_a_topic_with_the_queues_its_producer_asks(tmp_path):
    with Broker(tmp_path, "127.0.0.1", 0, remoting=RemotingOptions(port=0)) as broker:
        name_server = broker.remoting.address
        with Producer(name_server=name_server) as producer:  # RocketMQ's producers ask for 4 (TBW102's route)
            producer.send(Message("made-by-remoting", b"x"))
        info, _ = Admin(name_server=name_server).describe_topic("made-by-remoting")
        assert info.queue_count == 4 and info.queue_type is QueueType.BATCH_CQ
        # A send that does not name TBW102 as its default topic makes none, as RocketMQ's broker does.
        with RemotingConnection(name_server) as connection:
            answer = connection.invoke(RequestCode.SEND_MESSAGE_V2, {
                "a": "g", "b": "not-made", "c": "OTHER", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0, "i": "",
                "j": 0, "k": "false", "m": "false"}, b"x")
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST, answer
        assert Admin(broker.endpoint).new_topic("not-made") is not None  # the broker would make it, for TBW102


def test_acls_and_limits_decide_who_may_make_a_topic(tmp_path):
    (tmp_path / "acl.yml").write_text(ACL_FILE)
    from rmq_spark import Credentials, TransportConfig

    maker = TransportConfig(credentials=Credentials("maker", "maker-secret"), retries=0)
    limits = ClientLimits(max_topics_created_per_client=1)
    with Broker(tmp_path / "data", "127.0.0.1", 0, acl=Guard(tmp_path / "acl.yml"), limits=limits) as broker:
        with Producer(broker.endpoint, transport=maker) as producer:
            producer.send(Message("fresh-allowed", b"x"))  # PUB on it: made
            with pytest.raises(PermissionDeniedError, match="fresh-denied"):
                producer.send(Message("fresh-denied", b"x"))
        assert "fresh-denied" not in {t.name for t in broker.core.list_topics()}
    with Broker(tmp_path / "data2", "127.0.0.1", 0, limits=limits) as broker:
        with Producer(broker.endpoint) as producer:
            producer.send(Message("first-made", b"x"))
            with pytest.raises(LimitExceededError, match="max-topics-created-per-client"):
                producer.send(Message("second-made", b"x"))
