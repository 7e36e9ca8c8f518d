__version__ = version = '0.33.0'
__version_tuple__ = version_tuple = (0, 33, 0)
