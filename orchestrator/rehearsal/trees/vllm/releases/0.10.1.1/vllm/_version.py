__version__ = version = '0.10.1.1'
__version_tuple__ = version_tuple = (0, 10, 1, 1)
