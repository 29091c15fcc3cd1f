"""Ctrl-C and SIGTERM held while the main thread is inside the worker pool's machinery
(rescorer/job/interrupts.py): raised when the call returns, at once when a second comes."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from rescorer.cli.common import Terminated, handle_sigterm
from rescorer.job.interrupts import held


def test_a_ctrl_c_inside_is_raised_after_the_block() -> None:
    after = []
    with pytest.raises(KeyboardInterrupt), held():
        os.kill(os.getpid(), signal.SIGINT)
        after.append("the block went on")
    assert after == ["the block went on"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_signal_inside_is_raised_at_once() -> None:
    reached = []
    with pytest.raises(KeyboardInterrupt), held():
        os.kill(os.getpid(), signal.SIGINT)
        reached.append(1)
        os.kill(os.getpid(), signal.SIGINT)
        reached.append(2)
    assert reached == [1]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_is_held_as_the_cli_raises_it() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        handle_sigterm()  # the CLI's: SIGTERM raises Terminated
        with pytest.raises(Terminated), held():
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_ignored_ctrl_c_stays_ignored_and_a_block_without_one_raises_nothing() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as nohup sets it
    try:
        with held():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    with held():
        pass


def test_outside_the_main_thread_nothing_changes() -> None:
    seen = []

    def inside() -> None:
        with held():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]
