"""`package_folder.py PACKAGE`: print the folder of a top-level package without importing it
(find_spec locates it without executing its `__init__`); an empty line when there is none."""
import importlib.util, sys

s = importlib.util.find_spec(sys.argv[1])
print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')
