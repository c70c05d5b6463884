import os, sys
try:
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
except Exception:
    pass
os.execvp(sys.argv[1], sys.argv[1:])
