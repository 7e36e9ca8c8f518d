"""A part of host programs: the installed distribution that owns a package (a CPU build may
install it under another name)."""
import os, re


def distribution(folder: str, package: str) -> str:
    """The `Name:` of the dist-info owning the package found in `folder`; "" when none names it.
    Only dist-infos named after the package are read (a site-packages holds hundreds)."""
    site = os.path.dirname(folder)
    try:
        infos = [n for n in os.listdir(site) if n.endswith(".dist-info") and n.lower().startswith(package.lower())]
    except OSError:
        return ""
    for info in sorted(infos):
        try:
            top = open(os.path.join(site, info, "top_level.txt")).read().split()
        except OSError:
            top = [info.split("-")[0]]
        if package not in top:
            continue
        try:
            head = open(os.path.join(site, info, "METADATA"), errors="replace").read(4096)
        except OSError:
            continue
        found = re.search(r"^Name:\s*(\S+)", head, re.M)
        if found:
            return found.group(1)
    return ""
