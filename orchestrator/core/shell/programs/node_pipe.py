"""`node_pipe.py PORT`, on a Slurm node: join stdin/stdout to 127.0.0.1:PORT (one connection the
login node's relay carries)."""
import os, socket, sys, threading

s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))


def up() -> None:
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)


threading.Thread(target=up, daemon=True).start()
while True:
    data = s.recv(65536)
    if not data:
        break
    os.write(1, data)
