"""The TCP sockets a local search listens on (issue 29 row 16): this process's and its descendants' (the
local Ray's GCS, raylet, agents, dashboard and workers), polled while a search runs."""

import ipaddress
import threading


def listening_sockets() -> set[tuple[str, int, str]]:
    """(address, port, process name) of every TCP socket this process and its descendants listen on."""
    import psutil

    me = psutil.Process()
    ours = {me.pid: me.name()}
    for child in me.children(recursive=True):
        try:
            ours[child.pid] = child.name()
        except psutil.Error:  # it ended meanwhile
            pass
    return {(c.laddr.ip, c.laddr.port, ours[c.pid]) for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.pid in ours}


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


def beyond_loopback(sockets) -> list[tuple[str, int, str]]:
    return sorted(s for s in sockets if not is_loopback(s[0]))


class Poller:
    """Calls ``poll()`` every half second on a thread while its ``with`` block runs; an exception it raises is
    kept in ``errors`` (for an assertion's message) and the polling goes on."""

    def __init__(self):
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def poll(self):
        raise NotImplementedError

    def _run(self):
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as e:
                self.errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(0.5)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)


class ListenerWatch(Poller):
    """Collects ``listening_sockets()`` while its block runs."""

    def __init__(self):
        super().__init__()
        self.sockets: set = set()

    def poll(self):
        self.sockets |= listening_sockets()
