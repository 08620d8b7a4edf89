"""What the Python sandbox keeps of a call's output: a capped read of each pipe, and text with
its control characters escaped.

The code's stdout and stderr end up in the model's context, in episode transcripts and in
logs printed to a terminal, so terminal escape sequences, NUL bytes, carriage returns (which
let a line overwrite what came before it) and other control characters are shown as Python
escapes instead (`escape_controls`: ESC -> "\\x1b"); newlines and tabs stay.
"""

from __future__ import annotations

import os
import re
import threading

__all__ = ["CappedReader", "decode_output", "escape_controls"]

_READ_CHUNK_BYTES = 1 << 16
# C0 controls but tab and newline, DEL, and the C1 controls (U+0080..U+009F: 8-bit CSI, ...).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class CappedReader:
    """Reads a pipe to its end in a daemon thread, keeping the head or the tail of the bytes.

    Args:
      pipe: the pipe's file object.
      cap_bytes: at most this many bytes are kept.
      keep_tail: keep the last `cap_bytes` (stderr: the end of a traceback) instead of the first.
    """

    def __init__(self, pipe, cap_bytes: int, *, keep_tail: bool):
        self._pipe, self._cap, self._keep_tail = pipe, cap_bytes, keep_tail
        self.data = bytearray()
        self.total_bytes = 0
        self._thread = threading.Thread(target=self._read, name="jaxrl_llm-sandbox-io", daemon=True)
        self._thread.start()

    def _read(self):
        fd = self._pipe.fileno()
        try:
            while chunk := os.read(fd, _READ_CHUNK_BYTES):
                self.total_bytes += len(chunk)
                if self._keep_tail:
                    self.data += chunk
                    if len(self.data) > self._cap:
                        del self.data[: len(self.data) - self._cap]
                elif len(self.data) < self._cap:
                    self.data += chunk[: self._cap - len(self.data)]
        except OSError:
            pass

    def finish(self, timeout_s: float) -> tuple[bytes, bool]:
        """(kept bytes, whether any were dropped) once the pipe closes or `timeout_s` passes."""
        self._thread.join(timeout_s)
        data = bytes(self.data)
        return data, self.total_bytes > len(data)


def escape_controls(text: str) -> str:
    """`text` with every control character but newline and tab written as a Python escape.

    Example:
      >>> escape_controls("red \\x1b[31mtext\\x00\\r\\n")
      'red \\\\x1b[31mtext\\\\x00\\\\x0d\\n'
    """
    return _CONTROLS.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def decode_output(data: bytes, max_chars: int, *, keep_tail: bool) -> tuple[str, bool]:
    """The kept bytes as text, control characters escaped (`escape_controls`), cut to
    `max_chars` (its head, or its tail when `keep_tail`); and whether it was cut."""
    text = escape_controls(data.decode("utf-8", errors="replace"))
    if len(text) <= max_chars:
        return text, False
    return (text[-max_chars:], True) if keep_tail else (text[:max_chars], True)
