"""apache.rocketmq.v2.MessagingService over one BrokerCore: each call translated into core calls
and back, as the RocketMQ proxy's activities answer them (RouteActivity, SendMessageActivity,
ReceiveMessageActivity, AckMessageActivity, ClientActivity, TransactionActivity).

Outcomes travel as the protocol's Status in each answer (gRPC's own status stays OK), each with
a sentence a user can act on. PullMessage, GetOffset, UpdateOffset and QueryOffset, which the
real proxy leaves unimplemented, are served here so that a v2 client can replay by offset.
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker_sim.core import (
    PERM_READ,
    PERM_WRITE,
    BrokerCore,
    BrokerFault,
    RangeStatus,
    Reason,
    SendRequest,
    parse_tag_filter,
    refused,
)
from broker_sim.doors import BROKER_NAME
from broker_sim.doors.checks import DEFAULT_CHECKS, CheckSettings, TransactionChecks
from broker_sim.doors.grpc_acl import caller
from broker_sim.doors.grpc_common import RefusedRequest, answering, peer_host
from broker_sim.doors.hold import PullHold
from broker_sim.doors.rocketmq_v2 import receipts
from broker_sim.doors.rocketmq_v2.clients import Clients, Session, ask_client, merged_settings
from broker_sim.doors.rocketmq_v2.errors import OK, V2Refusal, refusal_status, status
from broker_sim.doors.rocketmq_v2.messages import (
    ACCEPTED_TYPES,
    QueueChooser,
    batch_content,
    incoming,
    outgoing,
    single_request,
    timestamp,
)
from rmq_wire.record import check_immunity_s
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2
from rmq_wire.rocketmq_v2 import messaging_pb2_grpc as v2_grpc
from rmq_wire.types import QueueType

log = logging.getLogger(__name__)

MIN_INVISIBLE_MS = 10_000  # minInvisibleTimeMillsForRecv
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # maxInvisibleTimeMills
DEFAULT_INVISIBLE_MS = 60_000  # defaultInvisibleTimeMills, for auto-renewed receives
MIN_LONG_POLLING_MS, MAX_LONG_POLLING_MS = 5_000, 20_000
MAX_RECEIVE_BATCH = 32
PULL_MAX_BYTES = 4 << 20

def answered(response_type):
    """A unary handler whose refusals become the response's status."""
    return answering(lambda error: response_type(status=refusal_status(error)))


def client_id_of(context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return value
    return ""


def _permission(perm: int) -> int:
    """A topic's PermName bits as the protocol's Permission (the proxy's convertToPermission)."""
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return v2.READ_WRITE
    return v2.READ if readable else v2.WRITE if writable else v2.NONE


def _name(resource, what: str, code: int) -> str:
    name = resource.name.strip()
    if not name:
        raise V2Refusal(code, f"the {what} name is empty: name the {what}")
    return name


class MessagingService(v2_grpc.MessagingServiceServicer):
    """The door. ``address`` ("ip", port) is where clients reach it: routes name it."""

    def __init__(self, core: BrokerCore, address: tuple[str, int], loop, *, broker_name: str = BROKER_NAME,
                 checks: CheckSettings = DEFAULT_CHECKS):
        self.core = core
        self.address = address
        self.broker_name = broker_name  # how routes name this broker
        self.clients = Clients()
        self.checks = TransactionChecks(core, checks)
        self.inner = receipts.InnerReceipts()
        self.queues = QueueChooser()
        self.hold = PullHold(loop, core.limits.max_parked_pulls, core.indexed_offset)
        core.add_arrival_listener(self.hold.arrived)

    @property
    def max_body_bytes(self) -> int:
        return self.core.max_message_bytes

    def start(self) -> None:
        """Start checking transactions (at least every second, so that each is checked near
        its due time)."""
        period_ms = max(50, min(self.checks.settings.interval_ms, 1000))
        self.checks.start(self._ask, "rmq-v2-txn-check", period_ms)

    def stop(self) -> None:
        self.checks.stop()

    def _ask(self, transaction, half: bytes) -> bool:
        return ask_client(self.clients, transaction, half)

    # --- routes and clients ----------------------------------------------------------------

    def _broker(self) -> v2.Broker:
        host, port = self.address
        return v2.Broker(name=self.broker_name, id=0, endpoints=v2.Endpoints(
            scheme=v2.IPv4, addresses=[v2.Address(host=host, port=port)]))

    @answered(v2.QueryRouteResponse)
    def QueryRoute(self, request, context):
        config = self.core.topic(_name(request.topic, "topic", v2.ILLEGAL_TOPIC))
        broker = self._broker()
        # The proxy's genMessageQueueFromQueueData with one count for reads and writes: every queue
        # READ_WRITE, READ or WRITE as the topic's perm says.
        permission = _permission(config.perm)
        queues = [v2.MessageQueue(topic=request.topic, id=i, permission=permission, broker=broker,
                                  accept_message_types=ACCEPTED_TYPES) for i in range(config.queue_count)]
        return v2.QueryRouteResponse(status=OK, message_queues=queues)

    @answered(v2.QueryAssignmentResponse)
    def QueryAssignment(self, request, context):
        """A FIFO group is assigned each queue (its messages are popped orderly, queue by queue);
        any other the broker as a whole (queue id -1), as the proxy assigns them."""
        config = self.core.topic(_name(request.topic, "topic", v2.ILLEGAL_TOPIC))
        group = _name(request.group, "consumer group", v2.ILLEGAL_CONSUMER_GROUP)
        if not config.perm & PERM_READ:  # as the proxy answers a topic with no readable queue
            raise V2Refusal(v2.FORBIDDEN, "no readable queue")
        ids = range(config.queue_count) if self.core.group_orderly(group) else [-1]
        permission = _permission(config.perm)
        return v2.QueryAssignmentResponse(status=OK, assignments=[v2.Assignment(message_queue=v2.MessageQueue(
            topic=request.topic, id=i, permission=permission, broker=self._broker())) for i in ids])

    @answered(v2.HeartbeatResponse)
    def Heartbeat(self, request, context):
        if not client_id_of(context):
            raise V2Refusal(v2.CLIENT_ID_REQUIRED, "the x-mq-client-id header is missing: the official clients send "
                                                   "it; a client of its own must too")
        return v2.HeartbeatResponse(status=OK)

    @answered(v2.NotifyClientTerminationResponse)
    def NotifyClientTermination(self, request, context):
        self.clients.forget(client_id_of(context))
        return v2.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator, context):
        """The settings handshake, then commands for the client (transaction checks) as they come."""
        client_id = client_id_of(context)
        if not client_id:
            yield v2.TelemetryCommand(status=status(v2.CLIENT_ID_REQUIRED, "the x-mq-client-id header is missing"))
            return
        session = Session(client_id, asyncio.get_running_loop())
        self.clients.attach(session)
        reader = asyncio.ensure_future(self._read_telemetry(request_iterator, session))
        try:
            while True:
                command = await session.outbox.get()
                if command is None:
                    return
                yield command
        finally:
            reader.cancel()
            self.clients.detach(session)

    async def _read_telemetry(self, request_iterator, session: Session) -> None:
        try:
            async for command in request_iterator:
                if isinstance(command, RefusedRequest):
                    session.send(v2.TelemetryCommand(status=refusal_status(command.refusal())))
                elif command.HasField("settings"):
                    self.clients.set_settings(session.client_id, command.settings)
                    fifo = self.core.group_orderly(command.settings.subscription.group.name)
                    session.send(v2.TelemetryCommand(status=OK, settings=merged_settings(
                        command.settings, self.max_body_bytes, fifo)))
                # thread stack traces and verify results answer commands this broker never sends
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the client went away mid-stream
            log.debug("telemetry of %s ended: %s", session.client_id, err)
        session.close()

    # --- sends -----------------------------------------------------------------------------

    @answered(v2.SendMessageResponse)
    def SendMessage(self, request, context):
        if not request.messages:
            raise V2Refusal(v2.MESSAGE_CORRUPTED, "the request holds no message: send one or more")
        topic = _name(request.messages[0].topic, "topic", v2.ILLEGAL_TOPIC)
        if any(m.topic.name != topic for m in request.messages):
            raise V2Refusal(v2.MESSAGE_CORRUPTED, "the messages of one request name different topics: send each "
                                                  "topic's messages in a request of its own")
        config = self.core.topic(topic)
        built = [outgoing(m, self.max_body_bytes) for m in request.messages]
        born_host = peer_host(context.peer())
        if len(built) == 1:
            return self._send_one(config, built[0], born_host, client_id_of(context))
        if any(m.kind in (v2.TRANSACTION, v2.DELAY) or m.properties.get("TIMER_DELIVER_MS") for m in built):
            raise V2Refusal(v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "transactional and delayed messages are sent one "
                                                                    "per request: send them alone")
        groups = {m.group for m in built}
        queue_id = self.queues.choose(config.queue_count, groups.pop() if len(groups) == 1 else "")
        content = batch_content(built, config.queue_type is QueueType.BATCH_CQ)
        outcome = self.core.send(SendRequest(topic, queue_id, content, built[0].born_ms, born_host))
        entries = [v2.SendResultEntry(status=OK, message_id=m.message_id, offset=outcome.base_offset + i)
                   for i, m in enumerate(built)]
        return v2.SendMessageResponse(status=OK, entries=entries)

    def _send_one(self, config, message, born_host: bytes, client_id: str):
        queue_id = self.queues.choose(config.queue_count, message.group)
        transaction_id = message.message_id if message.kind == v2.TRANSACTION else ""
        outcome = self.core.send(single_request(config.name, queue_id, message, born_host, transaction_id, caller()))
        if transaction_id:
            immunity_s = check_immunity_s(message.properties)
            self.checks.opened(transaction_id, client_id, config.name, immunity_s * 1000)
        entry = v2.SendResultEntry(status=OK, message_id=message.message_id, transaction_id=transaction_id,
                                   offset=outcome.base_offset)
        return v2.SendMessageResponse(status=OK, entries=[entry])

    @answered(v2.EndTransactionResponse)
    def EndTransaction(self, request, context):
        transaction_id = request.transaction_id.strip()
        if not transaction_id:
            raise V2Refusal(v2.INVALID_TRANSACTION_ID, "transaction_id is empty: give the id the send answered with")
        if request.resolution == v2.COMMIT:
            self.core.commit_transactions([(transaction_id, 1)], None, caller())
        elif request.resolution == v2.ROLLBACK:
            self.core.rollback_transactions([(transaction_id, 1)], caller())
        else:  # unknown yet: checked again later
            return v2.EndTransactionResponse(status=OK)
        self.checks.ended(transaction_id)
        return v2.EndTransactionResponse(status=OK)

    @answered(v2.RecallMessageResponse)
    def RecallMessage(self, request, context):
        raise V2Refusal(v2.UNSUPPORTED, "recalling a delayed message is not supported by this broker yet")

    # --- receive, ack, invisible time --------------------------------------------------------

    def ReceiveMessage(self, request, context):
        try:
            if isinstance(request, RefusedRequest):
                raise request.refusal()
            found = self._receive(request, context)
        except Exception as err:
            yield v2.ReceiveMessageResponse(status=refusal_status(err))
        else:
            if isinstance(found, v2.Status):
                yield v2.ReceiveMessageResponse(status=found)
            else:
                yield v2.ReceiveMessageResponse(status=OK)
                for message in found:
                    yield v2.ReceiveMessageResponse(message=message)
        yield v2.ReceiveMessageResponse(delivery_timestamp=timestamp(int(time.time() * 1000)))

    def _receive(self, request, context):
        group = _name(request.group, "consumer group", v2.ILLEGAL_CONSUMER_GROUP)
        topic = _name(request.message_queue.topic, "topic", v2.ILLEGAL_TOPIC)
        self.core.topic(topic)
        if request.auto_renew:
            invisible_ms = DEFAULT_INVISIBLE_MS
        else:
            invisible_ms = request.invisible_duration.ToMilliseconds()
            if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
                raise V2Refusal(v2.ILLEGAL_INVISIBLE_TIME, f"invisible_duration {invisible_ms} ms: give "
                                                           f"{MIN_INVISIBLE_MS} to {MAX_INVISIBLE_MS} ms")
        if request.batch_size <= 0:
            raise V2Refusal(v2.BAD_REQUEST, f"batch_size {request.batch_size}: ask for 1 to {MAX_RECEIVE_BATCH}")
        expression = _tag_expression(request.filter_expression)
        polling_ms = _polling_ms(request, context)
        fifo = self.core.group_orderly(group)

        def found(result):
            if not result.deliveries:
                return status(v2.TOO_MANY_REQUESTS, "too many receives wait already: receive again later") \
                    if result.polling_full else status(v2.MESSAGE_NOT_FOUND, "no new message")
            messages = []
            for unit, part in zip(result.deliveries, result.parts):
                ck = unit.checkpoint
                messages += incoming(part, unit.origin_topic, ck.offset, ck.reconsume_times, unit.receipt_handle,
                                     invisible_ms)
            return messages

        return self.core.pop(group, topic, -1, min(request.batch_size, MAX_RECEIVE_BATCH), invisible_ms, polling_ms,
                             expression, fifo, found, client=client_id_of(context))

    @answered(v2.AckMessageResponse)
    def AckMessage(self, request, context):
        group = _name(request.group, "consumer group", v2.ILLEGAL_CONSUMER_GROUP)
        results = []
        for entry in request.entries:
            try:
                self._ack_one(group, entry.receipt_handle)
                entry_status = OK
            except Exception as err:
                entry_status = refusal_status(err)
            results.append(v2.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                                                    status=entry_status))
        return v2.AckMessageResponse(status=_overall(r.status for r in results), entries=results)

    def _ack_one(self, group: str, handle: str) -> None:
        unit, index, count = receipts.split(handle)
        unit = self.inner.current(unit)
        if count > 1:
            self._check_inner(group, unit, index, count)
            if not self.inner.ack(unit, index, count):
                return  # the unit is acked with its last message
        try:
            failures = self.core.ack(group, [unit])
        finally:
            self.inner.settled(unit)
        if failures:
            raise refused(Reason.RECEIPT_HANDLE_EXPIRED, failures[0].detail)

    def _check_inner(self, group: str, unit: str, index: int, count: int) -> None:
        """A message's ack is kept until its unit is whole only for a unit this broker gave
        ``group`` and still holds, and a message of it: a forged one would be answered OK and
        kept for ever (memory without bound)."""
        held = self.core.held_count(group, unit)
        if count != held or index >= count:
            raise refused(Reason.RECEIPT_HANDLE_INVALID, f"the receipt handle names message {index} of {count} "
                                                         f"of a batch of {held}: pass the handle a receive "
                                                         "returned, unchanged")

    @answered(v2.ChangeInvisibleDurationResponse)
    def ChangeInvisibleDuration(self, request, context):
        group = _name(request.group, "consumer group", v2.ILLEGAL_CONSUMER_GROUP)
        invisible_ms = request.invisible_duration.ToMilliseconds()
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise V2Refusal(v2.ILLEGAL_INVISIBLE_TIME, f"invisible_duration {invisible_ms} ms: give 0 to "
                                                       f"{MAX_INVISIBLE_MS} ms")
        unit, index, count = receipts.split(request.receipt_handle)
        unit = self.inner.current(unit)
        new_unit, _deadline = self.core.change_invisible_duration(group, unit, invisible_ms)
        if count > 1:
            self.inner.moved(unit, new_unit)
            new_handle = receipts.join(new_unit, index, count)
        else:
            new_handle = new_unit
        return v2.ChangeInvisibleDurationResponse(status=OK, receipt_handle=new_handle)

    @answered(v2.ForwardMessageToDeadLetterQueueResponse)
    def ForwardMessageToDeadLetterQueue(self, request, context):
        group = _name(request.group, "consumer group", v2.ILLEGAL_CONSUMER_GROUP)
        unit, _index, count = receipts.split(request.receipt_handle)
        if count > 1:
            raise V2Refusal(v2.UNSUPPORTED, "a message of an inner batch (a BatchCQ topic) goes to the dead-letter "
                                            "topic only with its whole batch: let its invisible time pass instead")
        self.core.forward_to_dead_letter(group, self.inner.current(unit), request.message_id)
        return v2.ForwardMessageToDeadLetterQueueResponse(status=OK)

    # --- offsets and pulls (beyond the real proxy) -----------------------------------------

    def _queue(self, message_queue) -> tuple[str, int]:
        topic = _name(message_queue.topic, "topic", v2.ILLEGAL_TOPIC)
        return topic, message_queue.id

    @answered(v2.QueryOffsetResponse)
    def QueryOffset(self, request, context):
        topic, queue_id = self._queue(request.message_queue)
        config = self.core.topic(topic)
        low, high = self.core.queue_offsets(config, queue_id)
        policy = request.query_offset_policy
        if policy == v2.BEGINNING:
            return v2.QueryOffsetResponse(status=OK, offset=low)
        if policy == v2.END:
            return v2.QueryOffsetResponse(status=OK, offset=high)
        if not request.HasField("timestamp"):
            raise V2Refusal(v2.BAD_REQUEST, "query_offset_policy TIMESTAMP needs the timestamp field")
        [(_queue_id, offset)] = self.core.offsets_for_timestamp(topic, [queue_id], request.timestamp.ToMilliseconds())
        return v2.QueryOffsetResponse(status=OK, offset=offset)

    @answered(v2.GetOffsetResponse)
    def GetOffset(self, request, context):
        group = _name(request.group, "consumer group", v2.ILLEGAL_CONSUMER_GROUP)
        topic, queue_id = self._queue(request.message_queue)
        self.core.topic(topic)
        for _topic, committed_queue, offset in self.core.query_offsets(group, [topic]):
            if committed_queue == queue_id:
                return v2.GetOffsetResponse(status=OK, offset=offset)
        raise V2Refusal(v2.OFFSET_NOT_FOUND, f"group {group!r} has committed no offset of topic {topic!r} queue "
                                             f"{queue_id}")

    @answered(v2.UpdateOffsetResponse)
    def UpdateOffset(self, request, context):
        group = _name(request.group, "consumer group", v2.ILLEGAL_CONSUMER_GROUP)
        topic, queue_id = self._queue(request.message_queue)
        self.core.commit_offsets(group, [(topic, queue_id, request.offset)])
        return v2.UpdateOffsetResponse(status=OK)

    async def PullMessage(self, request, context):
        """A status frame, the messages from the offset on, the next offset; waits up to the
        long-polling timeout for messages when there are none yet."""
        loop = asyncio.get_running_loop()
        try:
            if isinstance(request, RefusedRequest):
                raise request.refusal()
            topic, queue_id = self._queue(request.message_queue)
            if request.batch_size <= 0:
                raise V2Refusal(v2.BAD_REQUEST, f"batch_size {request.batch_size}: ask for 1 or more")
            tags = parse_tag_filter(_tag_expression(request.filter_expression))
            deadline = loop.time() + max(0, request.long_polling_timeout.ToMilliseconds()) / 1000
            while True:
                found = await loop.run_in_executor(None, self._pull_once, topic, queue_id, request, tags)
                if found[0] != RangeStatus.NO_MESSAGE or loop.time() >= deadline:
                    break
                await self.hold.arrival(deadline - loop.time(), (topic, queue_id, request.offset))
        except Exception as err:
            yield v2.PullMessageResponse(status=refusal_status(err))
            return
        pull_status, messages, next_offset, detail = found
        if pull_status is RangeStatus.RECORD_CORRUPTED:  # skipped: the client pulls on from next_offset
            answer = status(v2.OK, f"{detail}; pull on from next_offset")
        else:
            answer = _PULL_STATUS.get(pull_status, OK)
        yield v2.PullMessageResponse(status=answer)
        for message in messages:
            yield v2.PullMessageResponse(message=message)
        yield v2.PullMessageResponse(next_offset=next_offset)

    def _pull_once(self, topic: str, queue_id: int, request, tags):
        def consume(cursor, records):
            messages = [m for part in records for m in incoming(part, topic, request.offset, None, None)]
            return cursor.status, messages[:request.batch_size], cursor.next_offset, cursor.detail

        status_, messages, next_offset, detail = self.core.pull(topic, queue_id, request.offset, request.batch_size,
                                                                PULL_MAX_BYTES, tags, consume, request.group.name)
        if messages and len(messages) == request.batch_size:
            next_offset = messages[-1].system_properties.queue_offset + 1
        return status_, messages, next_offset, detail


_PULL_STATUS = {
    RangeStatus.NO_MESSAGE: status(v2.MESSAGE_NOT_FOUND, "no new message at this offset yet"),
    RangeStatus.OFFSET_TOO_SMALL: status(v2.ILLEGAL_OFFSET, "the offset is below the queue's first: pull again "
                                                            "from next_offset"),
    RangeStatus.OFFSET_OVERFLOW: status(v2.ILLEGAL_OFFSET, "the offset is past the queue's end: pull again from "
                                                           "next_offset"),
}


def _overall(statuses) -> v2.Status:
    codes = {s.code for s in statuses}
    if not codes or codes == {v2.OK}:
        return OK
    if len(codes) == 1:
        [code] = codes
        return status(code)
    return status(v2.MULTIPLE_RESULTS)


def _tag_expression(expression) -> str:
    if expression.type == v2.SQL:
        raise V2Refusal(v2.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not served by this broker: filter by tag "
                                                      "(\"TagA || TagB\", or \"*\")")
    text = expression.expression.strip() or "*"
    try:
        parse_tag_filter(text)
    except BrokerFault as bad:
        raise V2Refusal(v2.ILLEGAL_FILTER_EXPRESSION, bad.message) from None
    return text


def _polling_ms(request, context) -> int:
    """The proxy's long-polling time: the request's, within 5 to 20 s, and within the call's
    deadline."""
    if request.HasField("long_polling_timeout"):
        wanted = request.long_polling_timeout.ToMilliseconds()
    else:
        wanted = MAX_LONG_POLLING_MS
    wanted = min(max(wanted, MIN_LONG_POLLING_MS), MAX_LONG_POLLING_MS)
    remaining = context.time_remaining()
    if remaining is not None:
        wanted = min(wanted, max(0, int(remaining * 1000) - 200))
    return wanted
