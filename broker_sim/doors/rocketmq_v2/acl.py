"""What each call of RocketMQ 5's MessagingService needs of its account, as RocketMQ's proxy
asks it (DefaultAuthorizationContextBuilder): a topic's PUB to send, the group's and topic's SUB
to receive, ack and keep offsets. Telemetry needs an account (its settings grant nothing: each
call they lead to is checked); transactions are their owner's. Every method has its entry:
GrpcAdmission refuses to serve one without."""

from __future__ import annotations

from broker_sim.acl import Demand, Perm
from broker_sim.doors.grpc_acl import account_only


def _group_and_topic(request) -> list:
    return [Demand.group(request.group.name), Demand.topic(request.topic.name, Perm.SUB)]


def _group_and_queue(request) -> list:
    return [Demand.group(request.group.name), Demand.topic(request.message_queue.topic.name, Perm.SUB)]


def _optional_group(request) -> list:
    return [Demand.group(request.group.name)] if request.group.name else []


DEMANDS = {
    "QueryRoute": lambda r: [Demand.topic(r.topic.name, Perm.PUB | Perm.SUB)],
    "QueryAssignment": _group_and_topic,
    "Heartbeat": _optional_group,
    "NotifyClientTermination": _optional_group,
    "Telemetry": account_only,  # a client-streaming call: checked by its headers
    "SendMessage": lambda r: [Demand.topic(t, Perm.PUB) for t in {m.topic.name for m in r.messages}],
    "EndTransaction": lambda r: [Demand.topic(r.topic.name, Perm.PUB)] if r.topic.name else [],
    "RecallMessage": lambda r: [Demand.topic(r.topic.name, Perm.PUB)],
    "ReceiveMessage": _group_and_queue,
    "AckMessage": _group_and_topic,
    "ChangeInvisibleDuration": _group_and_topic,
    "ForwardMessageToDeadLetterQueue": _group_and_topic,
    "PullMessage": _group_and_queue,
    "QueryOffset": lambda r: [Demand.topic(r.message_queue.topic.name, Perm.SUB)],
    "GetOffset": _group_and_queue,
    "UpdateOffset": _group_and_queue,
}
