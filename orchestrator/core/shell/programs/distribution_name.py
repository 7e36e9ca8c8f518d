"""`distribution_name.py FOLDER PACKAGE`: print the name of the distribution that installed
PACKAGE (found in FOLDER), which may differ from the package's; an empty line when none names one."""
import sys

from .distribution import distribution

print(distribution(sys.argv[1], sys.argv[2]))
