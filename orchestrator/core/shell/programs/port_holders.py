"""`port_holders.py PORT MARK`: print JSON `{"listening": bool, "holders": [{pid, name, user, pgid,
mark}]}` for a TCP port in LISTEN state, read from /proc (processes of other users are listening
but not named); `mark` is the value of the environment variable MARK in the holder's environment."""
import json, os, pwd, sys

port = int(sys.argv[1])
mark_entry = sys.argv[2].encode() + b"="
inodes = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        cells = row.split()
        if len(cells) > 9 and cells[3] == "0A" and int(cells[1].rsplit(":", 1)[1], 16) == port:
            inodes.add("socket:[%s]" % cells[9])
holders = []
for pid in (p for p in os.listdir("/proc") if p.isdigit()) if inodes else ():
    try:
        links = {os.readlink("/proc/%s/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%s/fd" % pid)}
    except OSError:
        continue
    if not links & inodes:
        continue
    try:
        head, rest = open("/proc/%s/stat" % pid).read().rsplit(") ", 1)
        owner = pwd.getpwuid(os.stat("/proc/" + pid).st_uid).pw_name
        environ = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
    except (OSError, KeyError):
        continue
    mark = [e.split(b"=", 1)[1].decode("utf-8", "replace") for e in environ if e.startswith(mark_entry)]
    holders.append({"pid": int(pid), "name": head.split("(", 1)[1], "user": owner,
                    "pgid": int(rest.split()[2]), "mark": mark[0] if mark else None})
print(json.dumps({"listening": bool(inodes), "holders": holders}))
