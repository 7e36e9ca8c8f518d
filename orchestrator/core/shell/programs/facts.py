"""`facts.py MARKER WORKDIR PORT [PACKAGE:FILE+FILE,...]`: a host's facts from one process, as
`MARKER key=value` lines: hostname, OS, kernel, Python; for each PACKAGE (found without importing
it) its folder, the `__version__` of the first of its FILEs that has one, and its distribution;
the free disk of WORKDIR (or its nearest existing parent) and whether PORT is listening."""
import importlib.util, os, re, sys

from .distribution import distribution

m, workdir, port = sys.argv[1], sys.argv[2], int(sys.argv[3])


def fact(key: str, value: object) -> None:
    print(m, key + "=" + str(value).replace("\n", " "))


uname = os.uname()  # not socket or platform: each import costs milliseconds, on every host
fact("hostname", uname.nodename)
try:
    release = dict(line.rstrip("\n").split("=", 1) for line in open("/etc/os-release") if "=" in line)
    fact("os", release.get("PRETTY_NAME", "").strip('"') or uname.sysname)
except OSError:
    fact("os", uname.sysname + " " + uname.release)
fact("kernel", uname.release)
fact("python", sys.version.split()[0])
fact("python_path", sys.executable)
for wanted in sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] else ():
    package, _, files = wanted.partition(":")
    spec = importlib.util.find_spec(package)
    if not spec or not spec.submodule_search_locations:
        continue
    folder = list(spec.submodule_search_locations)[0]
    version = ""
    for name in files.split("+"):  # the package's own version files, in the order its engine gives
        try:
            found = re.search(r"^__version__\s*=\s*(?:\w+\s*=\s*)*[\x22']([^\x22']+)", open(os.path.join(folder, name)).read(), re.M)
        except OSError:
            continue
        if found:
            version = found.group(1)
            break
    fact("package_dir." + package, folder)
    fact("package_version." + package, version)
    owner = distribution(folder, package)
    if owner:
        fact("package_dist." + package, owner)
d = workdir
while not os.path.isdir(d):
    d = os.path.dirname(d) or "/"
st = os.statvfs(d)
fact("disk_free_kib", st.f_bavail * st.f_frsize // 1024)
listening = False
for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # state 0A is LISTEN; needs no ss/netstat
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    listening = listening or any(r.split()[3] == "0A" and int(r.split()[1].rsplit(":", 1)[1], 16) == port for r in rows)
fact("port_listening", int(listening))
