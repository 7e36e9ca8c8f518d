"""Print a TCP port free on the host now (the kernel's choice for a bind to port 0)."""
import socket

s = socket.socket()
s.bind(('', 0))
print(s.getsockname()[1])
