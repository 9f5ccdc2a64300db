"""RocketMQ's transactional messages over the door: a prepared (half) message is a core
transaction of its own, named by the message's UNIQ_KEY; END_TRANSACTION commits or rolls it
back; one left unknown is checked back with its producer group (CHECK_TRANSACTION_STATE, the
half message in the body, sent by ``ask``) by the door's TransactionChecks.
"""

from __future__ import annotations

import itertools
import logging

from broker_sim.common.logs import ThrottledLog
from broker_sim.core import BrokerCore, BrokerFault
from broker_sim.doors.checks import OpenTransaction, TransactionChecks
from broker_sim.doors.remoting.clients import ClientRegistry
from broker_sim.doors.remoting.fields import Fields
from rmq_wire import record as fmt
from rmq_wire.remoting import FLAG_ONEWAY, RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger(__name__)

COMMIT = 0x8  # MessageSysFlag.TRANSACTION_COMMIT_TYPE
ROLLBACK = 0xC  # TRANSACTION_ROLLBACK_TYPE
NOT_TYPE = 0x0  # the producer does not know yet: the check asks again


class TransactionRequests:
    def __init__(self, core: BrokerCore, clients: ClientRegistry, checks: TransactionChecks, broker_name: str):
        self.core = core
        self.clients = clients
        self.checks = checks
        self.broker_name = broker_name
        self._opaques = itertools.count(1)
        self._refusal_log = ThrottledLog(log)  # oneway ends of unknown transactions: 5 per 10 s per client host

    def handlers(self) -> dict:
        return {RequestCode.END_TRANSACTION: self.end}

    def end(self, request: RemotingCommand, connection) -> RemotingCommand:
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
                self.core.commit_transactions([(transaction_id, 1)], None, request.account)
            else:
                self.core.rollback_transactions([(transaction_id, 1)], request.account)
        except BrokerFault as refused:
            if request.is_oneway:  # as the Java client ends them: nobody reads an answer
                remote = connection.remote
                self._refusal_log.info("END_TRANSACTION of %s from %s refused: %s", transaction_id, remote,
                                       refused.message, key=remote.rsplit(":", 1)[0],
                                       extra={"transaction": transaction_id, "client": remote,
                                              "account": request.account})
            raise
        finally:
            self.checks.ended(transaction_id)
        return request.response(ResponseCode.SUCCESS)

    def ask(self, transaction: OpenTransaction, half: bytes) -> bool:
        """Send a check of ``transaction`` to a producer of its group (from the checks' thread);
        whether one is connected."""
        connection = self.clients.producer_connection(transaction.owner)
        if connection is None:
            return False
        connection.send_threadsafe(self._check_request(transaction.transaction_id, half))
        return True

    def _check_request(self, transaction_id: str, half: bytes) -> RemotingCommand:
        topic = fmt.decode_record(half).topic
        store_host = self.core.store_host_bytes
        header = {"topic": topic, "tranStateTableOffset": "0", "commitLogOffset": "0",
                  "msgId": transaction_id, "transactionId": transaction_id,
                  "offsetMsgId": fmt.message_id(store_host, 0), "brokerName": self.broker_name}
        return RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, next(self._opaques), FLAG_ONEWAY, header, half)
