"""A port a command listens on that is taken: one line naming it and the setting that moves it.

The worker's web server is started deep inside Faust's service tree, after Kafka has been
reached; a second worker on one host used to end in an 87-line traceback there. The port is
tried first instead, the way the server will bind it (asyncio's servers set SO_REUSEADDR on
Unix, so a port left in TIME_WAIT by a stopped worker counts as free, as it is to them).
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

# bind errors that a setting fixes: the port is taken, the address is not this host's, the
# port is privileged
LISTEN_ERRORS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    setting: str  # the TRACEJUDGE_ variable that moves it
    flag: str | None = None  # the command's option, when it has one

    def problem(self, exc: OSError) -> str:
        """ "cannot listen on 127.0.0.1:8090: address already in use; set ..."."""
        what = (exc.strerror or str(exc)).lower()
        move = f"{self.flag} or {self.setting}" if self.flag else self.setting
        taken = (
            " (another tracejudge or another program has it)"
            if exc.errno == errno.EADDRINUSE
            else ""
        )
        return (
            f"cannot listen on {self.host}:{self.port}: {what}{taken}; choose another with {move}"
        )


def try_listen(listener: Listener) -> str | None:
    """None when the port can be listened on now, else the one-line problem."""
    try:
        infos = socket.getaddrinfo(
            listener.host, listener.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        where = f"{listener.host}:{listener.port}"
        return f"cannot listen on {where}: {exc.strerror}; set {listener.setting}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno in LISTEN_ERRORS:
                return listener.problem(exc)
            raise
    return None
