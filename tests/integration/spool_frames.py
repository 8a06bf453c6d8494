"""Reads corrald's spool segment files from outside the agent (docs/pipeline.md "Spool").

Each frame: u32 magic "CSP1", u32 stored length, u64 seq, u8 prio, u8 encoding, 2 zero bytes,
u32 CRC32C, then the stored bytes. Encoding 0 is the record as is; 1 is one zstd frame against
the raw-content dictionary accounting/spool_dict_v1.ndjson.
"""
import ctypes
import ctypes.util
import os
import struct

HDR = 24
_DICT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "accounting",
                     "spool_dict_v1.ndjson")
_dctx = None


def frames(path):
    """(offset, seq, encoding, stored length) of each frame, in file order."""
    b = open(path, "rb").read()
    pos = 0
    while pos + HDR <= len(b):
        n, seq = struct.unpack_from("<IQ", b, pos + 4)
        yield pos, seq, b[pos + 17], n
        pos += HDR + n


def record(path, pos):
    """The record of the frame at pos, decoded."""
    with open(path, "rb") as f:
        f.seek(pos)
        h = f.read(HDR)
        n = struct.unpack_from("<I", h, 4)[0]
        data = f.read(n)
    enc = h[17]
    if enc == 0:
        return data
    if enc != 1:
        raise ValueError("unknown spool encoding %d" % enc)
    return _unpack(data)


def _unpack(data):
    """Decompresses one dictionary-v1 frame with libzstd (ctypes: the library corrald uses)."""
    global _dctx
    if _dctx is None:
        lib = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
        lib.ZSTD_createDCtx.restype = ctypes.c_void_p
        lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
        lib.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.ZSTD_decompress_usingDict.restype = ctypes.c_size_t
        lib.ZSTD_decompress_usingDict.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
            ctypes.c_char_p, ctypes.c_size_t]
        lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
        _dctx = (lib, lib.ZSTD_createDCtx(), open(_DICT, "rb").read())
    lib, dctx, d = _dctx
    size = lib.ZSTD_getFrameContentSize(data, len(data))
    if size >= (1 << 63):
        raise ValueError("not a zstd frame with its size")
    out = ctypes.create_string_buffer(size or 1)
    k = lib.ZSTD_decompress_usingDict(dctx, out, size, data, len(data), d, len(d))
    if lib.ZSTD_isError(k) or k != size:
        raise ValueError("zstd frame does not decode")
    return out.raw[:size]
