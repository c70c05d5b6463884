"""Counts the pixels of each given colour in a PNG (8-bit RGB or RGBA, not interlaced), with
Python's standard library only: `png_colors.py FILE RRGGBB...` prints `RRGGBB COUNT` a line.
For the timeline's check in headless Chromium (tests/integration/output.rs)."""
import struct
import sys
import zlib


def rows(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, idat = 8, b""
    while at < len(data):
        (n,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + n]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
        elif kind == b"IDAT":
            idat += body
        at += 12 + n
    px = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * px
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, row = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for x in range(stride):
            a = row[x - px] if x >= px else 0
            b = prev[x]
            c = prev[x - px] if x >= px else 0
            if kind == 1:
                row[x] = (row[x] + a) & 255
            elif kind == 2:
                row[x] = (row[x] + b) & 255
            elif kind == 3:
                row[x] = (row[x] + ((a + b) >> 1)) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[x] = (row[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        yield [bytes(row[x : x + 3]) for x in range(0, stride, px)]
        prev = row


def main():
    wanted = {bytes.fromhex(c): 0 for c in sys.argv[2:]}
    for row in rows(sys.argv[1]):
        for pixel in row:
            if pixel in wanted:
                wanted[pixel] += 1
    for colour, count in wanted.items():
        print(colour.hex().upper(), count)


main()
