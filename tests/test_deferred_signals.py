"""DeferredSignals (trackmania_rl/deferred_signals.py): SIGINT and SIGTERM noted during a block, then handed to the
handlers they would have had, none lost while the handlers are put back, even to handlers that raise or send signals.

Signals are sent with signal.raise_signal: to this thread, whose handler runs before raise_signal returns, so every
step below happens at a known point (no sleep)."""

import signal
from contextlib import contextmanager

import pytest

from trackmania_rl.deferred_signals import DeferredSignals

SET_HANDLER = signal.signal  # the real one, while a test patches signal.signal


@contextmanager
def handlers(by_signal: dict):
    """These handlers for the test's duration, those before put back after."""
    before = {signum: SET_HANDLER(signum, handler) for signum, handler in by_signal.items()}
    try:
        yield
    finally:
        for signum, handler in before.items():
            SET_HANDLER(signum, handler)


def recorder(received: list, name: str, then=None):
    def handle(signum, frame):
        received.append(name)
        if then is not None:
            then()

    return handle


def interrupt():
    raise KeyboardInterrupt


def test_signals_during_the_block_reach_their_handlers_after_it_in_order():
    received = []
    on_int, on_term = recorder(received, "int"), recorder(received, "term")
    with handlers({signal.SIGINT: on_int, signal.SIGTERM: on_term}):
        with DeferredSignals():
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGINT)
            assert received == []  # only noted
        assert received == ["term", "int"]
        assert signal.getsignal(signal.SIGINT) is on_int and signal.getsignal(signal.SIGTERM) is on_term


def test_signals_arriving_between_the_restores_are_not_lost(monkeypatch):
    """Right after SIGINT's handler is back, before SIGTERM's is: a SIGTERM arrives (it goes on to its handler at once),
    then a SIGINT whose handler raises. SIGTERM's handler is still put back and the SIGTERM noted before is still
    raised again. (Restoring one handler after the other and raising the noted ones after both lost all three.)"""
    received = []
    on_int, on_term = recorder(received, "int", then=interrupt), recorder(received, "term")

    def restore_then_signal(signum, handler):
        previous = SET_HANDLER(signum, handler)
        if signum == signal.SIGINT and handler is on_int:  # the first restore is done, the second not yet
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGINT)
        return previous

    with handlers({signal.SIGINT: on_int, signal.SIGTERM: on_term}):
        deferred = DeferredSignals((signal.SIGINT, signal.SIGTERM)).start()
        signal.raise_signal(signal.SIGTERM)  # noted
        with monkeypatch.context() as patch:
            patch.setattr(signal, "signal", restore_then_signal)
            with pytest.raises(KeyboardInterrupt):
                deferred.end()
        assert received == ["term", "int", "term"]
        assert signal.getsignal(signal.SIGINT) is on_int and signal.getsignal(signal.SIGTERM) is on_term


def test_a_raising_handler_that_sends_the_other_signal_loses_nothing():
    """The noted SIGINT's handler sends SIGTERM and raises: the SIGTERM it sent reaches SIGTERM's own handler (every
    handler is back before a noted signal is raised again), and so does the SIGTERM noted after the SIGINT."""
    received = []

    def on_int(signum, frame):
        received.append("int")
        signal.raise_signal(signal.SIGTERM)
        raise KeyboardInterrupt

    on_term = recorder(received, "term")
    with handlers({signal.SIGINT: on_int, signal.SIGTERM: on_term}):
        with pytest.raises(KeyboardInterrupt):
            with DeferredSignals():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGTERM)
        assert received == ["int", "term", "term"]
        assert signal.getsignal(signal.SIGINT) is on_int and signal.getsignal(signal.SIGTERM) is on_term


def test_an_ignored_signal_stays_ignored():
    received = []
    with handlers({signal.SIGINT: recorder(received, "int"), signal.SIGTERM: signal.SIG_IGN}):
        with DeferredSignals():
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGINT)
        assert received == ["int"] and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
