"""The revive service: a thread that revives expired invisible records on an interval."""

from __future__ import annotations

from broker_sim.common.service_thread import ServiceThread
from broker_sim.pop.service import PopService


class ReviveService(ServiceThread):
    """Calls ``service.revive_expired()`` at start and every ``interval_ms`` (at once again
    while a pass found a full batch). Tests with a stepped clock call ``revive_expired`` themselves."""

    def __init__(self, service: PopService, interval_ms: int | None = None):
        super().__init__("rmq-pop-revive", (interval_ms or service.config.revive_interval_ms) / 1000,
                         task="pop revive")
        self.service = service

    def start(self) -> None:
        super().start()
        self.wake()  # records that expired while the broker was down are revived now

    def run_once(self) -> float | None:
        full = self.service.revive_expired() >= self.service.config.revive_batch
        return 0 if full else None
