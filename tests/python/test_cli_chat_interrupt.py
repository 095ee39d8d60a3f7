"""gridq chat and Ctrl-C (issue 14 item 12): SIGINT during an answer stops that answer and keeps the chat (the next
turn is answered); SIGINT at the prompt ends it with status 0."""

import os
import select
import signal
import subprocess
import time

from server_util import MODEL_DIR, gridq_bin


def read_until(fd, needle: bytes, timeout: float) -> bytes:
    out = b""
    deadline = time.time() + timeout
    while needle not in out and time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
    return out


def test_ctrl_c_stops_the_answer_and_keeps_the_chat():
    p = subprocess.Popen([gridq_bin(), "chat", str(MODEL_DIR), "--max-tokens", "4000", "--threads", "2",
                          "--no-think", "--temperature", "1", "--seed", "3"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(b"write a long story\n")
        p.stdin.flush()
        assert read_until(p.stdout.fileno(), b" ", 60)  # the answer has started
        p.send_signal(signal.SIGINT)
        err = read_until(p.stderr.fileno(), b"answer stopped", 60)
        assert b"answer stopped" in err, err
        assert p.poll() is None  # still chatting
        time.sleep(1.0)  # back at the prompt
        assert p.poll() is None  # still chatting
        p.send_signal(signal.SIGINT)  # Ctrl-C at the prompt ends the chat
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()


def test_after_a_stopped_answer_the_next_turn_is_answered():
    p = subprocess.Popen([gridq_bin(), "chat", str(MODEL_DIR), "--max-tokens", "4000", "--threads", "2",
                          "--no-think", "--temperature", "1", "--seed", "3"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(b"write a long story\n")
        p.stdin.flush()
        assert read_until(p.stdout.fileno(), b" ", 60)
        p.send_signal(signal.SIGINT)
        assert b"answer stopped" in read_until(p.stderr.fileno(), b"answer stopped", 60)
        read_until(p.stdout.fileno(), b"\x00", 1.0)  # drain what the stopped answer printed
        p.stdin.write(b"hi\n")
        p.stdin.flush()
        p.stdin.close()  # end of input after this turn
        p.wait(timeout=120)
        assert p.returncode == 0
        assert p.stdout.read().strip()  # the second turn got an answer
    finally:
        if p.poll() is None:
            p.kill()
