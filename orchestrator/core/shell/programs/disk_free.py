"""`disk_free.py PATH...`: print `path<TAB>free bytes<TAB>mount point` per path (its nearest
existing folder's disk)."""
import os, sys

for p in sys.argv[1:]:
    d = p
    while not os.path.isdir(d):
        d = os.path.dirname(d) or "/"
    st = os.statvfs(d)
    m = os.path.realpath(d)
    while not os.path.ismount(m):
        m = os.path.dirname(m)
    print(p, st.f_bavail * st.f_frsize, m, sep="\t")
