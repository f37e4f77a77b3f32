"""Real users made and removed here (useradd, userdel)."""

from __future__ import annotations

import subprocess
import time


def user_tool(*cmd: str) -> subprocess.CompletedProcess:
    """useradd/userdel ..., retried while another session's holds /etc/passwd's lock."""
    for _ in range(30):  # another session's useradd may hold /etc/passwd's lock a moment
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode == 0 or "lock" not in out.stderr.lower():
            return out
        time.sleep(1)
    return out
