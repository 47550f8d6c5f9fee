"""The registered HTTP clients: ids, per-client sequence numbers, map-cycle slots, and when each was last heard from.

Shared by the server's thread (requests) and the learner's (health checks), hence the lock. A client
silent past its timeout is forgotten: its next request gets 404 and it registers again. Each client holds a slot, the
lowest number in [0, max_clients) no other registered client holds: its share of the run's map cycle (source.py), so
that no two clients play the same tracks in step.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

MAX_CLIENTS = 256  # registrations beyond this are refused (429): the table stays bounded


class TooManyClients(RuntimeError):
    pass


@dataclass
class Client:
    client_id: str
    name: str
    game: str
    slot: int = 0
    registered_at: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.monotonic)
    last_seq: int = -1  # the highest sequence number accepted
    races_accepted: int = 0


class ClientTable:
    def __init__(self, max_clients: int = MAX_CLIENTS):
        self._lock = threading.Lock()
        self._clients: dict[str, Client] = {}
        self.max_clients = max_clients
        self.forgotten_total = 0
        self.races_by_forgotten = 0

    def register(self, name: str, game: str) -> Client:
        with self._lock:
            if len(self._clients) >= self.max_clients:
                raise TooManyClients(f"{self.max_clients} clients are registered already")
            taken = {c.slot for c in self._clients.values()}
            slot = next(i for i in range(self.max_clients) if i not in taken)
            client = Client("c-" + secrets.token_hex(8), name, game, slot)
            self._clients[client.client_id] = client
            return client

    def touch(self, client_id: str) -> Client | None:
        """The client, marked as heard from now; None when unknown (never registered, or forgotten)."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is not None:
                client.last_seen = time.monotonic()
            return client

    def accept_seq(self, client_id: str, seq: int) -> str | None:
        """Record `seq` as accepted; None when done, else why not ("unknown" or "repeated")."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is None:
                return "unknown"
            if seq <= client.last_seq:
                return "repeated"
            client.last_seq = seq
            client.races_accepted += 1
            return None

    def is_new_seq(self, client_id: str, seq: int) -> bool:
        with self._lock:
            client = self._clients.get(client_id)
            return client is not None and seq > client.last_seq

    def remove(self, client_id: str) -> bool:
        with self._lock:
            client = self._clients.pop(client_id, None)
            if client is not None:
                self.races_by_forgotten += client.races_accepted
            return client is not None

    def forget_silent(self, timeout_s: float) -> list[str]:
        """Forget the clients not heard from within `timeout_s`; returns their ids."""
        now = time.monotonic()
        with self._lock:
            silent = [cid for cid, c in self._clients.items() if now - c.last_seen > timeout_s]
            for cid in silent:
                self.races_by_forgotten += self._clients.pop(cid).races_accepted
            self.forgotten_total += len(silent)
            return silent

    def counts(self, alive_within_s: float) -> tuple[int, int]:
        """(registered, heard from within `alive_within_s`)."""
        now = time.monotonic()
        with self._lock:
            return len(self._clients), sum(1 for c in self._clients.values() if now - c.last_seen <= alive_within_s)

    def snapshot(self) -> list[Client]:
        with self._lock:
            return [Client(**vars(c)) for c in self._clients.values()]
