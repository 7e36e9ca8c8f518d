"""`relay.py JOB STEP...`, on a Slurm login node: listen on a free port of the loopback and print
it; carry each connection through one run of the STEP command (its stdin and stdout); end once
JOB no longer runs (checked every 30 s)."""
import io, socket, subprocess, sys, threading, time

job, step = sys.argv[1], sys.argv[2:]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(64)
print(server.getsockname()[1], flush=True)


def carry(conn: socket.socket) -> None:
    proc = subprocess.Popen(step, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    into, out = proc.stdin, proc.stdout
    assert into is not None and isinstance(out, io.BufferedReader)  # both pipes, buffered

    def up() -> None:
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                into.write(data)
                into.flush()
        except OSError:
            pass
        try:
            into.close()
        except OSError:
            pass
    threading.Thread(target=up, daemon=True).start()
    try:
        while True:
            data = out.read1(65536)
            if not data:
                break
            conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    conn.close()
    proc.kill()
    proc.wait()


def watch() -> None:
    while True:
        time.sleep(30)
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
        if state.stdout.strip() != "RUNNING":
            server.close()
            raise SystemExit


threading.Thread(target=watch, daemon=True).start()
while True:
    conn, _ = server.accept()
    threading.Thread(target=carry, args=(conn,), daemon=True).start()
