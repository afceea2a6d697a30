"""Private redis-servers on loopback for the A/B and trace scripts of bench/ (ab.py, ab_pairs.py,
handoff_trace.py): a free port, a server without persistence in a directory of the caller's, and
a wait until it accepts connections. Standard library only."""
import os, socket, subprocess, time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(directory, port=None):
    """Starts redis-server on 127.0.0.1:`port` (a free one when None) with its files in
    `directory` (made if missing), no RDB or AOF; returns (process, port) once it accepts
    connections, or exits with a message after 10 s."""
    port = port or free_port()
    os.makedirs(directory, exist_ok=True)
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", directory,
                             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.terminate()
    raise SystemExit(f"redis-server on port {port} did not start")
