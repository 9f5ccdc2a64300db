"""The revive service: a thread that revives expired invisible records on an interval."""

from __future__ import annotations

import logging
import threading

from .service import PopService

log = logging.getLogger(__name__)


class ReviveService:
    """Calls ``service.revive_expired()`` every ``interval_ms`` (at once again while a pass
    found a full batch). Tests with a stepped clock call ``revive_expired`` themselves."""

    def __init__(self, service: PopService, interval_ms: int | None = None):
        self.service = service
        self.interval_s = (interval_ms or service.config.revive_interval_ms) / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rmq-pop-revive", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                full = self.service.revive_expired() >= self.service.config.revive_batch
            except Exception:  # a fault here must not stop reviving silently
                log.exception("pop revive failed; trying again in %.1f s", self.interval_s)
                full = False
            if not full:
                self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
