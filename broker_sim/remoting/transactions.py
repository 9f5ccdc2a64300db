"""RocketMQ's transactional messages over the door: a prepared (half) message is a core
transaction of its own, named by the message's UNIQ_KEY; END_TRANSACTION commits or rolls it
back; one left unknown is checked back with its producer group (CHECK_TRANSACTION_STATE, the
half message in the body) every check interval, and rolled back after the maximum checks, as
RocketMQ's TransactionalMessageCheckService does.

Which producer group sent a half message is kept in memory: after a restart its transaction is
no longer checked and the core's own transaction timeout rolls it back.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

from broker_sim.core import BrokerCore, BrokerError
from broker_sim.store import format as fmt
from rmq_spark.protocol.remoting import FLAG_ONEWAY, RemotingCommand, RequestCode, ResponseCode

from .clients import ClientRegistry
from .fields import Fields

log = logging.getLogger(__name__)

COMMIT = 0x8  # MessageSysFlag.TRANSACTION_COMMIT_TYPE
ROLLBACK = 0xC  # TRANSACTION_ROLLBACK_TYPE
NOT_TYPE = 0x0  # the producer does not know yet: the check asks again


class TransactionRequests:
    def __init__(self, core: BrokerCore, clients: ClientRegistry, broker_name: str, check_interval_ms: int,
                 check_max: int):
        self.core = core
        self.clients = clients
        self.broker_name = broker_name
        self.check_interval_ms = check_interval_ms
        self.check_max = check_max
        self._opaques = itertools.count(1)

    def handlers(self) -> dict:
        return {RequestCode.END_TRANSACTION: self.end}

    def end(self, request: RemotingCommand, _connection) -> RemotingCommand:
        fields = Fields(request)
        transaction_id = fields.text("transactionId", None) or fields.text("msgId")
        decision = fields.integer("commitOrRollback")
        if decision == NOT_TYPE:
            return request.response(ResponseCode.SUCCESS)
        if decision not in (COMMIT, ROLLBACK):
            return request.response(ResponseCode.SYSTEM_ERROR, f"commitOrRollback {decision}: send 8 (commit), 12 "
                                                               "(rollback) or 0 (unknown)")
        try:
            if decision == COMMIT:
                self.core.commit_transactions([(transaction_id, 1)], None)
            else:
                self.core.rollback_transactions([(transaction_id, 1)])
        except BrokerError as refused:
            if request.is_oneway:  # as the Java client ends them: nobody reads an answer
                log.info("END_TRANSACTION of %s refused: %s", transaction_id, refused.message)
            raise
        finally:
            self.clients.ended(transaction_id)
        return request.response(ResponseCode.SUCCESS)

    async def check_forever(self) -> None:
        """Every check interval, ask the producers of half messages older than it."""
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000)
            try:
                self.check_once()
            except Exception:
                log.exception("checking transactions failed; trying again in %d ms", self.check_interval_ms)

    def check_once(self, now_ms: float | None = None) -> int:
        """Send the checks that are due; how many were sent."""
        now_ms = time.monotonic() * 1000 if now_ms is None else now_ms
        sent = 0
        for prepared in list(self.clients.prepared_messages.values()):
            if now_ms - prepared.sent_ms < self.check_interval_ms:
                continue
            if prepared.checks >= self.check_max:
                log.warning("transaction %s unanswered after %d checks: rolled back", prepared.transaction_id,
                            prepared.checks)
                self._roll_back(prepared.transaction_id)
                continue
            half = self.core.prepared_message(prepared.transaction_id)
            if half is None:  # ended meanwhile (the core's timeout, a commit through another door)
                self.clients.ended(prepared.transaction_id)
                continue
            connection = self.clients.producer_connection(prepared.producer_group)
            prepared.checks += 1
            if connection is not None:
                connection.send(self._check_request(prepared.transaction_id, half))
                sent += 1
        return sent

    def _roll_back(self, transaction_id: str) -> None:
        try:
            self.core.rollback_transactions([(transaction_id, 1)])
        except BrokerError as refused:
            log.info("rolling back %s: %s", transaction_id, refused.message)
        self.clients.ended(transaction_id)

    def _check_request(self, transaction_id: str, half: bytes) -> RemotingCommand:
        topic = fmt.decode_record(half).topic
        store_host = self.core.store.config.store_host_bytes
        header = {"topic": topic, "tranStateTableOffset": "0", "commitLogOffset": "0",
                  "msgId": transaction_id, "transactionId": transaction_id,
                  "offsetMsgId": fmt.message_id(store_host, 0), "brokerName": self.broker_name}
        return RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, next(self._opaques), FLAG_ONEWAY, header, half)
